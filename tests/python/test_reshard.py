"""test_reshard.py - flexplan.reshard (python/flexplan/reshard.py) against the
command line, its independent reference: the transfer's JSON, text form and
explain table are `flexplan reshard`'s byte for byte; the figures are the
summary's (bytes on the wire equal the lower bound without transforms, fewer
with MXFP8); plans of different models, bad transforms and options raise
FlexplanError with the library's message."""
import copy
import json
import os

import pytest

import flexplan
from conftest import SOURCE_DIR, run_cli

MPI_DIR = os.path.join(SOURCE_DIR, "tests", "mpi")


def spec(name, world):
    s = json.load(open(os.path.join(MPI_DIR, name + ".spec.json")))
    s["mesh"]["world_size"] = world
    return s


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    d = tmp_path_factory.mktemp("plans")
    model = os.path.join(MPI_DIR, "mlp.model.json")
    a = flexplan.compile(model, spec("full_shard", 4))
    b = flexplan.compile(model, spec("placements-w3", 3))
    pa, pb = str(d / "a.plan.json"), str(d / "b.plan.json")
    a.save(pa), b.save(pb)
    return a, b, pa, pb, d


def test_matches_cli(plans):
    a, b, pa, pb, d = plans
    cli = os.environ["FLEXPLAN_CLI"]
    t = flexplan.reshard(a, b, transform={"fc0.*": "mxfp8"})
    out = str(d / "x.json")
    rc, so, se = run_cli(cli, "reshard", pa, pb, "--transform", "fc0.*=mxfp8", "-o", out, "--emit=ir")
    assert rc == 0, se
    assert so == t.to_ir()
    assert open(out).read() == t.to_json()
    rc, so, se = run_cli(cli, "reshard", pa, pb, "--transform", "fc0.*=mxfp8", "--emit=explain")
    assert so == t.explain()
    rc, so, se = run_cli(cli, "reshard", pa, pb, "--transform", "fc0.*=mxfp8")
    summary = json.loads(so)
    info = t.info
    for k in ("wire_bytes", "local_bytes", "max_send_bytes", "max_recv_bytes"):
        assert summary[k] == info[k], k
    assert summary["lower_bound_bytes"] == info["lower_bound"]
    assert info["wire_bytes"] < info["lower_bound"]  # MXFP8 on the wire
    assert json.loads(t.to_trace())["traceEvents"]


def test_figures(plans):
    a, b, *_ = plans
    for x, y in ((a, b), (b, a)):
        i = flexplan.reshard(x, y).info
        assert i["wire_bytes"] == i["lower_bound"] > 0
        assert i["processes"] == max(x.world_size, y.world_size)
    i = flexplan.reshard(a, b, to_offset=4).info
    assert i["processes"] == 7 and i["local_bytes"] == 0 and i["wire_bytes"] == i["lower_bound"]
    i = flexplan.reshard(a, b, transform=["fc*.weight=mxfp8"]).info
    assert i["wire_bytes"] < i["lower_bound"]


def test_errors(plans):
    a, b, *_ = plans
    tied = flexplan.compile(os.path.join(MPI_DIR, "mlp-tied.model.json"), spec("full_shard", 4))
    with pytest.raises(flexplan.FlexplanError, match="different models: 'mlp'.*'mlp-tied'"):
        flexplan.reshard(a, tied)
    i = flexplan.reshard(a, b, what="weights+optimizer").info  # AdamW state (the default) too
    assert i["wire_bytes"] == i["lower_bound"] == 3 * flexplan.reshard(a, b).info["wire_bytes"]
    sgd = flexplan.compile(os.path.join(MPI_DIR, "mlp.model.json"), dict(spec("full_shard", 3), optimizer={"type": "sgd"}))
    with pytest.raises(flexplan.FlexplanError, match="this plan holds sgd state and .* holds adamw") as e:
        flexplan.reshard(a, sgd, what="weights+optimizer")
    assert e.value.status_name == "FP_ERR_INPUT"
    with pytest.raises(flexplan.FlexplanError, match="unknown transform 'fp4'"):
        flexplan.reshard(a, b, transform={"fc*": "fp4"})
    with pytest.raises(flexplan.FlexplanError, match=r"must lie in \[0, 4\]"):
        flexplan.reshard(a, b, to_offset=5)
    m = json.load(open(os.path.join(MPI_DIR, "mlp.model.json")))
    m2 = copy.deepcopy(m)
    m2["modules"][1]["params"][1]["shape"] = [18]
    c = flexplan.compile(m2, spec("full_shard", 2))
    with pytest.raises(flexplan.FlexplanError, match=r"'fc1.bias' has shape \[18\] here and \[19\]"):
        flexplan.reshard(a, c)


