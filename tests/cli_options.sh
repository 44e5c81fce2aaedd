#!/usr/bin/env bash
# The command line's option handling (getopt_long, issue 17): CMD --help, -h
# and `help CMD` for every command; `--opt value`, `--opt=value` (and
# `-o value`, `-ovalue`, `--output`) for every option, with identical
# results; "did you mean" for commands, options and enum values, and none
# when nothing is close; every usage error, exit 2; the note compile and
# check print when no spec is given. The front end's "did you mean" for JSON
# members and values is tested in tests/bad (expect.tsv).
# usage: cli_options.sh FLEXPLAN SOURCE_DIR
set -u
fp=$(readlink -f "$1")
src=$(readlink -f "$2")
FP_CLI_TIMEOUT=60
. "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
ex=$src/examples/tiny-mlp.json

# ---- help: every command, three ways; each lists its options ---------------
declare -A opts=(
  [compile]="--spec --output --emit --hardware --policy --ranks --time --help"
  [check]="--spec --hardware --policy --time --help"
  [print]="--help"
  [verify]="--help"
  [explain]="--hardware --exposed --help"
  [simulate]="--hardware --help"
  [viz]="--format --output --ranks --hardware --measured --help"
  [reshard]="--transform --what --to-offset --from-offset --output --emit --help"
)
for c in compile check print verify explain simulate viz reshard; do
  expect 0 "$fp" "$c" --help
  has out "usage: flexplan $c "
  for o in ${opts[$c]}; do has out "$o"; done
  cp "$tmp/out" "$tmp/help1"
  expect 0 "$fp" "$c" -h
  cp "$tmp/out" "$tmp/help2"
  same help1 help2 "$c --help vs -h"
  expect 0 "$fp" help "$c"
  cp "$tmp/out" "$tmp/help3"
  same help1 help3 "$c --help vs help $c"
  # --help anywhere among the operands
  expect 0 "$fp" "$c" somefile --help
  # the general usage names the command
  expect 0 "$fp" --help
  has out "  $c "
done
expect 0 "$fp" help
has out "usage: flexplan <command>"
has out "help [COMMAND]"
expect 2 "$fp" help compil
has err "unknown command 'compil'; did you mean 'compile'?"
expect 2 "$fp" help compile viz
has err "help: expected one COMMAND, got 'viz' too"
expect 2 "$fp" --help compile
has err "unexpected argument 'compile' (flexplan help COMMAND)"
expect 2 "$fp" --frob
has err "unknown option '--frob' (a command comes first"

