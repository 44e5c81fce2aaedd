# cli_lib.sh - what the command-line test scripts share (sourced by
# test_cli.sh, cli_options.sh and harden_cli.sh): a scratch directory, the
# pass/fail counts and the checks. Each script sets FP_CLI_TIMEOUT (seconds a
# command may run before it counts as a hang) before sourcing this file.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
# expect STATUS CMD...: run (FP_CLI_TIMEOUT s at most), compare the exit
# status; stdout is kept in $tmp/out, stderr in $tmp/err
expect() {
  local want=$1
  shift
  timeout "${FP_CLI_TIMEOUT:-60}" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" = "$want" ]; then ok; else bad "$* -> exit $got, want $want: $(head -3 "$tmp/err")"; fi
}
# has / lacks FILE TEXT: the saved output (out or err) holds TEXT, or not
has() { if grep -qF -- "$2" "$tmp/$1"; then ok; else bad "$1 lacks '$2': $(head -3 "$tmp/$1")"; fi; }
lacks() { if grep -qF -- "$2" "$tmp/$1"; then bad "$1 has '$2': $(head -3 "$tmp/$1")"; else ok; fi; }
# matches FILE REGEX: the saved output holds a line matching REGEX (grep's BRE)
matches() { if grep -q -- "$2" "$tmp/$1"; then ok; else bad "$1 matches no '$2': $(head -3 "$tmp/$1")"; fi; }
# same A B WHY: two saved outputs are byte for byte equal
same() { if cmp -s "$tmp/$1" "$tmp/$2"; then ok; else bad "$1 and $2 differ ($3)"; fi; }
# finish NAME: print the counts; the script's status is the last command's
finish() {
  echo "$1: $pass passed, $fail failed"
  [ "$fail" = 0 ]
}
