"""Placement plug-ins from Python (flexplan.placement, docs/placements.md):
the example classes against hand-computed layouts, their plans against the
plans of the built-in specs holding the same elements (the .fpir text equal),
a plug-in named in the spec through the registry, and planted faulty
plug-ins - an element held twice, one held by no rank, a piece outside the
param, a misaligned piece, an exception in the plug-in - each refused with
its located FlexplanError and no plan."""
import pytest

import flexplan
from flexplan import placement as fpl

MLP = {"format": "flexplan.model.v1", "name": "mlp", "modules": [
    {"name": "fc0", "params": [{"name": "fc0.weight", "shape": [20, 13]}, {"name": "fc0.bias", "shape": [20]}]},
    {"name": "fc1", "params": [{"name": "fc1.weight", "shape": [19, 20]}, {"name": "fc1.bias", "shape": [19]}]},
    {"name": "fc2", "params": [{"name": "fc2.weight", "shape": [11, 19]}, {"name": "fc2.bias", "shape": [11]}]},
    {"name": "fc3", "params": [{"name": "fc3.weight", "shape": [5, 11]}]}]}
MP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "main_grad_dtype": "fp32"}


def spec(world, p0, p1, p3):
    return {"format": "flexplan.spec.v1", "mesh": {"world_size": world}, "defaults": {"mixed_precision": MP32},
            "buckets": [{"name": "fc0", "params": ["fc0.*"], "placement": p0},
                        {"name": "fc1", "params": ["fc1.*"], "placement": p1},
                        {"name": "fc2", "params": ["fc2.*"]},
                        {"name": "fc3", "params": ["fc3.*"], "placement": p3}]}


class P:  # a stand-in for the Param the compiler passes
    def __init__(self, name, shape, group_size):
        self.name, self.shape, self.group_size = name, tuple(shape), group_size
        self.numel = 1
        for s in shape:
            self.numel *= s


def test_block_cyclic_by_hand():
    bc = fpl.BlockCyclic(8)
    w = P("fc0.weight", [20, 13], 3)  # blocks of 8 rows: [0,8) [8,16) [16,20)
    assert [bc.pieces(w, g) for g in range(3)] == [[(0, 104)], [(104, 104)], [(208, 52)]]
    w.group_size = 2  # rank 0 gets blocks 0 and 2
    assert [bc.pieces(w, g) for g in range(2)] == [[(0, 104), (208, 52)], [(104, 104)]]
    assert bc.describe(w) == (13, "all_gather_v", "reduce_scatter_v")
    b3 = fpl.BlockCyclic(3)
    w.group_size = 4
    assert b3.pieces(w, 1) == [(39, 39), (195, 39)]
    assert b3.pieces(w, 2) == [(78, 39), (234, 26)]


def test_expert_owned_by_hand():
    eo = fpl.ExpertOwned()
    p = P("layers.3.experts.5.w1", [4, 6], 4)
    assert [eo.pieces(p, g) for g in range(4)] == [[], [(0, 24)], [], []]
    with pytest.raises(ValueError, match="no expert index after 'experts.'"):
        eo.describe(P("layers.3.router.weight", [4], 4))


def test_block_cyclic_plan_is_ragged():
    k = {"kind": "block_cyclic"}
    a = flexplan.compile(MLP, spec(3, k, k, k), placements=fpl.BlockCyclic(8))
    b = flexplan.compile(MLP, spec(3, {"kind": "ragged_shard", "units": [2, 2, 1]},
                                   {"kind": "ragged_shard", "units": [8, 8, 3]},
                                   {"kind": "ragged_shard", "units": [1, 0, 0]}))
    assert a.to_ir() == b.to_ir()


def test_block_cyclic_several_blocks():
    """blocks of 4 rows of fc0 at 2 ranks: rank 0 holds blocks 0, 2, 4, rank 1
    blocks 1, 3 (cyclic_shard: staging chunks of 156, strided copies out);
    blocks of 8 leave a short last block (rows 16-19, 52 elements), rank 0's
    second: its table {0, +156}, {104, +104}, and the short block copied
    alone from staging element 104 to param element 208"""
    s = spec(2, {"kind": "block_cyclic"}, {"kind": "shard"}, {"kind": "shard"})
    ir = flexplan.compile(MLP, s, placements=fpl.BlockCyclic(4)).to_ir()
    assert "cyclic_shard  comm=world  tab=fc0.weight  chunk=156  " in ir
    assert "dst=fc0.weight[208]  src=fc0.gstage[624]  rows=2  dpitch=416  spitch=208" in ir
    ir = flexplan.compile(MLP, s, placements=fpl.BlockCyclic(8)).to_ir()
    assert "cyclic_shard  comm=world  tab=fc0.weight  chunk=156  " in ir
    assert "table  0  fc0.weight        n=2\n  off 0 104\n  cnt 156 104\n" in ir
    assert "n=52   dst=fc0.weight[832]  src=fc0.gstage[416]  bucket=fc0" in ir