# ---- --opt value and --opt=value: every option, the same result --------------
"$fp" compile "$ex" -o "$tmp/t.plan.json" 2>/dev/null || bad "compile tiny-mlp"
plan=$tmp/t.plan.json
/usr/bin/python3 - "$ex" "$tmp/model.json" "$tmp/spec.json" <<'P'
import json, sys
d = json.load(open(sys.argv[1]))
json.dump(d["model"], open(sys.argv[2], "w"))
json.dump(d["spec"], open(sys.argv[3], "w"))
P
# both CMD...: run with "--opt value" (A) and "--opt=value" (B) forms, given
# as two argument strings separated by '|'; compare exit 0 and stdout
both() {
  local what=$1 a=$2 b=$3
  # shellcheck disable=SC2086
  (cd "$tmp" && timeout 60 "$fp" $a >"$tmp/A" 2>"$tmp/Aerr"); local ra=$?
  (cd "$tmp" && timeout 60 "$fp" $b >"$tmp/B" 2>"$tmp/Berr"); local rb=$?
  if [ "$ra" = 0 ] && [ "$rb" = 0 ]; then ok; else bad "$what: exit $ra / $rb: $(head -2 "$tmp/Aerr") $(head -2 "$tmp/Berr")"; fi
  # compile_ms differs from run to run; everything else must not
  sed -i 's/"compile_ms": [0-9.]*/"compile_ms": X/; s/"compile_ms":[0-9.]*/"compile_ms":X/; s/"verify_ms":[0-9.]*/"verify_ms":X/' "$tmp/A" "$tmp/B"
  # what goes to stdout, or (check) the one line on stderr
  if [ ! -s "$tmp/A" ] && [ ! -s "$tmp/B" ]; then cp "$tmp/Aerr" "$tmp/A"; cp "$tmp/Berr" "$tmp/B"; fi
  if [ -s "$tmp/A" ] && cmp -s "$tmp/A" "$tmp/B"; then ok; else bad "$what: '$a' and '$b' print different results"; fi
}
both "compile --emit" "compile $ex --emit summary" "compile $ex --emit=summary"
both "compile --spec" "compile model.json --spec spec.json --emit=summary" "compile model.json --spec=spec.json --emit=summary"
both "compile --hardware" "compile $ex --hardware h200 --emit=summary" "compile $ex --hardware=h200 --emit=summary"
both "compile --policy" "compile $ex --policy fsdp2 --emit=summary" "compile $ex --policy=fsdp2 --emit=summary"
both "compile --ranks" "compile $ex --emit=trace --ranks 1,2 -o -" "compile $ex --emit=trace --ranks=1,2 -o -"
both "compile -o" "compile $ex --emit=ir -o -" "compile $ex --emit=ir --output=-"
both "compile -oVALUE" "compile $ex --emit=ir -o -" "compile $ex --emit=ir -o-"
both "compile --emit=ir --output" "compile $ex --emit ir --output -" "compile $ex --emit=ir -o -"
both "options before the operand" "compile --emit summary $ex" "compile $ex --emit=summary"
both "check --spec" "check model.json --spec spec.json" "check model.json --spec=spec.json"
both "check --hardware --policy" "check $ex --hardware h200 --policy fsdp2" "check $ex --hardware=h200 --policy=fsdp2"
both "explain --hardware" "explain $plan --hardware h200" "explain $plan --hardware=h200"
both "explain --exposed" "explain --exposed $plan" "explain $plan --exposed"
both "simulate --hardware" "simulate $plan --hardware h200" "simulate $plan --hardware=h200"
both "viz --format" "viz $plan --format html -o -" "viz $plan --format=html -o -"
both "viz --ranks --hardware" "viz $plan --ranks 0,3 --hardware h200 -o -" "viz $plan --ranks=0,3 --hardware=h200 --output=-"
both "-- ends the options" "print -- $plan" "print $plan"
# check's one-line summary is on stderr: compare that
"$fp" check "$tmp/model.json" --spec "$tmp/spec.json" 2>"$tmp/c1"
"$fp" check "$tmp/model.json" --spec="$tmp/spec.json" 2>"$tmp/c2"
same c1 c2 "check --spec forms (stderr)"
# --measured: both forms reach the reader (a missing file, named, exit 1)
expect 1 "$fp" viz "$plan" --measured "$tmp/none.json" -o "$tmp/m.json"
has err "none.json: error: cannot open"
expect 1 "$fp" viz "$plan" --measured="$tmp/none.json" -o "$tmp/m.json"
has err "none.json: error: cannot open"
# reshard: every option in both forms
"$fp" compile "$src/tests/mpi/mlp.model.json" --spec "$src/tests/mpi/full_shard.spec.json" -o "$tmp/a.plan.json" 2>/dev/null ||
  bad "compile mlp"
both "reshard --emit --transform --to-offset --from-offset" \
  "reshard a.plan.json a.plan.json --emit ir --transform fc*.weight=mxfp8 --to-offset 0 --from-offset 0" \
  "reshard a.plan.json a.plan.json --emit=ir --transform=fc*.weight=mxfp8 --to-offset=0 --from-offset=0"
both "reshard -o --what" "reshard a.plan.json a.plan.json -o x1.json --what weights --emit=json" \
  "reshard a.plan.json a.plan.json --output=x2.json --what=weights --emit=json"
same x1.json x2.json "reshard -o / --output="
# a transfer file through viz, -o in both forms
both "viz of a transfer" "viz x1.json -o -" "viz x1.json --output=-"

