"""reshard_worker.py - one rank of test_reshard.py's MPI run: two plans of
tests/mpi/mlp on the same number of ranks (full_shard, then the placements
spec: shard dim 1, ragged, owned, replicate), flexplan.Executor for each,
FROM's main shards filled from a formula of (param, flat index), the
transfer run through Transfer.run, and every TO shard element compared with
the formula's fp32 value (bit for bit: both plans keep fp32 main weights).
Prints "ok rank R" or the mismatches and exits 1."""
import json
import math
import os
import struct
import sys

if any(a.endswith("=bf16_wire") for a in sys.argv[2:]):
    import torch  # before flexplan's library: torch brings its own NCCL

import flexplan
from flexplan import executor as E

src = os.environ["FLEXPLAN_SOURCE_DIR"]
rank, world = E.mpi_init()
model = os.path.join(src, "tests", "mpi", "mlp.model.json")


def spec(name):
    s = json.load(open(os.path.join(src, "tests", "mpi", name + ".spec.json")))
    s["mesh"]["world_size"] = world
    return s


def value(i, e):
    return struct.unpack("f", struct.pack("f", math.sin(0.37 * e + 1.3 * i) * (1 + (e % 5))))[0]


# the placement plug-ins tests/mpi's plug-in specs name (docs/placements.md)
flexplan.placement.register(flexplan.placement.BlockCyclic(1), name="row_cyclic")
flexplan.placement.register(flexplan.placement.BlockCyclic(8))
# a user reshard transform (docs/reshard.md "Transforms"): fp32 params as
# bf16 on the wire, cast with torch; it records the slices it finalized
finalized = {}
if any(a.endswith("=bf16_wire") for a in sys.argv[2:]):
    class Bf16Wire(flexplan.transform.Transform):
        name = "bf16_wire"

        def should_transform(self, param):
            return param.from_dtype == "fp32" and param.to_dtype == "fp32"

        def send_wires(self, param, begin, count):
            return [("bf16", count)]

        def prepare_send(self, param, begin, count, src, wires):
            b = torch.frombuffer(src, dtype=torch.float32).to(torch.bfloat16)
            torch.frombuffer(wires[0], dtype=torch.bfloat16).copy_(b)

        def finalize_recv(self, param, begin, count, wires, dst):
            torch.frombuffer(dst, dtype=torch.float32).copy_(torch.frombuffer(wires[0], dtype=torch.bfloat16).float())
            finalized.setdefault(param.name, []).append((begin, count))

    flexplan.transform.register(Bf16Wire())


def through_wire(n, e):
    return any(b <= e < b + c for b, c in finalized.get(n, []))


def bf16(v):
    import torch
    return torch.tensor([v], dtype=torch.float32).to(torch.bfloat16).float().item()


# "X:Y": from spec X to spec Y; "Y": from full_shard
src_spec, _, dst_spec = sys.argv[1].rpartition(":")
A = flexplan.compile(model, spec(src_spec or "full_shard"))
B = flexplan.compile(model, spec(dst_spec))
t = flexplan.reshard(A, B, transform=sys.argv[2:] or None)
xa, xb = flexplan.Executor(A), flexplan.Executor(B)
names = [p.name for p in xa.params]
for i, n in enumerate(names):
    v = xa.param(n)
    buf = v.buffer("main")
    for s, f, ln in v.shard.pairs():
        for q in range(ln):
            buf[s + q] = value(i, f + q)
t.run(xa, xb)
bad = []
for i, n in enumerate(names):
    v = xb.param(n)
    buf = v.buffer("main")
    mx = any(n.startswith(p.split("=")[0].rstrip("*")) for p in sys.argv[2:] if p.split("=")[1].startswith("mxfp8"))
    for s, f, ln in v.shard.pairs():
        for q in range(ln):
            want, got = value(i, f + q), buf[s + q]
            if through_wire(n, f + q):  # rounded to bf16 by torch, the reference
                want = bf16(want)
            ok = abs(got - want) <= abs(want) / 16 + 2 ** -6 if mx else got == want
            if not ok and len(bad) < 5:
                bad.append(f"{n}[{f + q}] = {got}, want {want}")
info = t.info
xa.destroy()
xb.destroy()
E.mpi_finalize()
if bad:
    print(f"rank {rank}: " + "; ".join(bad))
    sys.exit(1)
nfin = sum(c for r in finalized.values() for b, c in r)
print(f"ok rank {rank} wire {info['wire_bytes']} lower bound {info['lower_bound']} finalized {nfin}")
