"""test_enums.py - every C constant the Python package copies, against the C
headers (issue 42).

flexplan/_lib.py writes the values of include/flexplan.h's enums and
defines by hand (ctypes cannot read a header). This test reads the headers
itself (a small parser of `typedef enum name { ... } name;` and of
`#define FP_X <integer>`: implicit values count on from the one before) and
checks, for every module of the package:

- each module-level FP_* integer is the C constant of that name, with its value;
- each C enum the package mirrors at all is mirrored whole (a value added
  in C and not in Python fails here);
- the name tables built from them (STATUS_NAMES, HOOK_NAMES) follow the C
  order.

No library is loaded: the headers are the reference.
"""
import importlib
import os
import pkgutil
import re

import pytest

import flexplan
from flexplan import _lib

INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include")
# FP_ names that are no integer constants (attributes, macros of the API itself)
NOT_CONSTANTS = {"FP_API", "FP_VERSION_STRING"}


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _int(expr, known):
    """an enum value or define: 12, 0x1, 1u, ((void *)0x2), 1u << 3, FP_X + 1"""
    e = re.sub(r"\(\s*void\s*\*\s*\)", "", expr)
    e = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", e)
    e = re.sub(r"\bFP_[A-Z0-9_]+\b", lambda m: str(known[m.group(0)]), e)
    if not re.fullmatch(r"[\s0-9a-fA-FxX()+\-*<>|]*", e):
        return None
    return int(eval(e, {"__builtins__": {}}))  # pylint: disable=eval-used  # digits and operators only


def parse_headers(paths):
    """({enum name: [(constant, value), ...]}, {define: value})"""
    enums, defines, known = {}, {}, {}
    for path in paths:
        text = _strip_comments(open(path).read())
        for m in re.finditer(r"typedef\s+enum\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
            members, nxt = [], 0
            for item in m.group(2).split(","):
                item = item.strip()
                if not item:
                    continue
                name, _, expr = (x.strip() for x in item.partition("="))
                value = _int(expr, known) if expr else nxt
                assert value is not None, f"{path}: cannot read {item!r}"
                members.append((name, value))
                known[name] = value
                nxt = value + 1
            enums[m.group(3)] = members
        for m in re.finditer(r"^[ \t]*#define[ \t]+(FP_[A-Z0-9_]+)[ \t]+([^\n]+)$", text, re.M):
            if m.group(1) in NOT_CONSTANTS:
                continue
            v = _int(m.group(2).strip(), known)
            if v is not None:
                defines[m.group(1)] = known[m.group(1)] = v
    return enums, defines


def headers():
    return [os.path.join(INCLUDE, f) for f in sorted(os.listdir(INCLUDE)) if f.endswith(".h")]


def package_constants():
    """{(module, name): value} of every module-level FP_* integer of flexplan
    (flexplan.torch left out: it imports torch, and copies no C value)"""
    out = {}
    mods = [flexplan] + [importlib.import_module("flexplan." + m.name)
                         for m in pkgutil.iter_modules(flexplan.__path__) if m.name not in ("torch", "__main__")]
    for mod in mods:
        for name, v in vars(mod).items():
            if name.startswith("FP_") and isinstance(v, int) and not isinstance(v, bool):
                out[(mod.__name__, name)] = v
    return out


C_ENUMS, C_DEFINES = parse_headers(headers())
C_VALUES = dict(C_DEFINES, **{n: v for members in C_ENUMS.values() for n, v in members})


def test_the_parser_reads_what_the_headers_say():
    """the parser itself, on the enums it must see (a parser that read
    nothing would pass every test below)"""
    assert len(C_ENUMS) >= 10, sorted(C_ENUMS)
    assert C_VALUES["FP_OK"] == 0 and C_VALUES["FP_ERR_TIMEOUT"] == 9
    assert C_VALUES["FP_EVENT_PRE_FORWARD"] == 1 and C_VALUES["FP_ALL_REDUCE_MAX"] == 4096
    assert C_VALUES["FP_CUDA_STREAM_LEGACY"] == 1 and C_VALUES["FP_LOAD_NO_SEMANTIC"] == 2
    enums, _ = parse_headers([])
    assert enums == {}


@pytest.mark.parametrize("where,name", sorted(package_constants()))
def test_each_python_constant_is_the_c_value(where, name):
    got = package_constants()[(where, name)]
    assert name in C_VALUES, f"{where}.{name} = {got}: no such constant in include/*.h"
    assert got == C_VALUES[name], f"{where}.{name} = {got}, the C headers say {C_VALUES[name]}"


def test_each_mirrored_enum_is_mirrored_whole():
    mirrored = {name for (_, name) in package_constants()}
    seen = 0
    for enum, members in sorted(C_ENUMS.items()):
        names = [n for n, _ in members]
        if not any(n in mirrored for n in names):
            continue
        seen += 1
        missing = [n for n in names if n not in mirrored]
        assert not missing, f"{enum}: flexplan._lib lacks {', '.join(missing)}"
    assert seen >= 10


def test_name_tables_follow_the_c_order():
    status = sorted(C_ENUMS["fp_status"], key=lambda nv: nv[1])
    assert list(_lib.STATUS_NAMES) == [n for n, _ in status]
    hooks = sorted(C_ENUMS["fp_hook"], key=lambda nv: nv[1])
    assert [_lib.HOOKS[h] for h in _lib.HOOK_NAMES] == [v for _, v in hooks]
    assert ["FP_HOOK_" + h.upper() for h in _lib.HOOK_NAMES] == [n for n, _ in hooks]
    elems = dict(C_ENUMS["fp_elem"])
    assert {v: "FP_ELEM_" + e[0].upper() for v, e in _lib.ELEMS.items()} == \
        {v: n for n, v in elems.items()}