# ---- usage errors: each named, exit 2, with the help to read -------------------
expect 2 "$fp" compil "$ex"
has err "flexplan: unknown command 'compil'; did you mean 'compile'?"
has err "(see flexplan --help)"
expect 2 "$fp" simulat "$plan"
has err "did you mean 'simulate'?"
expect 2 "$fp" frobnicate
lacks err "did you mean"
expect 2 "$fp" compile "$ex" --emt=summary
has err "flexplan: compile: unknown option '--emt=summary'; did you mean '--emit'?"
has err "(see flexplan compile --help)"
# a unique prefix of a long option is that option (getopt_long)
expect 0 "$fp" viz "$plan" --rank 0 --form=html -o -
has out "<!DOCTYPE html>"
expect 2 "$fp" compile "$ex" --xyzzy
has err "unknown option '--xyzzy'"
lacks err "did you mean"
expect 2 "$fp" compile "$ex" --h
has err "ambiguous option '--h' (could be --hardware, --help)"
expect 2 "$fp" compile "$ex" -q
has err "compile: unknown option '-q'"
expect 2 "$fp" check "$ex" -o x.json
has err "check: unknown option '-o'"
expect 2 "$fp" explain "$plan" --exposed=yes
has err "explain: option '--exposed' takes no value"
expect 2 "$fp" compile "$ex" --emit
has err "option '--emit' needs a value (plan, ir, summary, trace or html)"
expect 2 "$fp" viz "$plan" --format
has err "option '--format' needs a value (trace or html)"
expect 2 "$fp" simulate "$plan" --hardware
has err "option '--hardware' needs a value (h100-sxm, h200, h200-fit or cpu-mpi)"
expect 2 "$fp" compile "$ex" -o
has err "option '-o' needs a value"
expect 2 "$fp" reshard a b --to-offset
has err "option '--to-offset' needs a value"
# enum values: did you mean, and none when nothing is close
expect 2 "$fp" compile "$ex" --emit sumary
has err "unknown --emit kind 'sumary' (expected plan, ir, summary, trace or html); did you mean 'summary'?"
expect 2 "$fp" compile "$ex" --emit=dot
has err "unknown --emit kind 'dot'"
lacks err "did you mean"
expect 2 "$fp" compile "$ex" --policy fsdp
has err "unknown policy 'fsdp' (expected flexplan or fsdp2); did you mean 'fsdp2'?"
expect 2 "$fp" check "$ex" --policy=flexplna
has err "did you mean 'flexplan'?"
expect 2 "$fp" compile "$ex" --policy zero3
lacks err "did you mean"
expect 2 "$fp" viz "$plan" --format htm
has err "unknown --format 'htm' (expected trace or html); did you mean 'html'?"
expect 2 "$fp" reshard a b --emit=explian
has err "reshard: unknown --emit kind 'explian' (expected summary, ir, explain, json or trace); did you mean 'explain'?"
# an unknown preset stays an input error (exit 1), now with a suggestion
expect 1 "$fp" compile "$ex" --hardware h100 -o "$tmp/h.json"
has err "flexplan: error: --hardware: unknown hardware preset 'h100' (expected one of: h100-sxm, h200, h200-fit, cpu-mpi); a hardware file is named by a path holding '/' or '.' (e.g. ./hw.json); did you mean 'h100-sxm'?"
[ ! -e "$tmp/h.json" ] && ok || bad "output written for an unknown preset"
expect 1 "$fp" simulate "$plan" --hardware=H200
has err "did you mean 'h200'?"
expect 1 "$fp" explain "$plan" --hardware a100
lacks err "did you mean"
# operands: missing, too many
expect 2 "$fp" compile
has err "compile: missing MODEL"
expect 2 "$fp" compile "$ex" "$ex"
has err "compile: unexpected argument"
expect 2 "$fp" print
has err "print: missing FILE"
expect 2 "$fp" verify a b
has err "verify: expected exactly one FILE, got 'b' too"
expect 2 "$fp" explain
has err "explain: missing PLAN"
expect 2 "$fp" simulate a b
has err "simulate: unexpected argument 'b' (one PLAN only)"
expect 2 "$fp" viz a b
has err "viz: unexpected argument 'b' (one PLAN only)"
expect 2 "$fp" reshard a
has err "reshard: expected two plans, FROM and TO"
expect 2 "$fp" reshard a b c
has err "reshard: expected FROM and TO, got 'c' too"
expect 2 "$fp" reshard a b --to-offset 1x
has err "reshard: offset '1x' is not a number"
expect 2 "$fp" reshard a b --transform 'fc*=fp4'
has err "reshard: --transform 'fc*=fp4': unknown transform 'fp4' (known: mxfp8, mxfp8_receiver, mxfp8_sender)"
expect 2 "$fp" reshard a b --transform 'fc*'
has err "reshard: --transform 'fc*': expected PATTERN=NAME (NAME one of mxfp8, mxfp8_receiver, mxfp8_sender)"
# options that do not apply to a transfer
expect 2 "$fp" viz "$tmp/x1.json" --ranks 0
has err "viz: option '--ranks' does not apply to a transfer"
expect 2 "$fp" viz "$tmp/x1.json" --hardware=h200
has err "viz: option '--hardware' does not apply to a transfer"
expect 2 "$fp" viz "$tmp/x1.json" --format html
has err "viz: a transfer draws as a trace only, not html"
expect 1 "$fp" viz "$plan" --format html --measured "$tmp/none.json" -o "$tmp/m.html"  # the page reads records too
has err "none.json: error: cannot open"
if [ -e "$tmp/m.html" ]; then bad "viz --format html with an unreadable record left m.html"; else ok; fi