def test_keep_mxfp8(tmp_path):
    """Into a plan that keeps the frozen fc1.* as MXFP8: the CLI's transfer
    byte for byte, MXFP8 on the wire and no dequantize; from it: read by
    dequantizing (the CLI's byte for byte); from it into itself: refused."""
    model = os.path.join(MPI_DIR, "mlp-frozen.model.json")
    a = flexplan.compile(model, spec("full_shard", 4))
    k = flexplan.compile(model, spec("mxfp8-keep", 2))
    pa, pk = str(tmp_path / "a.plan.json"), str(tmp_path / "k.plan.json")
    a.save(pa), k.save(pk)
    t = flexplan.reshard(a, k)
    rc, so, se = run_cli(os.environ["FLEXPLAN_CLI"], "reshard", pa, pk, "--emit=ir")
    assert rc == 0, se
    assert so == t.to_ir()
    assert "param fc1.weight numel=380 wire=mxfp8" in so and "dequantize_mxfp8" not in so
    assert t.info["wire_bytes"] == t.info["lower_bound"]  # flat chunks: every block from one sender
    back = flexplan.reshard(k, a)
    rc, so, se = run_cli(os.environ["FLEXPLAN_CLI"], "reshard", pk, pa, "--emit=ir")
    assert rc == 0, se
    assert so == back.to_ir()
    assert "param fc1.weight numel=380 source=mxfp8" in so and "dequantize_mxfp8 fp32<-e4m3" in so
    kk = flexplan.reshard(k, k, to_offset=1)  # kept into kept: the bytes pass through
    rc, so, se = run_cli(os.environ["FLEXPLAN_CLI"], "reshard", pk, pk, "--to-offset", "1", "--emit=ir")
    assert rc == 0, se
    assert so == kk.to_ir()
    assert "copy e8m0 n=12 param=fc1.weight" in so and "quantize_mxfp8" not in so
    assert kk.info["wire_bytes"] == kk.info["lower_bound"]


def test_save_load(plans, tmp_path):
    a, b, *_ = plans
    t = flexplan.reshard(a, b, transform={"fc1.*": "mxfp8"})
    p = str(tmp_path / "t.xfer.json")
    t.save(p)
    back = flexplan.load_transfer(p)
    assert back.to_json() == t.to_json()
    assert back.to_ir() == t.to_ir()
    d = json.load(open(p))
    d["procs"][1]["ops"][0]["peer"] = 1  # a send to itself
    q = str(tmp_path / "bad.xfer.json")
    json.dump(d, open(q, "w"))
    with pytest.raises(flexplan.FlexplanError,
                       match=r"bad.xfer.json:\d+:\d+: error: /procs/1/ops/0: peer 1 is not another process") as e:
        flexplan.load_transfer(q)
    assert e.value.status_name == "FP_ERR_PLAN"
    d["procs"][1]["ops"][0]["peer"] = 0
    d["comment"] = "hand-edited"
    json.dump(d, open(q, "w"))
    with pytest.raises(flexplan.FlexplanError, match=r"bad.xfer.json:\d+:\d+: error: /comment: unknown member 'comment' "
                             r"\(expected one of: format, model, what, from, to, processes, figures, params, procs\)$"):
        flexplan.load_transfer(q)
    del d["comment"]
    d["processes"] = "4"
    json.dump(d, open(q, "w"))
    with pytest.raises(flexplan.FlexplanError, match=r"bad.xfer.json:\d+:\d+: error: /processes: expected an integer"):
        flexplan.load_transfer(q)


@pytest.mark.parametrize("world,to,transform", [(3, "placements-w3", []), (2, "no_shard", []),
                                                (3, "placements-w3", ["fc0.weight=mxfp8"]),
                                                # placement plug-ins: rows dealt round-robin (cyclic_shard), both ways
                                                (2, "row-cyclic", []), (3, "row-cyclic:placements-w3", []),
                                                # blocks of 8 rows at 2 ranks: a short last block, both ways
                                                (2, "block-cyclic", []), (2, "block-cyclic:full_shard", [])])
def test_run_mpi(world, to, transform):
    """Transfer.run between two flexplan.Executors under mpiexec (same world
    size: the Python Executor bootstraps on MPI_COMM_WORLD)."""
    from torch_mpi import run_mpi
    rc, out = run_mpi(world, "reshard_worker.py", to, *transform, timeout=120)
    assert rc == 0, out
    assert out.count("ok rank") == world, out
