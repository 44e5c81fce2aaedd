#!/usr/bin/env bash
# Fuzz one target for a while (a ctest test, label fuzz; tests/fuzz/README.md).
# usage: run_fuzz.sh FUZZER TARGET FUZZ_SOURCE_DIR WORKDIR SECONDS
# New inputs go to WORKDIR/corpus (never into the source tree), crashes to
# WORKDIR/artifacts; the seeds (FUZZ_SOURCE_DIR/corpus/TARGET) and the saved
# crashes (FUZZ_SOURCE_DIR/regress/TARGET) are read, not written. Exit 0 when
# nothing crashed; else the crash's path and what to do with it.
set -u
fuzzer=$1 target=$2 dir=$3 work=$4 seconds=$5
mkdir -p "$work/corpus" "$work/artifacts"
dict=()
[ -f "$dir/$target.dict" ] && dict=(-dict="$dir/$target.dict")
"$fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "${dict[@]}" "$work/corpus" "$dir/corpus/$target" "$dir/regress/$target"
rc=$?
if [ $rc != 0 ]; then
  echo "fuzz_$target: the fuzzer stopped with status $rc; the input is in $work/artifacts/:"
  ls -l "$work/artifacts/"
  echo "make it a regression test: copy it into tests/fuzz/regress/$target/ (replayed by fuzz_replay_$target), then fix"
fi
exit $rc
