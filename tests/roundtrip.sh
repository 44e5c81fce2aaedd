#!/bin/sh
# roundtrip.sh FLEXPLAN MODEL.json
#
# The round-trip test of one example: compile it to plan.json and to .fpir,
# print both as .fpir text, and require the two texts to be identical and
# both files to pass `flexplan verify`. Exit 0 on success, 1 on a mismatch or
# any failing command (its output is shown).
set -eu
if [ $# -ne 2 ]; then
  echo "usage: $0 FLEXPLAN MODEL.json" >&2
  exit 2
fi
fp=$1
model=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fp-roundtrip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

run() {
  if ! "$@"; then
    echo "roundtrip: FAILED: $*" >&2
    exit 1
  fi
}

run "$fp" compile "$model" -o "$tmp/p.json"
run "$fp" compile "$model" --emit=ir -o "$tmp/p.fpir"
run "$fp" print "$tmp/p.json" >"$tmp/a.fpir"
run "$fp" print "$tmp/p.fpir" >"$tmp/b.fpir"
if ! cmp -s "$tmp/a.fpir" "$tmp/b.fpir"; then
  echo "roundtrip: print(plan.json) and print(.fpir) differ for $model:" >&2
  diff -u "$tmp/a.fpir" "$tmp/b.fpir" | head -40 >&2 || true
  exit 1
fi
# print of the emitted .fpir must reproduce it byte for byte
if ! cmp -s "$tmp/p.fpir" "$tmp/b.fpir"; then
  echo "roundtrip: print(parse(x)) != x for the emitted .fpir of $model:" >&2
  diff -u "$tmp/p.fpir" "$tmp/b.fpir" | head -40 >&2 || true
  exit 1
fi
run "$fp" verify "$tmp/p.json"
run "$fp" verify "$tmp/p.fpir"
if [ ! -s "$tmp/a.fpir" ]; then
  echo "roundtrip: empty .fpir for $model" >&2
  exit 1
fi
echo "roundtrip ok: $model ($(wc -l <"$tmp/a.fpir") lines of .fpir)"
