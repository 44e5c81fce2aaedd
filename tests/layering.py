#!/usr/bin/env python3
"""The layers point one way (docs/architecture.md, "The layers"): every #include "..."
of each source folder, resolved to a repository path, must stay inside what
that folder may use.

  base/      itself (and include/flexplan_version.h: the version macros)
  kernels/   base/
  ir/        base/, include/ (the public handles' types: ir/handle.h)
  planner/   base/, ir/
  executor/  base/, ir/, kernels/, include/
  viz/       base/, ir/, planner/ (its simulator), include/
  api/       base/, ir/, planner/, viz/, include/
  tools/, examples/, bench/   include/ only
A file in FOLDER may always include FOLDER's own files. A file outside that
rule is listed in EXCEPTIONS with what it may include and why.

Includes are checked transitively too: what a file reaches through the
headers it includes must be what its folder (or its exception) may reach,
so a header of include/ (which belongs to no layer) or of a lower layer
cannot smuggle in what the including layer may not use.

The CMake link graph says the same (the top-level CMakeLists.txt's
components, fp_component): each library's sources come from one folder
(ir/ and planner/ are separate libraries), a library links only libraries
of the folders its own folder may include, and only the outside libraries
listed for its folder in EXTERNAL (MPI and CUDA for the executor alone: api/
calls neither).

`layering.py --self-test` plants one violation of each kind in a small tree
of its own and checks that each is found (ctest layering_planted).

And python/ calls only the public API: every library function the Python
package looks up (the SIGNATURES table of python/flexplan/_lib.py, and every
`lib.fp_...` / `lib().fp_...` in python/flexplan) is declared FP_API in
include/*.h.
usage: layering.py SOURCE_DIR | --self-test"""
import os
import re
import sys
import tempfile

ALLOWED = {
    "base": {"base", "include/flexplan_version.h"},
    "kernels": {"base"},
    "ir": {"base", "include"},
    "planner": {"base", "ir"},
    "executor": {"base", "ir", "kernels", "include"},
    "viz": {"base", "ir", "planner", "include"},
    "api": {"base", "ir", "planner", "viz", "include"},
    "tools": {"include"},
    "examples": {"include"},
    "bench": {"include"},
}

# file -> (the paths it may include besides its folder's, why)
EXCEPTIONS = {
    "tools/flexplan.c": (
        {"api/api_impl.h", "base", "ir", "viz"},
        "the command line: it compiles, checks, explains, simulates and reshards through api/ "
        "(api/api_impl.h, its documented boundary, docs/architecture.md 'The layers'), and reads, prints, verifies "
        "and draws plan files itself on ir/ and viz/, with base/'s diagnostics, arena and outputs"),
    "bench/exec_bench.c": (
        {"executor/exec_impl.h", "ir/ir.h"},
        "measures the executor against raw MPI: it builds its programs in the IR and runs the same "
        "collectives on the executor's own arena (struct fp_exec), which the public API does not expose"),
    "bench/reshard_bench.c": (
        {"executor/exec_impl.h", "ir/xfer.h"},
        "measures a transfer against raw MPI: it posts the transfer program's own ops on the "
        "executors' arenas (struct fp_exec), which the public API does not expose"),
    "bench/cuda_bench.cu": (
        {"kernels/kernels_cuda.h"},
        "measures the CUDA kernels themselves (bandwidth per dtype pair), below the executor"),
}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def resolve(root, src, inc):
    """the repository path an include names: next to the file, else from
    the root, else from include/ (the compile's include directories)"""
    for base in (os.path.dirname(src), root, os.path.join(root, "include")):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(p):
            return os.path.relpath(p, root)
    return None


def under(target, allowed):
    return any(target == a or target.startswith(a + os.sep) for a in allowed)


def allowed(folder, rel, target):
    if target.split(os.sep)[0] == folder:
        return True
    extra = EXCEPTIONS.get(rel, (set(), ""))[0]
    return under(target, ALLOWED[folder]) or under(target, extra)


def sources(root):
    """(folder, rel, path) of every C/CUDA source and header of the checked folders"""
    for folder in ALLOWED:
        for dirpath, dirs, files in os.walk(os.path.join(root, folder)):
            # bench/out: what the benchmarks build (gitignored: other trees' copies)
            dirs[:] = sorted(x for x in dirs
                             if os.path.relpath(os.path.join(dirpath, x), root) != os.path.join("bench", "out"))
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cu", ".cuh", ".def")):
                    src = os.path.join(dirpath, f)
                    yield folder, os.path.relpath(src, root), src


