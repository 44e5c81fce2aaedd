#!/bin/sh
# run.sh - ctest install_consumers: install the build into a temporary
# prefix and use it from outside, as a user would:
#  1. cmake --install BUILD --prefix P;
#  2. the installed CLI compiles examples/tiny-mlp.json's model for one rank;
#  3. cmake_consumer/ (find_package(flexplan), flexplan::flexplan) loads that
#     plan and runs one executor step under mpiexec -n 1;
#  4. pkgconfig_consumer/ (cc with `pkg-config --cflags --libs flexplan`)
#     compiles the model through the compile API and runs one step;
#  5. the installed Python package, with only P on PYTHONPATH, loads the
#     installed library and prints flexplan.version().
#
# usage: run.sh SOURCE BUILD CMAKE SANITIZE MPIEXEC [MPIEXEC ARGS...]
set -eu
src=$1 build=$2 cmake=$3 sanitize=$4
shift 4
work=$(mktemp -d "${TMPDIR:-/tmp}/fp-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
P=$work/prefix
"$cmake" --install "$build" --prefix "$P" >"$work/install.log"
for f in bin/flexplan lib/libflexplan.so include/flexplan.h include/flexplan_compile.h \
         lib/cmake/flexplan/flexplanConfig.cmake lib/cmake/flexplan/flexplanConfigVersion.cmake \
         lib/pkgconfig/flexplan.pc lib/python3/dist-packages/flexplan/__init__.py \
         lib/python3/dist-packages/flexplan/py.typed lib/python3/dist-packages/flexplan/torch/_shard.py; do
  [ -e "$P/$f" ] || { echo "not installed: $f"; exit 1; }
done
echo "installed into $P: $(du -sh "$P" | cut -f1)"
# the library reads and writes JSON itself (base/json.c): no JSON library
# among what it loads (docs/design.md, "One JSON reader")
if ldd "$P/lib/libflexplan.so" | grep -q json; then
  echo "libflexplan.so links a JSON library:"; ldd "$P/lib/libflexplan.so"; exit 1
fi

# sanitizer builds: the outside programs must load the ASan runtime first
cflags=
[ "$sanitize" = 1 ] && cflags="-fsanitize=address,undefined"

# 2. a one-rank plan, by the installed CLI
/usr/bin/python3 - "$src/examples/tiny-mlp.json" "$work" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
json.dump(d["model"], open(sys.argv[2] + "/model.json", "w"), indent=1)
spec = dict(d["spec"], mesh={"world_size": 1, "ranks_per_node": 1})
json.dump(spec, open(sys.argv[2] + "/spec1.json", "w"), indent=1)
PY
"$P/bin/flexplan" compile "$work/model.json" --spec "$work/spec1.json" -o "$work/one.plan.json" 2>"$work/compile.log"

# 3. CMake
"$cmake" -S "$src/tests/install/cmake_consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$P" \
  -DCMAKE_C_FLAGS="$cflags" -DCMAKE_EXE_LINKER_FLAGS="$cflags" >"$work/cmake-configure.log" ||
  { cat "$work/cmake-configure.log"; exit 1; }
"$cmake" --build "$work/cmake-build" >"$work/cmake-build.log" || { cat "$work/cmake-build.log"; exit 1; }
"$@" "$work/cmake-build/consumer" "$work/one.plan.json"

# 4. pkg-config + cc
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
flags=$(pkg-config --cflags --libs flexplan)
echo "pkg-config --cflags --libs flexplan: $flags"
cc -std=c11 -Wall -Wextra -Werror $cflags -I"$src/tests/install" "$src/tests/install/pkgconfig_consumer/main.c" \
  $flags -Wl,-rpath,"$P/lib" -o "$work/pc-consumer"
"$@" "$work/pc-consumer" "$work/model.json"

# 5. Python: only the prefix on the path, no FLEXPLAN_LIBRARY, run outside the source tree
if [ "$sanitize" = 1 ]; then
  echo "python: skipped under the sanitizers (an ASan library cannot be loaded into a plain interpreter)"
  exit 0
fi
cd "$work"
export P
out=$(env -u FLEXPLAN_LIBRARY PYTHONPATH="$P/lib/python3/dist-packages" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -c '
import flexplan, os
print("python: flexplan", flexplan.version(), "from", flexplan.library_path())
assert flexplan.version() == flexplan.__version__
assert os.path.realpath(flexplan.__file__).startswith(os.path.realpath(os.environ["P"]))
plan = flexplan.load("one.plan.json")
print("python: loaded", plan.info["model"], "for", plan.world_size, "rank")
' 2>&1) || { echo "$out"; exit 1; }
echo "$out"
case $out in *"from $P/lib/libflexplan.so"*) ;; *) echo "the installed package did not load the installed library"; exit 1;; esac
