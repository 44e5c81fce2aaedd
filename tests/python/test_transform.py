"""test_transform.py - reshard transform plug-ins from Python
(python/flexplan/transform.py, docs/reshard.md "Transforms"): a user
Transform (fp32 params as bf16 on the wire, cast by torch) is compiled into
the transfer (the text form and JSON name it and every op's wire tensors,
the JSON loads back and binds by name), faulty ones are refused with the
library's message naming them (a wire count mismatch between send_wires
and recv_wires, an exception in send_wires, an unknown name), and run under
mpiexec every TO element equals torch's bf16 rounding of the FROM value
where a finalize_recv wrote it, the exact value elsewhere."""
import json
import os
import re

import pytest
import torch

import flexplan
from conftest import SOURCE_DIR

MPI_DIR = os.path.join(SOURCE_DIR, "tests", "mpi")


def spec(name, world):
    s = json.load(open(os.path.join(MPI_DIR, name + ".spec.json")))
    s["mesh"]["world_size"] = world
    return s


class Bf16Wire(flexplan.transform.Transform):
    name = "bf16_wire"

    def should_transform(self, param):
        return param.from_dtype == "fp32"

    def send_wires(self, param, begin, count):
        return [("bf16", count)]

    def prepare_send(self, param, begin, count, src, wires):
        torch.frombuffer(wires[0], dtype=torch.bfloat16).copy_(torch.frombuffer(src, dtype=torch.float32))

    def finalize_recv(self, param, begin, count, wires, dst):
        torch.frombuffer(dst, dtype=torch.float32).copy_(torch.frombuffer(wires[0], dtype=torch.bfloat16))


class ShortRecv(Bf16Wire):
    name = "short_recv"

    def recv_wires(self, param, begin, count):
        return [("bf16", count - 1)]


class Undecided(Bf16Wire):
    name = "undecided"

    def should_transform(self, param):
        raise KeyError(param.name)


class Broken(Bf16Wire):
    name = "broken"

    def send_wires(self, param, begin, count):
        raise RuntimeError("no wire for %s" % param.name)


@pytest.fixture(scope="module")
def plans():
    model = os.path.join(MPI_DIR, "mlp.model.json")
    return flexplan.compile(model, spec("full_shard", 2)), flexplan.compile(model, spec("full_shard", 2))


def test_compiled_and_loaded(plans, tmp_path):
    a, b = plans
    t = flexplan.reshard(a, b, transform={"fc0.*": Bf16Wire()}, to_offset=2)
    ir = t.to_ir()
    assert "param fc0.weight numel=260 transform=bf16_wire" in ir
    assert "param fc1.weight numel=380\n" in ir  # the pattern narrows it
    sends = re.findall(r"  prep_send fp32 n=(\d+) param=fc0\.weight\[(\d+)\.\.(\d+)\) dst=stage\+\d+ "
                       r"src=from\+\d+ wires=bf16:(\d+)\n", ir)
    fins = re.findall(r"  finalize fp32 n=(\d+) param=fc0\.weight\[(\d+)\.\.(\d+)\) dst=to\+\d+ src=stage\+\d+ "
                      r"wires=bf16:(\d+)\n", ir)
    # disjoint rank sets: every element of fc0.weight goes through the transform once, as many bf16 as elements
    assert sum(int(n) for n, _, _, _ in sends) == sum(int(n) for n, _, _, _ in fins) == 260
    assert all(n == w for n, _, _, w in sends + fins)
    # every fc0 element crosses the wire as 2 bytes, the rest as 4
    assert t.info["wire_bytes"] == 2 * 280 + 4 * (380 + 19 + 209 + 11 + 55)
    p = t.save(tmp_path / "t.xfer.json")
    u = flexplan.load_transfer(p, transforms={"bf16_wire": Bf16Wire()})
    assert u.to_json() == t.to_json()


def test_faulty(plans):
    a, b = plans
    with pytest.raises(flexplan.FlexplanError, match=r"op \d+ \(process 2, recv\): error: receives 191 bf16 but its "
                       r"matching send, op \d+, sends 192 bf16 \(transform 'short_recv': its prepare_send and "
                       r"prepare_recv give other wire tensors"):
        flexplan.reshard(a, b, transform={"*": ShortRecv()}, to_offset=2)
    with pytest.raises(flexplan.FlexplanError, match=r"transform 'broken': send_wires \(prepare_send\) for param "
                       r"'fc0.weight' elements \[0,\d+\): RuntimeError: no wire for fc0.weight"):
        flexplan.reshard(a, b, transform={"*": Broken()}, to_offset=2)
    with pytest.raises(flexplan.FlexplanError, match=r"transform 'undecided': should_transform\(fc0.weight\): KeyError: "
                       r"'fc0.weight'"):
        flexplan.reshard(a, b, transform={"*": Undecided()}, to_offset=2)
    with pytest.raises(flexplan.FlexplanError, match=r"transform '\*': unknown transform 'nope'"):
        flexplan.reshard(a, b, transform={"*": "nope"})


def test_mxfp8_on_the_contract(plans):
    """flexplan.transform.MXFP8 (the library's fp_transform_mxfp8): on the
    wire, the built-in's bytes sender-side, FROM's unchanged receiver-side"""
    a, b = plans
    builtin = flexplan.reshard(a, b, transform={"*": "mxfp8"}, to_offset=2)
    sender = flexplan.reshard(a, b, transform={"*": flexplan.transform.MXFP8("sender")}, to_offset=2)
    receiver = flexplan.reshard(a, b, transform={"*": "mxfp8_receiver"}, to_offset=2)
    assert sender.info["wire_bytes"] == builtin.info["wire_bytes"] < builtin.info["lower_bound"]
    assert receiver.info["wire_bytes"] == receiver.info["lower_bound"]
    assert "transform=mxfp8_sender" in sender.to_ir() and "wires=e4m3:" in sender.to_ir()
    with pytest.raises(ValueError, match="mode 'middle'"):
        flexplan.transform.MXFP8("middle")


@pytest.mark.parametrize("world,to,transform", [(2, "full_shard:no_shard", "fc*=bf16_wire"),
                                                (3, "placements-w3", "fc*=bf16_wire"),
                                                (3, "placements-w3", "fc*=mxfp8_sender"),
                                                (2, "no_shard", "fc0.*=mxfp8_receiver")])
def test_run_mpi(world, to, transform):
    from torch_mpi import run_mpi
    rc, out = run_mpi(world, "reshard_worker.py", to, transform, timeout=180)
    assert rc == 0, out
    assert out.count("ok rank") == world, out
    if "bf16" in transform:
        # (by pattern: mpiexec may merge the ranks' lines, "finalized 673ok rank 1 ...")
        assert sum(int(n) for n in re.findall(r"finalized (\d+)", out)) > 0, out