def direct_includes(root, src, memo):
    """[(line, include as written, repository path or None)] of one file"""
    if src not in memo:
        text = open(src, encoding="utf-8").read()
        memo[src] = [(text.count("\n", 0, m.start()) + 1, m.group(1), resolve(root, src, m.group(1)))
                     for m in INC.finditer(text)]
    return memo[src]


def closure(entries):
    """What may be reached through entries (folders, or files of a folder):
    the entries and, for each one inside a layer, what that layer may
    include, and so on down (planner/ reaches include/flexplan_version.h
    through base/, which may include it)."""
    out, layers, todo = set(), set(), list(entries)
    while todo:
        e = todo.pop()
        out.add(e)
        layer = e.split(os.sep)[0]
        if layer in ALLOWED and layer not in layers:
            layers.add(layer)
            todo.extend(ALLOWED[layer])
    return out


def reachable(folder, rel, target):
    """may a file of folder (rel) reach target through its includes"""
    return allowed(folder, rel, target) or under(target, closure(ALLOWED[folder] | EXCEPTIONS.get(rel, (set(), ""))[0]))


def check_includes(root):
    """Every include, direct and transitive: a file may reach through its
    includes only what its folder (or its exception) may include. A header
    another layer may include must not pull in what that layer may not
    (include/ headers are checked this way only: they belong to no layer)."""
    bad = checked = 0
    memo = {}
    for folder, rel, src in sources(root):
        for line, name, t in direct_includes(root, src, memo):
            checked += 1
            if t is None:
                print(f"{rel}:{line}: #include \"{name}\" names no file of the repository")
                bad += 1
            elif not allowed(folder, rel, t):
                print(f"{rel}:{line}: {folder}/ may not include {t}")
                bad += 1
        # the transitive closure, through files this one may include (a
        # direct violation is reported once, above, not again below it)
        seen, todo = set(), [(t, f"{name}") for _, name, t in direct_includes(root, src, memo)
                             if t is not None and allowed(folder, rel, t)]
        while todo:
            t, chain = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            for _, name, u in direct_includes(root, os.path.join(root, t), memo):
                if u is None or u in seen:
                    continue
                checked += 1
                if not reachable(folder, rel, u):
                    print(f"{rel}: {folder}/ may not include {u}, which it reaches through {chain} -> {name}")
                    bad += 1
                    seen.add(u)
                else:
                    todo.append((u, f"{chain} -> {name}"))
    return checked, bad


def check_exceptions(root):
    bad = 0
    for rel in EXCEPTIONS:
        if not os.path.exists(os.path.join(root, rel)):
            print(f"tests/layering.py: the exception {rel} names no file (remove it)")
            bad += 1
    return bad


# outside libraries each folder's components may link (tests/layering.py's
# link check; m is libm)
EXTERNAL = {
    "base": {"m"},
    "kernels": {"m", "CUDA::cudart"},
    "ir": {"m"},
    "planner": {"m"},
    "viz": {"m"},
    "executor": {"m", "MPI::MPI_C", "Threads::Threads", "fp_nccl", "CUDA::cudart", "CUDA::nvtx3", "${CMAKE_DL_LIBS}"},
    "api": set(),
}
CMAKE_CMD = re.compile(r"\b(\w+)\s*\(([^()]*)\)", re.S)
SCOPES = {"PUBLIC", "PRIVATE", "INTERFACE", "CONFIGURE_DEPENDS", "GLOB"}


def cmake_commands(text):
    """(command, [arguments]) of a CMakeLists.txt, comments dropped, in order"""
    text = re.sub(r"#[^\n]*", "", text)
    return [(m.group(1), m.group(2).split()) for m in CMAKE_CMD.finditer(text)]


