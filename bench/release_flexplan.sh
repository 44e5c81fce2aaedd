# release_flexplan.sh - sourced by the bench scripts: builds a Release
# flexplan (no tests, no CUDA) in bench/out/build once and sets
#   root  the source tree      fp  the flexplan binary      PY  /usr/bin/python3
# Build logs go next to the build directory; a failure prints them and exits.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$root/bench/out/build"
PY=/usr/bin/python3
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
mkdir -p "$root/bench/out"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_TESTING=OFF -DFP_CUDA=OFF >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log" >&2; exit 1; }
fi
cmake --build "$build" --target flexplan >"$build.build.log" 2>&1 ||
  { cat "$build.build.log" >&2; exit 1; }
fp="$build/flexplan"
