#!/bin/bash
# reshard_cli.sh FLEXPLAN SRCDIR - `flexplan reshard` end to end: the figures
# (bytes on the wire equal the lower bound), -o (JSON, atomic), every --emit,
# MXFP8 on the wire, and the located errors for plans that do not fit
# together and the usage errors (docs/reshard.md).
set -u
F=$1; S=$2; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
spec() { # spec NAME WORLD -> $T/NAME-WORLD.spec.json
  sed -E "s/\"world_size\": *[0-9]+/\"world_size\": $2/" "$S/tests/mpi/$1.spec.json" > "$T/$1-$2.spec.json"
}
spec full_shard 4; spec placements-w3 3
$F compile "$S/tests/mpi/mlp.model.json" --spec "$T/full_shard-4.spec.json" -o "$T/a.plan.json" >/dev/null 2>&1 || fail compile a
$F compile "$S/tests/mpi/mlp.model.json" --spec "$T/placements-w3-3.spec.json" -o "$T/b.plan.json" >/dev/null 2>&1 || fail compile b
$F compile "$S/tests/mpi/mlp-tied.model.json" --spec "$T/full_shard-4.spec.json" -o "$T/tied.plan.json" >/dev/null 2>&1 || fail compile tied
# the same model with another shape of fc1.bias
sed 's/"fc1.bias", "shape": \[19\]/"fc1.bias", "shape": [18]/' "$S/tests/mpi/mlp.model.json" > "$T/mlp18.model.json"
$F compile "$T/mlp18.model.json" --spec "$T/placements-w3-3.spec.json" -o "$T/shape.plan.json" >/dev/null 2>&1 || fail compile shape

out=$($F reshard "$T/a.plan.json" "$T/b.plan.json" -o "$T/x.json") || fail "reshard exit $?"
echo "$out" | grep -q '"ratio":1.000' || fail "ratio not 1.000: $out"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['format']=='flexplan.xfer.v1'; f=d['figures']; assert f['wire_bytes']==f['lower_bound_bytes']>0, f; assert len(d['procs'])==4" "$T/x.json" || fail "-o JSON"
$F reshard "$T/a.plan.json" "$T/b.plan.json" --emit=ir | grep -q '^xfer model="mlp" what=weights from_world=4 to_world=3' || fail "--emit=ir"
$F reshard "$T/a.plan.json" "$T/b.plan.json" --emit=explain | grep -q 'ratio 1.000' || fail "--emit=explain"
$F reshard "$T/a.plan.json" "$T/b.plan.json" --emit=trace | python3 -c "import json,sys; d=json.load(sys.stdin); assert any(e.get('ph')=='X' for e in d['traceEvents'])" || fail "--emit=trace"
mx=$($F reshard "$T/a.plan.json" "$T/b.plan.json" --transform 'fc*.weight=mxfp8' --emit=ir) || fail "mxfp8 exit"
echo "$mx" | grep -q 'param fc0.weight numel=260 transform=mxfp8' || fail "mxfp8 param not marked"
echo "$mx" | grep -q 'prep_send fp32 n=.*param=fc0.weight.* wires=e4m3:[0-9]*,e8m0:' || fail "no sender-side prep_send"
echo "$mx" | grep -q 'quantize_mxfp8' && fail "the built-in mxfp8 runs its own quantize ops (one code path: the transform's)"
# the two modes by name: mxfp8_sender is mxfp8; mxfp8_receiver sends FROM's bytes
wb() { $F reshard "$T/a.plan.json" "$T/b.plan.json" --transform "fc*.weight=$1" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['wire_bytes'], d['lower_bound_bytes'])"; }
read -r w_mx lb <<< "$(wb mxfp8)"; read -r w_snd _ <<< "$(wb mxfp8_sender)"; read -r w_rcv _ <<< "$(wb mxfp8_receiver)"
[ "$w_snd" = "$w_mx" ] && [ "$w_rcv" = "$lb" ] && [ "$w_mx" -lt "$lb" ] || fail "modes: mxfp8 $w_mx sender $w_snd receiver $w_rcv lower bound $lb"
$F reshard "$T/a.plan.json" "$T/b.plan.json" --transform 'fc*.weight=mxfp8_receiver' --emit=ir | grep -q 'prep_send fp32 n=.* wires=fp32:' || fail "receiver-side wires not FROM's dtype"
$F reshard "$T/a.plan.json" "$T/b.plan.json" --transform 'fc*.weight=mxfp8' | python3 -c "import json,sys; d=json.load(sys.stdin); assert d['wire_bytes'] < d['lower_bound_bytes']" || fail "mxfp8 wire not smaller"

