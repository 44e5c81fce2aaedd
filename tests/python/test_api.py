"""test_api.py - the Python API over libflexplan.so (flexplan, flexplan._lib)
against the command line, its independent reference: the library is found
and its version agrees with the package and the header; every public C
function is declared for ctypes and every struct has the C compiler's
layout; compile() from dicts, text and paths gives the CLI's summary and
plan.json byte for byte; save/load round-trips the summary; explain, the
trace and the HTML page are the CLI's; bad inputs raise FlexplanError with
the CLI's located message."""
import ctypes
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import flexplan
from flexplan import _lib
from conftest import SOURCE_DIR, run_cli


def header_functions():
    """Every FP_API function name of the public headers."""
    names = set()
    for h in glob.glob(os.path.join(SOURCE_DIR, "include", "flexplan*.h")):
        code = re.sub(r"/\*.*?\*/", "", open(h).read(), flags=re.S)
        names.update(re.findall(r"^FP_API\s[^;(]*?\b(fp_\w+)\s*\(", code, flags=re.M))
    return names


def test_version_agrees():
    text = open(os.path.join(SOURCE_DIR, "include", "flexplan_version.h")).read()
    header = re.search(r'#define FP_VERSION_STRING "([^"]+)"', text).group(1)
    assert flexplan.version() == header
    assert flexplan.__version__ == header
    assert os.path.samefile(flexplan.library_path(), os.environ["FLEXPLAN_LIBRARY"])


def test_every_public_function_is_declared():
    names = header_functions()
    assert len(names) >= 31
    assert names == set(_lib.SIGNATURES), (names ^ set(_lib.SIGNATURES))
    lib = _lib.lib()
    for n in names:
        assert getattr(lib, n).argtypes is not None or _lib.SIGNATURES[n][1] == []


def test_extent_elems():
    """fp_extent_elems against Extent.held: a block-cyclic view whose last
    run is short (blocks of 104, the last 52), a plain one, an empty one"""
    from flexplan.executor import Extent
    lib = _lib.lib()
    for runs, ln, last, want in ((2, 104, 52, 156), (3, 8, 8, 24), (0, 0, 0, 0)):
        e = _lib.fp_extent(runs=runs, len=ln, shard_stride=ln, full_off=0, full_stride=2 * ln, last_len=last)
        assert lib.fp_extent_elems(ctypes.byref(e)) == want == Extent(e).held
    assert lib.fp_extent_elems(None) == 0