def link_graph(root):
    """({component: folders of its sources}, {target: [linked items]}) of the
    top-level CMakeLists.txt: fp_component(NAME sources...) and their
    target_sources, add_library(NAME INTERFACE) groups, and every
    target_link_libraries of those (NAME_obj counts as NAME)"""
    var, folders, groups, links = {}, {}, set(), {}

    def expand(args):
        out = []
        for a in args:
            m = re.fullmatch(r"\$\{(FP_\w+)\}", a)
            out.extend(var.get(m.group(1), []) if m else [a])
        return out

    def folders_of(srcs):
        fs = set()
        for x in srcs:
            if x.startswith("${CMAKE_BINARY_DIR}"):
                continue  # generated (viz's embedded assets)
            x = x.replace("${CMAKE_SOURCE_DIR}/", "")
            fs.add(x.split("/")[0])
        return fs

    for cmd, args in cmake_commands(open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8").read()):
        if cmd == "set" and args and args[0].startswith("FP_"):
            var[args[0]] = expand(args[1:])
        elif cmd == "file" and len(args) > 1 and args[0] == "GLOB":
            var[args[1]] = [a for a in args[2:] if a not in SCOPES]
        elif cmd == "fp_component" and args:
            folders[args[0]] = folders_of(expand(args[1:]))
        elif cmd == "target_sources" and args:
            name = args[0][:-4] if args[0].endswith("_obj") else args[0]
            if name in folders:
                folders[name] |= folders_of(expand([a for a in args[1:] if a not in SCOPES]))
        elif cmd == "add_library" and len(args) == 2 and args[1] == "INTERFACE":
            groups.add(args[0])
        elif cmd == "target_link_libraries" and args:
            name = args[0][:-4] if args[0].endswith("_obj") else args[0]
            items = [a[:-4] if a.endswith("_obj") else a for a in args[1:] if a not in SCOPES]
            links.setdefault(name, []).extend(i for i in items if i != name)
    for g in groups:  # a group stands for what it links
        folders[g] = set().union(*(folders.get(i, set()) for i in links.get(g, [])))
    return folders, links


def check_links(root):
    """the link graph against the layers"""
    folders, links = link_graph(root)
    bad = checked = 0
    for name, fs in sorted(folders.items()):
        if len(fs) != 1:
            print(f"CMakeLists.txt: {name} is built from several folders ({', '.join(sorted(fs))}): one library "
                  f"per layer")
            bad += 1
    for name in sorted(links):
        if name not in folders or len(folders[name]) != 1:
            continue  # executables, the shared library (all of it), and the mixed one reported above
        (f,) = folders[name]
        for item in links[name]:
            checked += 1
            if item in folders:
                ok = all(g == f or g in ALLOWED.get(f, set()) for g in folders[item])
                what = f"{item} ({', '.join(sorted(folders[item]))}/)"
            else:
                ok = item in EXTERNAL.get(f, set())
                what = item
            if not ok:
                print(f"CMakeLists.txt: {name} ({f}/) links {what}, which {f}/ may not use")
                bad += 1
    if not folders:
        print("CMakeLists.txt: no fp_component found")
        bad += 1
    return checked, bad


def fp_api(root):
    """the FP_API function names of include/*.h"""
    names = set()
    inc = os.path.join(root, "include")
    for h in sorted(os.listdir(inc)):
        if h.endswith(".h"):
            code = re.sub(r"/\*.*?\*/", "", open(os.path.join(inc, h), encoding="utf-8").read(), flags=re.S)
            names.update(re.findall(r"^\s*FP_API\b[^;(]*?\b(fp_\w+)\s*\(", code, flags=re.M))
    return names


def check_python(root):
    api = fp_api(root)
    pkg = os.path.join(root, "python", "flexplan")
    bad = checked = 0
    lib = os.path.join(pkg, "_lib.py")
    text = open(lib, encoding="utf-8").read()
    m = re.search(r"^SIGNATURES = \{(.*?)^\}", text, flags=re.S | re.M)
    if not m:
        print("python/flexplan/_lib.py: no SIGNATURES table found")
        return 0, 1
    looked = {(n, "python/flexplan/_lib.py SIGNATURES") for n in re.findall(r'^\s*"(\w+)":', m.group(1), flags=re.M)}
    for dirpath, _, files in os.walk(pkg):
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(dirpath, f)
                for n in re.findall(r"\blib(?:\(\))?\.(fp_\w+)", open(p, encoding="utf-8").read()):
                    looked.add((n, os.path.relpath(p, root)))
    for n, where in sorted(looked):
        checked += 1
        if n not in api:
            print(f"{where}: {n} is not an FP_API function of include/")
            bad += 1
    return checked, bad


def self_test():
    """One violation of each kind planted in a small tree: each must be
    found, with its message, and the clean tree must pass."""
    files = {
        "base/base.h": "",
        "ir/ir.h": '#include "../base/base.h"\n',
        "ir/ir.c": '#include "ir.h"\n#include "flexplan.h"\n',
        "planner/p.h": '#include "../ir/ir.h"\n',
        "planner/p.c": '#include "p.h"\n',
        "executor/e.c": '#include "../ir/ir.h"\n#include "flexplan.h"\n',
        "api/a.c": '#include "../planner/p.h"\n',
        "include/flexplan.h": "",
        "CMakeLists.txt": """
file(GLOB FP_BASE_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/base/*.c)
fp_component(flexplan_base ${FP_BASE_SRC})
fp_component(flexplan_ir ir/ir.c)
target_link_libraries(flexplan_ir PUBLIC flexplan_base)
fp_component(flexplan_planner planner/p.c)
target_link_libraries(flexplan_planner_obj PUBLIC m)
target_link_libraries(flexplan_planner PUBLIC flexplan_ir)
set(FP_EXEC_SRC executor/e.c)
fp_component(flexplan_exec ${FP_EXEC_SRC})
target_link_libraries(flexplan_exec_obj PUBLIC MPI::MPI_C)
target_link_libraries(flexplan_exec PUBLIC flexplan_ir)
fp_component(flexplan_api api/a.c)
target_link_libraries(flexplan_api PUBLIC flexplan_planner)
add_library(flexplan_core INTERFACE)
target_link_libraries(flexplan_core INTERFACE flexplan_planner)
""",
    }
    plants = [  # (what, {file: text appended}, the messages expected)
        ("a transitive include: include/ pulls the planner into ir/",
         {"include/flexplan.h": '#include "../planner/p.h"\n'},
         ["ir/ir.c: ir/ may not include planner/p.h, which it reaches through flexplan.h -> ../planner/p.h",
          "executor/e.c: executor/ may not include planner/p.h, which it reaches through flexplan.h -> ../planner/p.h"]),
        ("a link to a layer above: the executor links the planner",
         {"CMakeLists.txt": "target_link_libraries(flexplan_exec PUBLIC flexplan_planner)\n"},
         ["CMakeLists.txt: flexplan_exec (executor/) links flexplan_planner (planner/), which executor/ may not use"]),
        ("a link api/ never calls: MPI",
         {"CMakeLists.txt": "target_link_libraries(flexplan_api_obj PUBLIC MPI::MPI_C)\n"},
         ["CMakeLists.txt: flexplan_api (api/) links MPI::MPI_C, which api/ may not use"]),
        ("two layers in one library",
         {"CMakeLists.txt": "target_sources(flexplan_ir_obj PRIVATE planner/p.c)\n"},
         ["CMakeLists.txt: flexplan_ir is built from several folders (ir, planner): one library per layer",
          # (and what links it now reaches the planner)
          "CMakeLists.txt: flexplan_exec (executor/) links flexplan_ir (ir, planner/), which executor/ may not use"]),
    ]
    import contextlib
    import io
    failed = 0
    for what, extra, want in [("the clean tree", {}, None)] + plants:
        with tempfile.TemporaryDirectory() as d:
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)) or d, exist_ok=True)
                with open(os.path.join(d, rel), "w", encoding="utf-8") as f:
                    f.write(text + extra.get(rel, ""))
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                _, ib = check_includes(d)
                _, lb = check_links(d)
            lines = [x for x in out.getvalue().splitlines() if x]
            ok = (ib + lb == 0 and not lines) if want is None else (ib + lb == len(want) and sorted(lines) == sorted(want))
            print(f"{'ok  ' if ok else 'FAIL'} {what}" + ("" if ok else f": got {lines}"))
            failed += not ok
    print(f"self-test: {len(plants)} planted violations, {failed} not found as expected")
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.abspath(sys.argv[1])
    checked, bad = check_includes(root)
    bad += check_exceptions(root)
    print(f"{checked} includes checked (direct and transitive), {bad} outside their layer")
    lchecked, lbad = check_links(root)
    print(f"{lchecked} links of the CMake graph checked, {lbad} outside their layer")
    pchecked, pbad = check_python(root)
    print(f"{pchecked} library functions Python looks up checked, {pbad} not FP_API")
    return 1 if bad or lbad or pbad else 0


if __name__ == "__main__":
    sys.exit(main())
