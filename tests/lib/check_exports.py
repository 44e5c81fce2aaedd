"""check_exports.py - libflexplan.so exports exactly the public API.

Every dynamic symbol the library defines must be a function declared FP_API
in a public header (include/flexplan*.h), every FP_API function must be
exported, every function declared in a public header must be marked FP_API,
the SONAME must carry the major version, and the header's version macros
must equal the CMake project version. Exit 0 when all hold, 1 with the
differences otherwise.

usage: check_exports.py LIBRARY INCLUDE_DIR PROJECT_VERSION [PY_VERSION_FILE]

PY_VERSION_FILE (python/flexplan/_version.py): its __version__ must be the
project version too.
"""
import glob
import os
import re
import subprocess
import sys


def main():
    lib, inc, version = sys.argv[1:4]
    errors = []
    if len(sys.argv) > 4:
        mm = re.search(r'^__version__ = "([^"]+)"', open(sys.argv[4]).read(), flags=re.M)
        if not mm or mm.group(1) != version:
            errors.append("%s: __version__ %s differs from the project version %s"
                          % (sys.argv[4], mm.group(1) if mm else "missing", version))
    headers = sorted(glob.glob(os.path.join(inc, "flexplan*.h")))
    declared, unmarked = set(), []
    macros = {}
    for h in headers:
        text = open(h).read()
        # comments out: declarations only
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        code = re.sub(r"//[^\n]*", "", code)
        for m in re.finditer(r"^\s*(FP_API\s+)?[A-Za-z_][\w \t*]*?\b(fp_\w+)\s*\(", code, flags=re.M):
            line = code[m.start():code.index("\n", m.start())]
            if line.lstrip().startswith(("#", "typedef", "return")):
                continue
            if m.group(1):
                declared.add(m.group(2))
            else:
                unmarked.append("%s: %s" % (os.path.basename(h), m.group(2)))
        for k in ("MAJOR", "MINOR", "PATCH", "STRING"):
            mm = re.search(r"#define FP_VERSION_%s\s+(\S+)" % k, text)
            if mm:
                macros[k] = mm.group(1).strip('"')
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    exported = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            exported.add(parts[2])
    for s in sorted(exported - declared):
        errors.append("exported but not FP_API in a public header: %s" % s)
    for s in sorted(declared - exported):
        errors.append("FP_API in a header but not exported: %s" % s)
    for s in unmarked:
        errors.append("declared in a public header without FP_API: %s" % s)
    dyn = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True, text=True).stdout
    soname = re.search(r"Library soname: \[([^\]]+)\]", dyn)
    want = "libflexplan.so.%s" % version.split(".")[0]
    if not soname or soname.group(1) != want:
        errors.append("SONAME is %s, expected %s" % (soname.group(1) if soname else "missing", want))
    got = "%s.%s.%s" % (macros.get("MAJOR"), macros.get("MINOR"), macros.get("PATCH"))
    if got != version or macros.get("STRING") != version:
        errors.append("header version %s (string %s) differs from the project version %s"
                      % (got, macros.get("STRING"), version))
    if errors:
        print("\n".join(errors))
        return 1
    print("%s: %d exported functions, all public (%s)" % (os.path.basename(lib), len(exported), want))
    return 0


if __name__ == "__main__":
    sys.exit(main())