# viz decides whether its operand is a transfer without opening a FIFO
# (which would wait for a writer forever): the reader then refuses it
mkfifo "$tmp/fifo"
expect 1 "$fp" viz "$tmp/fifo" -o "$tmp/f.json"
has err "fifo: error: not a regular file"

# ---- no spec: a note names the defaults (stderr), the compile succeeds ------------
expect 0 "$fp" check "$tmp/model.json"
has err "model.json: note: no spec (none embedded, no --spec); the defaults apply: full_shard on 8 ranks (8 per node), one bucket per module, params bf16, reductions fp32, main grads fp32, prefetch 1 forward and 1 backward, hardware h100-sxm"
has err "model.json: ok: full_shard"
expect 0 "$fp" compile "$tmp/model.json" --hardware h200 --emit=summary -o -
has err "note: no spec"
lacks err "hardware h100-sxm"
has out '"world_size": 8'
# with a spec, embedded or separate: no note
expect 0 "$fp" check "$ex"
lacks err "note:"
expect 0 "$fp" check "$tmp/model.json" --spec "$tmp/spec.json"
lacks err "note:"

# ---- --time: each phase's CPU time on stderr; the output is the same ---------
expect 0 "$fp" compile "$ex" --emit=summary -o "$tmp/t0.json"
expect 0 "$fp" compile "$ex" --emit=summary -o "$tmp/t1.json" --time
has err "tiny-mlp.json: compile time by phase (CPU ms):"
for ph in "read inputs" lower coalesce memplan sync simulate "memory timeline" verify summary sum; do
  has err "  $ph"
done
matches err "^  verify  *[0-9][0-9]*\.[0-9]"  # "(N runs)" after it under FLEXPLAN_VERIFY_EACH
grep -v '"compile_ms"' "$tmp/t0.json" > "$tmp/t0" && grep -v '"compile_ms"' "$tmp/t1.json" > "$tmp/t1"
same t0 t1 "--emit=summary with and without --time"
expect 0 "$fp" check "$src/examples/llama3-405b.json" --time
has err "compile time by phase"
matches err "^  sum  *[1-9][0-9]*\.[0-9]$"
has err "ok: "
expect 0 "$fp" check "$ex"
lacks err "compile time by phase"

finish cli_options
