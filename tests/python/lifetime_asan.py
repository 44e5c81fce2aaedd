"""Issue 40, item 5, under AddressSanitizer: what an Executor hands out is
invalidated by destroy(), and no later use reads or writes the freed arena.

Run by the asan preset's ctest `asan_python_lifetimes` (tests/python.cmake):
the venv's interpreter with the ASan and UBSan runtimes preloaded and
FLEXPLAN_LIBRARY = the ASan build's libflexplan.so, so a read or write of
freed memory inside the library aborts the process (ASan's report) instead of
passing silently. No torch here (torch cannot be loaded under the preloaded
runtimes): the Executor's own views, memoryviews over the arena.

Checks (exit 1 on a failure; ASan aborts on a bad access):
- every call of a destroyed executor and of its ParamView raises
  FlexplanError saying the executor is closed (param, hook, view buffers,
  all_reduce_f64, sync, stats);
- a memoryview taken before destroy() is released: reading or writing it
  raises ValueError, never touches the freed arena;
- a second executor made after the first was destroyed (its arena may reuse
  the address) is unchanged by every attempt through the first one's views."""
import json
import os
import sys
import tempfile

import flexplan
from flexplan import FlexplanError
from flexplan.executor import Executor, mpi_finalize, mpi_init

SRC = os.environ.get("FLEXPLAN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
bad = []


def expect_closed(what, fn):
    try:
        fn()
    except FlexplanError as e:
        if "closed" not in str(e):
            bad.append(f"{what}: FlexplanError without 'closed': {e}")
        return
    except Exception as e:  # noqa: BLE001 - any other error is the failure being tested for
        bad.append(f"{what}: {type(e).__name__}: {e}")
        return
    bad.append(f"{what}: no error after destroy()")


def expect_released(what, fn):
    try:
        fn()
    except ValueError as e:
        if "released" not in str(e):
            bad.append(f"{what}: ValueError without 'released': {e}")
        return
    bad.append(f"{what}: a memoryview taken before destroy() still works")


def main():
    mpi_init()
    model = os.path.join(SRC, "tests", "mpi", "mlp.model.json")
    spec = os.path.join(SRC, "tests", "mpi", "full_shard.spec.json")
    with tempfile.TemporaryDirectory(prefix="fp-lifetime-asan-") as tmp:
        path = os.path.join(tmp, "mlp.plan.json")
        with open(spec) as f:
            sp = json.load(f)
        sp["mesh"]["world_size"] = 1
        plan = flexplan.compile(model, sp)
        plan.save(path)
        plan.close()
        ex = Executor(path, 0, 1)
        name = ex.params[0].name
        pv = ex.param(name)
        mv = pv.buffer("main")
        first = bytes(mv[:8])
        ex.destroy()
        expect_closed("param", lambda: ex.param(name))
        expect_closed("hook", lambda: ex.hook("step_begin"))
        expect_closed("view buffer", lambda: pv.buffer("main"))
        expect_closed("all_reduce_f64", lambda: ex.all_reduce_f64([1.0]))
        expect_closed("sync", ex.sync)
        expect_released("read through an old memoryview", lambda: mv[0])
        expect_released("write through an old memoryview", lambda: mv.__setitem__(0, 0))
        ex2 = Executor(path, 0, 1)
        mv2 = ex2.param(name).buffer("main")
        before = bytes(mv2)
        expect_closed("view buffer, a second executor alive", lambda: pv.buffer("main"))
        expect_released("write through an old memoryview, a second executor alive",
                        lambda: mv.__setitem__(slice(0, 4), b"\xff\xff\xff\xff"))
        if bytes(mv2) != before:
            bad.append("the second executor's main shard changed through the first one's views")
        del mv2
        ex2.destroy()
        print(f"lifetime_asan: {len(first)} bytes read before destroy(); {9 - len(bad)} of 9 checks ok")
    mpi_finalize()
    for b in bad:
        print("FAIL", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
