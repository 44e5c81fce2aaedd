"""test_api.py - the Python API over libflexplan.so (flexplan, flexplan._lib):
the library is found and its version agrees with the package and the
header; every public C function is declared for ctypes and every struct has
the C compiler's layout; plans load, and bad plans raise FlexplanError with
the message the CLI prints for the same file."""
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
    assert len(names) >= 26
    assert names == set(_lib.SIGNATURES), (names ^ set(_lib.SIGNATURES))
    lib = _lib.lib()
    for n in names:
        assert getattr(lib, n).argtypes is not None or _lib.SIGNATURES[n][1] == []


def test_struct_layouts_match_the_compiler():
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to compare struct layouts with")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flexplan.h"', "int main(void) {"]
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