def test_struct_layouts_match_the_compiler():
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to compare struct layouts with")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flexplan_compile.h"', "int main(void) {"]
    for cname, cls in _lib.STRUCTS.items():
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (cname, cname))
        for f in cls._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (cname, f[0], cname, f[0]))
    lines.append("return 0; }")
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        open(src, "w").write("\n".join(lines))
        subprocess.run([cc, "-std=c11", "-I", os.path.join(SOURCE_DIR, "include"), src, "-o", exe], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    want = dict(l.rsplit(" ", 1) for l in out.splitlines())
    for cname, cls in _lib.STRUCTS.items():
        assert int(want[cname]) == ctypes.sizeof(cls), cname
        for f in cls._fields_:
            assert int(want["%s.%s" % (cname, f[0])]) == getattr(cls, f[0]).offset, "%s.%s" % (cname, f[0])


@pytest.fixture()
def tiny_plan(tmp_path, cli):
    """examples/tiny-mlp.json compiled by the CLI: (path, summary dict)."""
    path = tmp_path / "tiny.plan.json"
    rc, out, err = run_cli(cli, "compile", os.path.join(SOURCE_DIR, "examples", "tiny-mlp.json"), "-o", str(path))
    assert rc == 0, err
    rc, out, err = run_cli(cli, "compile", os.path.join(SOURCE_DIR, "examples", "tiny-mlp.json"), "--emit=summary")
    assert rc == 0, err
    return path, json.loads(out)


def test_load_and_info(tiny_plan):
    path, summary = tiny_plan
    with flexplan.load(path) as plan:
        info = plan.info
        assert info["model"] == summary["model"] == "tiny-mlp"
        assert info["world_size"] == summary["world_size"] == 4
        assert info["strategy"] == summary["strategy"]
        assert info["ops"] == summary["ops"]
        assert info["params"] == summary["params"] == 8
        assert plan.modules == ["fc0", "fc1", "fc2", "fc3"]
        assert plan.module_index("fc2") == 2
        with pytest.raises(KeyError):
            plan.module_index("fc9")
        assert re.fullmatch(r"fnv1a64:[0-9a-f]{16}", info["hash"])
        assert json.load(open(path))["hash"] == info["hash"]
    assert plan.closed
    with pytest.raises(flexplan.FlexplanError, match="closed"):
        plan.info


def test_bad_plan_raises_the_cli_message(tiny_plan, tmp_path, cli):
    path, _ = tiny_plan
    bad = tmp_path / "bad.plan.json"
    text = open(path).read().replace('"world_size": 4', '"world_size": "four"', 1)
    assert text != open(path).read()
    bad.write_text(text)
    with pytest.raises(flexplan.FlexplanError) as e:
        flexplan.load(bad)
    rc, _, err = run_cli(cli, "verify", str(bad))
    assert rc == 1
    assert e.value.status_name == "FP_ERR_PLAN"
    assert str(e.value) == err.rstrip("\n")
    assert str(e.value).startswith(str(bad) + ":")


def test_missing_file_raises():
    with pytest.raises(flexplan.FlexplanError) as e:
        flexplan.load("/nonexistent/x.plan.json")
    assert "/nonexistent/x.plan.json: error: cannot open" in str(e.value)


def test_missing_library_is_a_clear_error(tmp_path):
    env = dict(os.environ, FLEXPLAN_LIBRARY=str(tmp_path / "nothing.so"))
    code = "import flexplan\ntry:\n flexplan.version()\nexcept flexplan.FlexplanError as e:\n print(e)\n raise SystemExit(3)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    assert "cannot load libflexplan.so" in r.stdout and "nothing.so (FLEXPLAN_LIBRARY): no such file" in r.stdout
    # import itself never needs the library
    r = subprocess.run([sys.executable, "-c", "import flexplan; print(flexplan.__version__)"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == flexplan.__version__


# ---- the compile API against the CLI ------------------------------------------------
TINY = os.path.join(SOURCE_DIR, "examples", "tiny-mlp.json")


def cli_summary(cli, *args):
    rc, out, err = run_cli(cli, "compile", *args, "--emit=summary")
    assert rc == 0, err
    d = json.loads(out)
    del d["compile_ms"]
    return d


def no_ms(d):
    d = dict(d)
    assert d.pop("compile_ms") >= 0
    return d


def split(path):
    """(model dict, spec dict) of a combined example."""
    d = json.load(open(path))
    return d["model"], d["spec"]


def test_compile_from_path_text_and_dicts(cli, tmp_path):
    want = cli_summary(cli, TINY)
    text = open(TINY).read()
    model, spec = split(TINY)
    (tmp_path / "m.json").write_text(json.dumps(model))
    (tmp_path / "s.json").write_text(json.dumps(spec))
    for args in ((TINY,), (text,), (json.loads(text),), (model, spec), (json.dumps(model), json.dumps(spec)),
                 (str(tmp_path / "m.json"), str(tmp_path / "s.json")), (tmp_path / "m.json", spec)):
        with flexplan.compile(*args) as plan:
            assert no_ms(plan.summary) == want, args
            assert plan.summary["compile_ms"] > 0
    assert cli_summary(cli, str(tmp_path / "m.json"), "--spec", str(tmp_path / "s.json")) == want


def test_plan_json_is_the_clis_byte_for_byte(cli, tmp_path):
    out = tmp_path / "cli.plan.json"
    rc, _, err = run_cli(cli, "compile", TINY, "-o", str(out))
    assert rc == 0, err
    with flexplan.compile(TINY) as plan:
        assert plan.to_json() == out.read_text()
        saved = plan.save(tmp_path / "api.plan.json")
        assert (tmp_path / "api.plan.json").read_bytes() == out.read_bytes()
        assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]
        rc, ir, err = run_cli(cli, "print", str(out))
        assert rc == 0 and plan.to_ir() == ir
    assert saved == tmp_path / "api.plan.json"


@pytest.mark.parametrize("example,args", [("tiny-mlp.json", ()), ("tiny-mlp-hybrid.json", ()),
                                          ("tiny-mlp-ragged.json", ("--policy", "fsdp2")),
                                          ("llama3-8b.json", ("--hardware", "h200"))])
def test_save_load_summary_is_the_clis(cli, tmp_path, example, args):
    path = os.path.join(SOURCE_DIR, "examples", example)
    want = cli_summary(cli, path, *args)
    kw = {}
    if "--policy" in args:
        kw["policy"] = args[args.index("--policy") + 1]
    if "--hardware" in args:
        kw["hardware"] = args[args.index("--hardware") + 1]
    with flexplan.compile(path, **kw) as plan:
        assert no_ms(plan.summary) == want
        plan.save(tmp_path / "p.plan.json")
    with flexplan.load(tmp_path / "p.plan.json") as plan:
        got = plan.summary
        assert got["compile_ms"] == 0
        assert no_ms(got) == want


def test_views_are_the_clis(cli, tmp_path):
    path = tmp_path / "tiny.plan.json"
    rc, _, err = run_cli(cli, "compile", TINY, "-o", str(path))
    assert rc == 0, err
    with flexplan.load(path) as plan:
        rc, out, err = run_cli(cli, "explain", str(path))
        assert rc == 0 and plan.explain() == out
        rc, out, err = run_cli(cli, "explain", str(path), "--hardware", "h200")
        assert rc == 0 and plan.explain(hardware="h200") == out
        rc, out, err = run_cli(cli, "simulate", str(path))
        assert rc == 0 and plan.simulate() == out
        rc, out, err = run_cli(cli, "viz", str(path), "-o", "-")
        assert rc == 0 and plan.to_trace(as_text=True) == out
        assert plan.to_trace() == json.loads(out)
        rc, out, err = run_cli(cli, "viz", str(path), "--format=html", "-o", "-")
        assert rc == 0 and plan.to_html() == out and out.lstrip().lower().startswith("<!doctype html")


def bad_spec_case(tmp_path):
    model, spec = split(TINY)
    spec["strategy"] = "zero4"
    mp, sp = tmp_path / "model.json", tmp_path / "bad-spec.json"
    mp.write_text(json.dumps(model, indent=1))
    sp.write_text(json.dumps(spec, indent=1))
    return model, spec, mp, sp


def test_bad_spec_raises_the_clis_message(cli, tmp_path):
    model, spec, mp, sp = bad_spec_case(tmp_path)
    rc, out, err = run_cli(cli, "compile", str(mp), "--spec", str(sp), "-o", str(tmp_path / "x.plan.json"))
    assert rc == 1 and err.startswith(str(sp) + ":") and "/strategy" in err
    assert not os.path.exists(tmp_path / "x.plan.json")
    with pytest.raises(flexplan.FlexplanError) as e:
        flexplan.compile(str(mp), str(sp))
    assert str(e.value) == err.rstrip("\n")
    assert e.value.status_name == "FP_ERR_INPUT"
    # the same spec as text: the same message, located in "<spec>"
    with pytest.raises(flexplan.FlexplanError) as e:
        flexplan.compile(model, sp.read_text())
    assert str(e.value) == err.rstrip("\n").replace(str(sp), "<spec>")


def test_bad_model_files_raise_the_clis_messages(cli):
    bad = os.path.join(SOURCE_DIR, "tests", "bad")
    names = sorted(f for f in os.listdir(bad) if f.endswith(".json"))
    assert len(names) > 20
    for name in names:
        path = os.path.join(bad, name)
        rc, out, err = run_cli(cli, "check", path)
        if rc == 0:
            continue
        assert rc == 1, (name, err)
        with pytest.raises(flexplan.FlexplanError) as e:
            flexplan.compile(path)
        assert str(e.value) == err.rstrip("\n"), name


def test_hardware_file(tmp_path):
    """A hardware file wherever a preset is taken (planner/hwfile.c): the plan
    records its machine, rendering on it follows it, a bad file raises the
    CLI's located message (FP_ERR_INPUT)."""
    hw = tmp_path / "slow.json"
    hw.write_text(json.dumps({"format": "flexplan-hardware/1", "name": "slow-net", "base": "h100-sxm",
                              "nvlink_gbps": 3.708, "base_us": 100}))
    with flexplan.compile(TINY, hardware=str(hw)) as plan:
        saved = json.loads(plan.to_json())
        text = plan.simulate()
        assert "hardware slow-net" in text
        assert "NVLink 3.7 GB/s" in text
        assert "hardware h100-sxm" in plan.simulate(hardware="h100-sxm")
    assert saved["hardware"]["name"] == "slow-net"
    assert saved["hardware"]["nvlink_gbps"] == 3.708
    with flexplan.compile(TINY) as plan:
        assert "hardware slow-net" in plan.simulate(hardware=str(hw))
        bad = tmp_path / "bad.json"
        bad.write_text('{"format": "flexplan-hardware/1", "name": "x", "base": "h100-sxm", "flops": 0}')
        with pytest.raises(flexplan.FlexplanError, match=r"bad.json:1:\d+: error: /flops: expected a number > 0") as e:
            plan.simulate(hardware=str(bad))
        assert e.value.status_name == "FP_ERR_INPUT"
    with pytest.raises(flexplan.FlexplanError, match=r"bad.json:1:\d+: error: /flops") as e:
        flexplan.compile(TINY, hardware=str(bad))
    assert e.value.status_name == "FP_ERR_INPUT"


def test_bad_arguments():
    with pytest.raises(flexplan.FlexplanError, match="unknown hardware preset 'h300'") as e:
        flexplan.compile(TINY, hardware="h300")
    assert e.value.status_name == "FP_ERR_ARG"
    with pytest.raises(flexplan.FlexplanError, match="unknown policy 'zero'"):
        flexplan.compile(TINY, policy="zero")
    with pytest.raises(TypeError):
        flexplan.compile(42)
    with pytest.raises(flexplan.FlexplanError, match="nonexistent.json: error: cannot open"):
        flexplan.compile("/nonexistent.json")
    with flexplan.compile(TINY) as plan:
        with pytest.raises(flexplan.FlexplanError, match="unknown hardware preset"):
            plan.explain(hardware="nope")
        with pytest.raises(flexplan.FlexplanError, match="cannot create output"):
            plan.save("/nonexistent-dir/x.plan.json")


def test_info_and_modules_of_a_compiled_plan():
    model, spec = split(TINY)
    with flexplan.compile(model, spec) as plan:
        assert plan.modules == [m["name"] for m in model["modules"]]
        i = plan.info
        assert i["world_size"] == spec["mesh"]["world_size"] and i["model"] == model["name"]
        assert i["params"] == sum(len(m["params"]) for m in model["modules"])
        assert i["hash"] == json.loads(plan.to_json())["hash"]


def test_plan_figures(cli, tmp_path):
    """plan.json's "figures" (outside the hash): a plan without them loads
    and runs but has no summary; bad figures are located errors, the CLI's."""
    path = tmp_path / "tiny.plan.json"
    rc, _, err = run_cli(cli, "compile", TINY, "-o", str(path))
    assert rc == 0, err
    d = json.loads(path.read_text())
    assert set(d["figures"]) == {"comm_bytes_per_rank", "persistent_bytes", "peak_bytes", "lower_bound_bytes",
                                 "activation_peak_bytes", "prefetch_forward", "prefetch_backward",
                                 "modeled_step_ms", "modeled_compute_ms", "modeled_exposed_comm_ms"}
    no = dict(d)
    del no["figures"]
    (tmp_path / "no.plan.json").write_text(json.dumps(no))
    with flexplan.load(tmp_path / "no.plan.json") as plan:
        assert plan.info["ops"] == len(d["ops"])
        with pytest.raises(flexplan.FlexplanError, match="carries no compile figures") as e:
            plan.summary
        assert e.value.status_name == "FP_ERR_PLAN"
        assert plan.explain()  # everything else works
    for key, value, what in (("peak_bytes", -1, "out of range"), ("prefetch_forward", 1.5, "expected an integer"),
                             ("modeled_step_ms", -0.5, "negative"), ("extra", 1, "unknown member 'extra'")):
        bad = json.loads(path.read_text())
        bad["figures"][key] = value
        (tmp_path / "bad.plan.json").write_text(json.dumps(bad, indent=1))
        with pytest.raises(flexplan.FlexplanError) as e:
            flexplan.load(tmp_path / "bad.plan.json")
        rc, _, err = run_cli(cli, "verify", str(tmp_path / "bad.plan.json"))
        assert rc == 1 and str(e.value) == err.rstrip("\n")
        assert ("/figures/" + key) in str(e.value) and what in str(e.value), str(e.value)
    bad = json.loads(path.read_text())
    bad["figures"] = [1]
    (tmp_path / "bad.plan.json").write_text(json.dumps(bad))
    with pytest.raises(flexplan.FlexplanError, match="/figures: expected an object"):
        flexplan.load(tmp_path / "bad.plan.json")


def test_c_api_refusals():
    """What Python cannot reach through the Plan class: NULL options, no
    model, an unknown render kind, a handle whose load failed."""
    lib = _lib.lib()
    h = ctypes.c_void_p()
    assert lib.fp_plan_compile(None, ctypes.byref(h)) == _lib.FP_ERR_ARG
    assert "options are NULL" in _lib.text(lib.fp_plan_errmsg(h))
    lib.fp_plan_free(h)
    opt = _lib.fp_compile_options()
    assert lib.fp_plan_compile(ctypes.byref(opt), ctypes.byref(h)) == _lib.FP_ERR_ARG
    assert "no model given" in _lib.text(lib.fp_plan_errmsg(h))
    lib.fp_plan_free(h)
    assert lib.fp_plan_load(b"/nonexistent.plan.json", ctypes.byref(h)) == _lib.FP_ERR_PLAN
    out = ctypes.c_void_p()
    assert lib.fp_plan_summary(h, ctypes.byref(out)) == _lib.FP_ERR_ARG and not out.value
    assert "failed to load or compile" in _lib.text(lib.fp_plan_errmsg(h))
    assert lib.fp_plan_save(h, b"/tmp/never.plan.json") == _lib.FP_ERR_ARG
    assert not os.path.exists("/tmp/never.plan.json")
    lib.fp_plan_free(h)
    with flexplan.compile(TINY) as plan:
        assert lib.fp_plan_render(plan._handle, 99, None, ctypes.byref(out)) == _lib.FP_ERR_ARG
        assert "unknown output 99" in plan.errmsg
        assert plan.to_ir() and plan.errmsg == ""  # the next success clears it
        assert lib.fp_plan_summary(plan._handle, None) == _lib.FP_ERR_ARG


def test_a_library_of_another_version_is_a_clear_error(tmp_path):
    import _ctypes
    other = getattr(_ctypes, "__file__", None)  # a loadable shared object that is no flexplan
    if not other:
        pytest.skip("_ctypes is built into this interpreter: no other shared library to point at")
    env = dict(os.environ, FLEXPLAN_LIBRARY=other)
    code = "import flexplan\ntry:\n flexplan.version()\nexcept flexplan.FlexplanError as e:\n print(e)\n raise SystemExit(3)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    assert "has no function fp_" in r.stdout and "not a flexplan library of this version" in r.stdout


@pytest.mark.parametrize("spec_extra", [{}, {"grad_accumulation": 2}, {"no_shard": ["fc2.*"]},
                                        {"strategy": "shard_grad_op"}])
def test_plan_segments_from_the_library(tmp_path, cli, spec_extra):
    """fp_plan_segment_at (issue 29: the step's segments without reading
    plan.json twice) against the plan file's own segment list: hook, module,
    micro-batch and the ops that are not compute placeholders; out-of-range
    indices are FP_ERR_ARG."""
    from flexplan.executor import plan_segments
    with open(os.path.join(SOURCE_DIR, "examples", "tiny-mlp.json")) as f:
        both = json.load(f)
    both["spec"].update(spec_extra)
    plan = flexplan.compile(both["model"], both["spec"])
    path = tmp_path / "p.json"
    plan.save(str(path))
    with open(path) as f:
        js = json.load(f)
    want = [(s["kind"], int(s["module"]), int(s["micro"]),
             sum(1 for o in js["ops"][s["first"]:s["first"] + s["count"]] if o["op"] != "compute"))
            for s in js["segments"]]
    lib = _lib.lib()
    got = plan_segments(lib, plan._handle, plan.info["segments"])
    assert got == want
    assert any(n == 0 for _, m, _, n in got if m >= 0) or not spec_extra  # empty module segments exist
    seg = _lib.fp_plan_segment()
    for i in (-1, len(want)):
        assert lib.fp_plan_segment_at(plan._handle, i, ctypes.byref(seg)) == 1  # FP_ERR_ARG
    assert lib.fp_plan_segment_at(None, 0, ctypes.byref(seg)) == 1
    assert lib.fp_plan_segment_at(plan._handle, 0, None) == 1
    plan.close()



def test_tp_mesh_from_the_library():
    """A plan on a dp x tp mesh: the tp size and each param's tp dim come
    from the library (a plan without tp says 1 and None)."""
    path = os.path.join(SOURCE_DIR, "tests", "golden", "tp_full_shard.json")
    doc = json.load(open(path))
    with flexplan.compile(doc["model"], doc["spec"]) as plan:
        assert plan.tp_size == 2 and plan.info["tp"] == 2
        params = [p for m in doc["model"]["modules"] for p in m["params"]]
        for i, p in enumerate(params):
            tp = p.get("tp", {"kind": "replicate"})
            assert plan.param_tp_dim(i) == (tp["dim"] if tp["kind"] == "shard" else None), p["name"]
        with pytest.raises(IndexError):
            plan.param_tp_dim(len(params))
    with flexplan.compile(*split(TINY)) as plain:
        assert plain.tp_size == 1 and plain.param_tp_dim(0) is None
