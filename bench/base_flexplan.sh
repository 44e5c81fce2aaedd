# base_flexplan.sh - sourced by the bench scripts that compare this tree
# with another revision, after release_flexplan.sh: builds a Release
# flexplan (no tests, no CUDA) of git ref $BASE (default main) from
# `git archive` in bench/out/base-src / base-build and sets
#   BASE  the ref      basefp  its flexplan binary
# Build logs go next to the build directory; a failure prints them and exits.
BASE=${BASE:-main}
src="$root/bench/out/base-src"
bbuild="$root/bench/out/base-build"
rm -rf "$src"
mkdir -p "$src"
git -C "$root" archive "$BASE" | tar -x -C "$src"
if [ ! -f "$bbuild/CMakeCache.txt" ]; then
  cmake -S "$src" -B "$bbuild" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DFP_CUDA=OFF \
    >"$bbuild.configure.log" 2>&1 || { cat "$bbuild.configure.log" >&2; exit 1; }
fi
cmake --build "$bbuild" --target flexplan >"$bbuild.build.log" 2>&1 || { cat "$bbuild.build.log" >&2; exit 1; }
basefp="$bbuild/flexplan"
