"""test_capi_exec.py - the executor's C API straight from Python (ctypes,
flexplan._lib), on a plan compiled in memory (no file), under mpiexec -n 1:
fp_mpi_init instead of mpi4py, fp_exec_create from a compiled plan handle,
one step of hooks in the trainer's order, the views, the trainer's
all-reduce, the stats, and FP_ERR_ORDER's
message through FlexplanError. The Executor class (flexplan/executor.py)
builds on exactly these calls."""
import ctypes
import json
import os

import pytest

import flexplan
from flexplan import _lib as L
from conftest import SOURCE_DIR


def one_rank_plan(ga=1):
    d = json.load(open(os.path.join(SOURCE_DIR, "examples", "tiny-mlp.json")))
    spec = dict(d["spec"], mesh={"world_size": 1, "ranks_per_node": 1}, grad_accumulation=ga)
    return flexplan.compile(d["model"], spec)


def rehashed(path, text):
    """text written to path with the content hash the loader computes (its
    mismatch message names it): a plan tampered with after the compile"""
    import re
    open(path, "w").write(text)
    try:
        flexplan.load(path).close()
        return
    except flexplan.FlexplanError as e:
        m = re.search(r"file says (fnv1a64:[0-9a-f]+), content is (fnv1a64:[0-9a-f]+)", str(e))
        assert m, str(e)
        open(path, "w").write(text.replace(m.group(1), m.group(2), 1))


def test_semantic_check_at_create(tmp_path):
    """A plan that passes rules 1-8 but not rule 9 (every grad scale halved)
    loads, and an Executor of it is refused at create with the rule-9
    message; load(semantic=True) refuses it located; load(unchecked=True)
    is the documented opt-out. Two micro-batches: one rank and one
    micro-batch have no grad scale to halve (a divide by 1 is not emitted)."""
    assert L.lib().fp_mpi_init(None, None) == L.FP_OK  # before the test below finalizes MPI
    good = str(tmp_path / "good.json")
    one_rank_plan(ga=2).save(good)
    d = json.load(open(good))
    assert any(o["op"] == "scale" for o in d["ops"])
    for o in d["ops"]:
        if o["op"] == "scale":
            o["alpha"] = o["alpha"] / 2
    bad = str(tmp_path / "bad.json")
    rehashed(bad, json.dumps(d, indent=1))
    with flexplan.load(good) as plan:  # a compiled plan passes at create
        with flexplan.Executor(plan, rank=0, world_size=1):
            pass
    with flexplan.load(bad) as plan:  # rules 1-8 pass
        with pytest.raises(flexplan.FlexplanError) as e:
            flexplan.Executor(plan, rank=0, world_size=1)
        assert e.value.status_name == "FP_ERR_PLAN"
        assert "fails the semantic check (rule 9" in str(e.value)
        assert "scaled 0.25, the step's mean needs 1/2: 1 ranks x 2 micro-batches" in str(e.value)
    with pytest.raises(flexplan.FlexplanError) as e:
        flexplan.load(bad, semantic=True)
    assert str(e.value).startswith(bad + ":") and ": error: /segments/" in str(e.value)
    with flexplan.load(bad, unchecked=True) as plan:
        with flexplan.Executor(plan, rank=0, world_size=1):
            pass
    with pytest.raises(flexplan.FlexplanError, match="contradict"):
        flexplan.load(bad, semantic=True, unchecked=True)


