"""test_args.py - argument errors of the Python API (issue 31, item 4): an
integer out of int64_t's range is OverflowError (ctypes would wrap it:
to_offset=2**64+1 was offset 1), a NUL byte in a path or in JSON text is
ValueError (C would read up to it: compile(path + "\\0garbage") compiled
path), a wrong type is TypeError, and each names the argument, instead of
an AttributeError from deep inside the binding."""
import os

import pytest

import flexplan
from conftest import SOURCE_DIR

EX = os.path.join(SOURCE_DIR, "examples", "tiny-mlp.json")


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    d = tmp_path_factory.mktemp("args")
    a = flexplan.compile(EX)
    b = flexplan.compile(EX)
    a.save(str(d / "a.plan.json"))
    b.save(str(d / "b.plan.json"))
    return a, b, d


@pytest.mark.parametrize("kw,value", [("to_offset", 2**64 + 1), ("to_offset", 2**64), ("to_offset", 2**63),
                                      ("from_offset", -(2**63) - 1), ("from_offset", 2**70)])
def test_reshard_offset_out_of_range(plans, kw, value):
    a, b, _ = plans
    with pytest.raises(OverflowError, match=kw):
        flexplan.reshard(a, b, **{kw: value})


@pytest.mark.parametrize("value", ["1", 1.5, True, None])
def test_reshard_offset_type(plans, value):
    a, b, _ = plans
    with pytest.raises(TypeError, match="to_offset"):
        flexplan.reshard(a, b, to_offset=value)


def test_reshard_offset_in_range_still_works(plans):
    a, b, _ = plans
    t = flexplan.reshard(a, b, to_offset=4)
    assert t.info["to_offset"] == 4
    t.close()


def test_reshard_paths_are_not_plans(plans):
    _, _, d = plans
    with pytest.raises(TypeError, match="from_plan.*flexplan.Plan.*str"):
        flexplan.reshard(str(d / "a.plan.json"), str(d / "b.plan.json"))
    a = plans[0]
    with pytest.raises(TypeError, match="to_plan"):
        flexplan.reshard(a, 7)


def test_reshard_transform_and_what(plans):
    a, b, _ = plans
    with pytest.raises(TypeError, match="transform"):
        flexplan.reshard(a, b, transform=5)
    with pytest.raises(TypeError, match="what"):
        flexplan.reshard(a, b, what=3)
    with pytest.raises(ValueError, match="transform pattern"):
        flexplan.reshard(a, b, transform={"fc*\0x": "mxfp8"})


def test_nul_in_paths(plans, tmp_path):
    a, _, d = plans
    with pytest.raises(ValueError, match="model.*NUL"):
        flexplan.compile(EX + "\0garbage")
    with pytest.raises(ValueError, match="model.*NUL"):
        flexplan.compile(os.fsencode(EX) + b"\0garbage")
    with pytest.raises(ValueError, match="spec.*NUL"):
        flexplan.compile(EX, EX + "\0")
    with pytest.raises(ValueError, match="path.*NUL"):
        flexplan.load(str(d / "a.plan.json") + "\0x")
    with pytest.raises(ValueError, match="path.*NUL"):
        a.save(str(tmp_path / "x.plan.json") + "\0y")
    assert not os.path.exists(str(tmp_path / "x.plan.json"))
    with pytest.raises(ValueError, match="path.*NUL"):
        flexplan.load_transfer("t.xfer.json\0")


def test_nul_in_json_text():
    text = open(EX).read()
    i = text.index('"modules"')
    bad = text[:i] + "\0" + text[i:]
    with pytest.raises(ValueError, match="model: JSON text.*NUL"):
        flexplan.compile(bad)
    with pytest.raises(ValueError, match="model: JSON text.*NUL"):
        flexplan.compile(bad.encode())
    # the text up to the NUL alone is what C would have read; without the NUL it compiles
    flexplan.compile(text).close()


@pytest.mark.parametrize("kw,value,exc", [("hardware", 123, TypeError), ("policy", 7, TypeError),
                                          ("hardware", "h100\0-sxm", ValueError),
                                          ("policy", "fsdp2\0", ValueError)])
def test_compile_option_types(kw, value, exc):
    with pytest.raises(exc, match=kw):
        flexplan.compile(EX, **{kw: value})


def test_compile_wrong_model_type():
    with pytest.raises(TypeError, match="model"):
        flexplan.compile(12)


@pytest.mark.parametrize("method", ["explain", "simulate", "to_trace", "to_html"])
def test_render_hardware_type(plans, method):
    a, _, _ = plans
    with pytest.raises(TypeError, match="hardware"):
        getattr(a, method)(hardware=5)
    with pytest.raises(ValueError, match="hardware"):
        getattr(a, method)(hardware="h200\0")
    assert getattr(a, method)(hardware="h200")


def test_module_index_type(plans):
    a, _, _ = plans
    with pytest.raises(TypeError, match="name"):
        a.module_index(3)
    with pytest.raises(ValueError, match="name"):
        a.module_index("fc0\0")


def test_executor_paths_with_nul_are_refused():
    """Executor paths and names go through the same checks (a NUL would end
    the C string early: another file, silently)."""
    import flexplan.executor as fe
    with pytest.raises(ValueError, match="plan"):
        fe.Executor("plan.json\x00garbage", 0, 1)