# flexplan viz of a saved transfer: its trace; a tampered file: located, exit 1
$F viz "$T/x.json" -o "$T/x.trace.json" || fail "viz of a transfer"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert sum(e.get('ph')=='X' for e in d['traceEvents']) > 10" "$T/x.trace.json" || fail "viz trace"
sed 's/"processes":4/"processes":"4"/' "$T/x.json" > "$T/bad.xfer.json"
err=$($F viz "$T/bad.xfer.json" -o "$T/bad.trace.json" 2>&1); rc=$?
[ $rc = 1 ] || fail "viz of a tampered transfer: exit $rc"
echo "$err" | grep -Eq "bad.xfer.json:[0-9]+:[0-9]+: error: /processes: expected an integer" || fail "viz tampered: $err"
[ -e "$T/bad.trace.json" ] && fail "viz wrote output on error"
$F viz "$T/x.json" --format=html >/dev/null 2>&1; [ $? = 2 ] || fail "viz --format=html of a transfer not a usage error"

# errors: located, exit 1, no output written
err=$($F reshard "$T/a.plan.json" "$T/tied.plan.json" -o "$T/bad.json" 2>&1); rc=$?
[ $rc = 1 ] || fail "other model: exit $rc"
echo "$err" | grep -Eq "tied.plan.json:[0-9]+:[0-9]+: error: /model: the plans are of different models" || fail "other model: $err"
[ -e "$T/bad.json" ] && fail "output written on error"
err=$($F reshard "$T/a.plan.json" "$T/shape.plan.json" 2>&1); rc=$?
[ $rc = 1 ] || fail "other shape: exit $rc"
echo "$err" | grep -Eq "shape.plan.json:[0-9]+:[0-9]+: error: /params/3/shape: param 'fc1.bias' has shape \[18\] here and \[19\]" || fail "other shape: $err"
# weights+optimizer: the AdamW state (both plans' default) goes too, wire =
# lower bound; between plans of different optimizers: located on TO's
# /optimizer/type; with a plan that holds none: refused
out=$($F reshard "$T/a.plan.json" "$T/b.plan.json" --what weights+optimizer) || fail "weights+optimizer exit $?"
echo "$out" | grep -q '"ratio":1.000' || fail "weights+optimizer ratio: $out"
w1=$(echo "$out" | python3 -c "import json,sys; print(json.load(sys.stdin)['wire_bytes'])")
w0=$($F reshard "$T/a.plan.json" "$T/b.plan.json" | python3 -c "import json,sys; print(json.load(sys.stdin)['wire_bytes'])")
[ "$w1" = $((3 * w0)) ] || fail "weights+optimizer wire $w1 is not 3 x the weights' $w0 (fp32 main and AdamW state)"
$F reshard "$T/a.plan.json" "$T/b.plan.json" --what weights+optimizer --emit=ir | grep -q '^xfer model="mlp" what=weights+optimizer' || fail "weights+optimizer --emit=ir"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); s['optimizer']={'type': sys.argv[3]}; json.dump(s, open(sys.argv[2], 'w'))" "$T/placements-w3-3.spec.json" "$T/sgd.spec.json" sgd
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); s['optimizer']={'type': sys.argv[3]}; json.dump(s, open(sys.argv[2], 'w'))" "$T/placements-w3-3.spec.json" "$T/none.spec.json" none
$F compile "$S/tests/mpi/mlp.model.json" --spec "$T/sgd.spec.json" -o "$T/sgd.plan.json" >/dev/null 2>&1 || fail compile sgd
$F compile "$S/tests/mpi/mlp.model.json" --spec "$T/none.spec.json" -o "$T/none.plan.json" >/dev/null 2>&1 || fail compile none
err=$($F reshard "$T/a.plan.json" "$T/sgd.plan.json" --what weights+optimizer 2>&1); [ $? = 1 ] || fail "sgd exit"
echo "$err" | grep -Eq "sgd.plan.json:[0-9]+:[0-9]+: error: /optimizer/type: --what weights\+optimizer: this plan holds sgd state and .*a.plan.json holds adamw" || fail "weights+optimizer between optimizers: $err"
err=$($F reshard "$T/a.plan.json" "$T/none.plan.json" --what weights+optimizer 2>&1); [ $? = 1 ] || fail "none exit"
echo "$err" | grep -q "none.plan.json:.*the plan holds no optimizer state" || fail "weights+optimizer to none: $err"
$F reshard "$T/a.plan.json" "$T/none.plan.json" >/dev/null || fail "weights only to a plan without state"
# a TO plan that keeps the frozen fc1.* as MXFP8: MXFP8 on the wire, no
# dequantize, scales need regions, the .fpir and JSON mark them; the way back
# (from MXFP8 weights, no full-precision copy) is refused, located at FROM's
# param, exit 1, nothing written
$F compile "$S/tests/mpi/mlp-frozen.model.json" --spec "$S/tests/mpi/full_shard.spec.json" -o "$T/fz.plan.json" >/dev/null 2>&1 || fail compile frozen
$F compile "$S/tests/mpi/mlp-frozen.model.json" --spec "$S/tests/mpi/mxfp8-keep.spec.json" -o "$T/keep.plan.json" >/dev/null 2>&1 || fail compile keep
ir=$($F reshard "$T/fz.plan.json" "$T/keep.plan.json" --emit=ir) || fail "keep exit"
echo "$ir" | grep -q 'param fc1.weight numel=380 wire=mxfp8' || fail "kept param not marked"
echo "$ir" | grep -q 'need to+[0-9]* bytes=12 e8m0 param=fc1.weight' || fail "no scales need region"
echo "$ir" | grep -q 'dequantize_mxfp8' && fail "a kept param is dequantized"
$F reshard "$T/fz.plan.json" "$T/keep.plan.json" | grep -q '"ratio":1.000' || fail "keep from block-aligned chunks: ratio not 1.000"
$F reshard "$T/fz.plan.json" "$T/keep.plan.json" -o "$T/keep.xfer.json" >/dev/null && $F viz "$T/keep.xfer.json" -o "$T/keep.trace.json" >/dev/null || fail "a saved transfer into kept MXFP8 does not load back"
# from kept MXFP8: read by dequantizing (the file loads back)
ir=$($F reshard "$T/keep.plan.json" "$T/fz.plan.json" --emit=ir) || fail "from kept MXFP8: exit"
echo "$ir" | grep -q 'param fc1.weight numel=380 source=mxfp8' || fail "from kept MXFP8: source not marked"
echo "$ir" | grep -q 'dequantize_mxfp8 fp32<-e4m3 .*param=fc1.weight.* src=from+[0-9]* aux=from+' || fail "from kept MXFP8: no dequantizing read"
$F reshard "$T/keep.plan.json" "$T/fz.plan.json" -o "$T/back.json" >/dev/null && $F viz "$T/back.json" -o "$T/back.trace.json" >/dev/null || fail "a saved transfer from kept MXFP8 does not load back"
# kept into kept: the e4m3 bytes and scales pass through (copied, or sent as they are), no quantize or dequantize
ir=$($F reshard "$T/keep.plan.json" "$T/keep.plan.json" --to-offset 1 --emit=ir) || fail "kept into kept: exit"
echo "$ir" | grep -q 'copy e4m3 n=380 param=fc1.weight' && echo "$ir" | grep -q 'copy e8m0 n=12 param=fc1.weight' || fail "kept into kept: no pass-through copies"
echo "$ir" | grep -q 'send peer=[0-9]* e8m0 n=12 param=fc1.weight' || fail "kept into kept: no scales sent"
echo "$ir" | grep -Eq 'quantize_mxfp8|dequantize_mxfp8' && fail "kept into kept: converted"
$F reshard "$T/keep.plan.json" "$T/keep.plan.json" --to-offset 1 | grep -q '"ratio":1.000' || fail "kept into kept: ratio not 1.000"
$F reshard "$T/keep.plan.json" "$T/keep.plan.json" --to-offset 1 -o "$T/kk.json" >/dev/null && $F viz "$T/kk.json" -o "$T/kk.trace.json" >/dev/null || fail "a saved kept-into-kept transfer does not load back"
# shared local programs: hybrid 2 x 3 -> 2 x 2, processes 2 and 3 repeat 0
# and 1 (text form, JSON, explain)
spec hybrid 6; spec hybrid 4
$F compile "$S/tests/mpi/mlp.model.json" --spec "$T/hybrid-6.spec.json" -o "$T/h6.plan.json" >/dev/null 2>&1 || fail compile h6
$F compile "$S/tests/mpi/mlp.model.json" --spec "$T/hybrid-4.spec.json" -o "$T/h4.plan.json" >/dev/null 2>&1 || fail compile h4
$F reshard "$T/h6.plan.json" "$T/h4.plan.json" --emit=ir | grep -q '^proc 3 stage=0: same as proc 1$' || fail "no shared program in the text form"
$F reshard "$T/h6.plan.json" "$T/h4.plan.json" --emit=explain | grep -q '^2 of the 6 processes repeat' || fail "explain: shared programs"
$F reshard "$T/h6.plan.json" "$T/h4.plan.json" -o "$T/h.xfer.json" >/dev/null || fail "shared -o"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert [p.get('same') for p in d['procs']] == [None, None, 0, 1, None, None], d['procs']" "$T/h.xfer.json" || fail "JSON same"
# an offloaded param (main weights in host memory) is refused, located
$F compile "$S/tests/mpi/mlp.model.json" --spec "$S/tests/mpi/offload.spec.json" -o "$T/off.plan.json" >/dev/null 2>&1 || fail compile offload
err=$($F reshard "$T/a.plan.json" "$T/off.plan.json" 2>&1); [ $? = 1 ] || fail "offload exit"
echo "$err" | grep -Eq "off.plan.json:[0-9]+:[0-9]+: error: /params/0: param 'fc0.weight' is offloaded" || fail "offload: $err"
err=$($F reshard "$T/a.plan.json" "$T/b.plan.json" --to-offset 9 2>&1); [ $? = 1 ] || fail "to-offset exit"
echo "$err" | grep -q "must lie in \[0, 4\]" || fail "to-offset: $err"
$F reshard "$T/a.plan.json" "$T/b.plan.json" --transform 'fc*' >/dev/null 2>&1; [ $? = 2 ] || fail "a transform without =NAME not a usage error"
err=$($F reshard "$T/a.plan.json" "$T/b.plan.json" --transform 'fc*=fp4' -o "$T/fp4.xfer.json" 2>&1); [ $? = 2 ] || fail "unknown transform exit"
echo "$err" | grep -q "reshard: --transform 'fc\*=fp4': unknown transform 'fp4' (known: mxfp8, mxfp8_receiver, mxfp8_sender)" || fail "unknown transform: $err"
[ -e "$T/fp4.xfer.json" ] && fail "unknown transform: output written"
$F reshard "$T/a.plan.json" >/dev/null 2>&1; [ $? = 2 ] || fail "one plan not a usage error"
err=$($F reshard "$T/a.plan.json" "$T/missing.plan.json" 2>&1); [ $? = 1 ] || fail "missing file exit"
echo "$err" | grep -q "missing.plan.json" || fail "missing file: $err"
[ $fails = 0 ] && echo "ok" || { echo "$fails failure(s)"; exit 1; }