def test_one_step_from_a_compiled_plan():
    lib = L.lib()
    rank, size = ctypes.c_int(-1), ctypes.c_int(0)
    assert lib.fp_mpi_init(ctypes.byref(rank), ctypes.byref(size)) == L.FP_OK
    assert (rank.value, size.value) == (0, 1)
    # a second init is a no-op
    assert lib.fp_mpi_init(None, None) == L.FP_OK
    plan = one_rank_plan()
    cfg = L.fp_exec_config(backend=L.FP_BACKEND_MPI, rank=0, world_size=1)
    x = ctypes.c_void_p()
    st = lib.fp_exec_create(plan._handle, ctypes.byref(cfg), ctypes.byref(x))
    assert st == L.FP_OK, L.text(lib.fp_exec_errmsg(x))
    try:
        info = plan.info
        view = L.fp_param_view()
        assert lib.fp_exec_param(x, b"fc0.weight", ctypes.byref(view)) == L.FP_OK
        assert L.text(view.name) == "fc0.weight" and list(view.shape[:view.ndim]) == [32, 16]
        assert view.main.data and view.main.numel >= 32 * 16 and view.requires_grad
        # out of order: the library's message
        st = lib.fp_exec_hook(x, L.FP_HOOK_PRE_OPTIMIZER, -1)
        msg = L.text(lib.fp_exec_errmsg(x))
        err = flexplan.FlexplanError(st, msg)
        assert err.status_name == "FP_ERR_ORDER" and "expects step_begin" in str(err)
        hooks = [(L.FP_HOOK_STEP_BEGIN, -1)]
        for m in range(info["modules"]):
            hooks += [(L.FP_HOOK_PRE_FORWARD, m), (L.FP_HOOK_POST_FORWARD, m)]
        for m in reversed(range(info["modules"])):
            hooks += [(L.FP_HOOK_PRE_BACKWARD, m), (L.FP_HOOK_POST_BACKWARD, m)]
        hooks += [(L.FP_HOOK_PRE_OPTIMIZER, -1), (L.FP_HOOK_POST_OPTIMIZER, -1)]
        for h, m in hooks:
            if h == L.FP_HOOK_POST_OPTIMIZER:
                vals = (ctypes.c_double * 2)(1.5, -2.0)
                assert lib.fp_exec_all_reduce_f64(x, vals, 2) == L.FP_OK
                assert list(vals) == [1.5, -2.0]
            st = lib.fp_exec_hook(x, h, m)
            assert st == L.FP_OK, L.text(lib.fp_exec_errmsg(x))
        stats = L.fp_exec_stats()
        assert lib.fp_exec_sync(x) == L.FP_OK
        assert lib.fp_exec_get_stats(x, ctypes.byref(stats)) == L.FP_OK
        assert stats.steps == 1 and stats.hooks == len(hooks) and stats.hook_allocations == 0
        assert stats.plan_hash == int(info["hash"].split(":")[1], 16)
    finally:
        lib.fp_exec_destroy(x)
        plan.close()
    assert lib.fp_mpi_finalize() == L.FP_OK
    assert lib.fp_mpi_finalize() == L.FP_OK  # finalized already: a no-op
    # MPI cannot start again once finalized
    assert lib.fp_mpi_init(None, None) == L.FP_ERR_BACKEND



def test_weight_persistent_matches_plan_json(tmp_path):
    """fp_plan_param_weight_persistent (what flexplan.torch asks instead of
    reading plan.json) against plan.json itself: a param's compute weight is
    persistent exactly when its weight's buffer has kind "persistent". The
    plan holds both kinds (no_shard keeps fc1's weights whole)."""
    d = json.load(open(os.path.join(SOURCE_DIR, "examples", "tiny-mlp.json")))
    spec = dict(d["spec"], mesh={"world_size": 2, "ranks_per_node": 2}, no_shard=["fc1.*"])
    path = str(tmp_path / "plan.json")
    flexplan.compile(d["model"], spec).save(path)
    js = json.load(open(path))
    want = [(q.get("weight") or {}).get("buffer", -1) for q in js["params"]]
    want = [b is not None and b >= 0 and js["buffers"][b]["kind"] == "persistent" for b in want]
    assert any(want) and not all(want), want
    lib = L.lib()
    with flexplan.load(path) as plan:
        h = plan._handle
        got = [lib.fp_plan_param_weight_persistent(h, i) for i in range(len(want))]
        assert got == [int(w) for w in want]
        assert lib.fp_plan_param_weight_persistent(h, -1) == -1
        assert lib.fp_plan_param_weight_persistent(h, len(want)) == -1
        assert lib.fp_plan_param_weight_persistent(None, 0) == -1


def test_safetensors_names_from_the_c_reader(tmp_path):
    """flexplan.executor.safetensors_names reads a file's names through
    fp_safetensors_open (the refit's reader): every name, and the reader's
    located message for a header that is not strict JSON, a header longer
    than the file, and a missing file (FP_ERR_WEIGHTS each)."""
    import struct
    from flexplan.executor import safetensors_names
    good = str(tmp_path / "good.safetensors")  # written by hand, as the format says (no torch in this process)
    hdr = json.dumps({"b.w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "a.w": {"dtype": "BF16", "shape": [3, 2], "data_offsets": [8, 20]},
                      "__metadata__": {"format": "pt"}}).encode()
    open(good, "wb").write(struct.pack("<Q", len(hdr)) + hdr + bytes(20))
    assert sorted(safetensors_names(good)) == ["a.w", "b.w"]
    hdr = b'{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    dup = str(tmp_path / "dup.safetensors")
    open(dup, "wb").write(struct.pack("<Q", len(hdr)) + hdr + b"\0" * 4)
    with pytest.raises(flexplan.FlexplanError) as e:
        safetensors_names(dup)
    assert e.value.status_name == "FP_ERR_WEIGHTS"
    assert str(e.value) == (dup + ": header rejected at header byte 54: /: duplicate member 't' "
                            "(first at line 1, column 2)"), str(e.value)
    short = str(tmp_path / "short.safetensors")
    open(short, "wb").write(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(flexplan.FlexplanError, match=r"^" + short + r": ") as e:
        safetensors_names(short)
    assert e.value.status_name == "FP_ERR_WEIGHTS"
    with pytest.raises(flexplan.FlexplanError, match="nope.safetensors") as e:
        safetensors_names(str(tmp_path / "nope.safetensors"))
    assert e.value.status_name == "FP_ERR_WEIGHTS"