def test_uneven_runs_refused():
    """several runs per rank that are not blocks dealt round-robin: refused"""
    s = spec(2, {"kind": "faulty"}, {"kind": "shard"}, {"kind": "shard"})
    bad = Faulty("uneven")
    bad.unshard = "all_gather_v"
    bad.reduce = "reduce_scatter_v"
    with pytest.raises(flexplan.FlexplanError) as e:
        flexplan.compile(MLP, s, placements=bad)
    assert str(e.value) == AT + ("rank 0 holds the runs [0, 50) and [150, 260) of param 'fc0.weight': several runs per "
                                 "rank lower only as blocks of one size dealt round-robin, the param's last block "
                                 "possibly shorter (all_gather_v), or as the even split of a dim (all_gather)")


def test_registered_expert_owned_plan_is_owned():
    fpl.register(fpl.ExpertOwned(marker="fc"), name="by_layer")
    try:
        k = {"kind": "by_layer"}
        a = flexplan.compile(MLP, spec(3, k, k, k))
    finally:
        fpl.unregister("by_layer")
    b = flexplan.compile(MLP, spec(3, {"kind": "owned", "rank": 0}, {"kind": "owned", "rank": 1},
                                   {"kind": "owned", "rank": 0}))
    assert a.to_ir() == b.to_ir()
    with pytest.raises(flexplan.FlexplanError, match='/buckets/0/placement/kind: expected one of .* or the name of a registered placement plug-in, got "by_layer"'):
        flexplan.compile(MLP, spec(3, k, k, k))  # unregistered again


class Faulty(fpl.Placement):
    """rank g of 2 holds half the param, but for the planted fault"""
    name = "faulty"

    def __init__(self, fault):
        self.fault = fault
        if fault == "misaligned":
            self.align_elems = 4

    def pieces(self, param, rank):
        h = param.numel // 2
        b, c = rank * h, (param.numel - h if rank else h)
        if self.fault == "twice" and rank == 1:
            b, c = 7, param.numel - 7
        if self.fault == "never" and rank == 1:
            b, c = h + 1, param.numel - h - 1
        if self.fault == "outside" and rank == 1:
            c += 1
        if self.fault == "misaligned":
            b, c = (5, param.numel - 5) if rank else (0, 5)
        if self.fault == "raises" and rank == 1:
            raise RuntimeError("cannot place %s" % param.name)
        if self.fault == "uneven":
            return [(50, 100)] if rank else [(0, 50), (150, param.numel - 150)]
        return [(b, c)]


AT = "<spec>:1:230: error: /buckets/0/placement: placement plug-in 'faulty': "


@pytest.mark.parametrize("fault,msg", [
    ("twice", "element 7 of param 'fc0.weight' is held twice (rank 0 and rank 1)"),
    ("never", "element 130 of param 'fc0.weight' is held by no rank"),
    ("outside", "rank 1's piece 0 [130, +131) lies outside param 'fc0.weight' of 260 elements"),
    ("misaligned", "rank 0's piece 0 [0, 5) of param 'fc0.weight' is not on the 4-element alignment the "
                   "placement claims"),
    ("raises", "param 'fc0.weight', rank 1: RuntimeError: cannot place fc0.weight"),
])
def test_faulty_plugins_refused(fault, msg):
    s = spec(2, {"kind": "faulty"}, {"kind": "shard"}, {"kind": "shard"})
    with pytest.raises(flexplan.FlexplanError) as e:
        flexplan.compile(MLP, s, placements=[Faulty(fault)])
    assert str(e.value) == AT + msg
    assert e.value.status == flexplan._lib.FP_ERR_INPUT  # pylint: disable=protected-access


def test_unknown_collective_refused():
    bad = Faulty("twice")
    bad.unshard = "scatter"
    s = spec(2, {"kind": "faulty"}, {"kind": "shard"}, {"kind": "shard"})
    with pytest.raises(flexplan.FlexplanError) as e:
        flexplan.compile(MLP, s, placements=bad)
    assert str(e.value) == AT + ("param 'fc0.weight': ValueError: unknown unshard collective 'scatter' (expected one "
                                 "of all_gather, all_gather_v, broadcast, none)")


def test_bad_arguments():
    with pytest.raises(TypeError):
        flexplan.compile(MLP, None, placements=[object()])
    with pytest.raises(flexplan.FlexplanError, match="'shard' is a built-in placement kind"):
        flexplan.compile(MLP, None, placements={"shard": Faulty("twice")})
    with pytest.raises(TypeError):
        fpl.register(42)
