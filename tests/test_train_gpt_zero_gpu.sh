#!/bin/bash
# train_gpt --zero 1 (ZeRO-1, docs/runtime.md) on the CUDA backend:
#  - 1 rank: --zero 1 prints its AdamW shard, its first loss line is
#    --zero 0's bitwise and its parameters after 6 steps are --zero 0's;
#  - a checkpoint saved with --zero 1 records it, holds the whole moments
#    (the file of --zero 0 in size) and resumes with --zero 0, and one saved
#    with --zero 0 resumes with --zero 1, both to --zero 0's parameters;
#  - 2 ranks under launch through NCCL (a GPU each, or both on the one GPU
#    as two NCCL hosts: tests/gpu_share_lib.sh): --zero 1 ends with
#    --zero 0's parameters and half the AdamW state per rank, and its
#    checkpoint resumes on 1 rank with --zero 0.
# The CUDA backward adds with atomics (wte's scatter, bias and LayerNorm
# gradient sums): two runs of the same flags differ in the last bits, so
# "the same parameters" is: no further from --zero 0's than a second
# --zero 0 run is, times 4 (or 1e-5), where a missing or misplaced update
# or moment shows as ~1e-3 (the learning rate). The update and the norm
# are bitwise the unsharded ones given one gradient: test_gpt_cuda_model.
# Skips (exit 77) without a GPU or in a build without CUDA.
set -u
. "$(dirname "$0")/train_gpt_zero_lib.sh"
. "$(dirname "$0")/gpu_share_lib.sh"
[ -x "$TG" ] || { echo "SKIP: no $TG"; exit 77; }
[ "$(gpu_count)" -gt 0 ] || { echo "SKIP: no GPU here"; exit 77; }
# the same cuBLASLt algorithm in every run; no tuning cache written
export GPT_CUDA_TUNE=0 GPT_CUDA_TUNE_CACHE=0
seq 1 300000 >"$T/data.txt"
# warmup 10: the learning rate of steps 1..6 does not depend on --steps
M=(--data "$T/data.txt" --device cuda --layers 2 --heads 4 --channels 256
   --seq-len 128 --batch 4 --warmup 10 --lr 1e-3 --val-every 3 --val-batches 2)

"$TG" "${M[@]}" --steps 1 --zero 1 >"$T/probe.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  grep -q "built without CUDA\|a GPU was asked for" "$T/probe.log" &&
    { cat "$T/probe.log"; echo "SKIP: no usable GPU in this build"; exit 77; }
  cat "$T/probe.log"
  fail "--zero 1 on the GPU exits $rc"
fi

# run1 NAME [train_gpt flags...]: 1 rank, no launcher
run1() {
  local name=$1
  shift
  "$TG" "${M[@]}" "$@" --dump-params "$T/$name.bin" >"$T/$name.log" 2>&1 ||
    { cat "$T/$name.log"; fail "$name"; }
}
step1() { grep -E 'step +1/' "$1" | sed 's/ | [0-9.]* ms.*//'; }
# maxdiff A B: the largest |a - b| over two parameter dumps
maxdiff() {
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import array, sys
a, b = array.array('f'), array.array('f')
a.frombytes(open(sys.argv[1], 'rb').read())
b.frombytes(open(sys.argv[2], 'rb').read())
assert len(a) == len(b) and len(a) > 0
print('%.9g' % max(abs(x - y) for x, y in zip(a, b)))
EOF
}
# close NAME A B: A's parameters within the noise of two --zero 0 runs of B
close() {
  local d
  d=$(maxdiff "$2" "$3") || fail "$1: comparing $2 and $3"
  echo "  $1: max |difference| $d (two --zero 0 runs: $NOISE)"
  /usr/bin/python3 -c "import sys; d,n=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if d <= max(4*n, 1e-5) else 1)" \
    "$d" "$NOISE" || fail "$1: parameters differ by $d, more than 4 x $NOISE"
}

# -- 1 rank ---------------------------------------------------------------------
run1 z0a --steps 6 --zero 0
run1 z0b --steps 6 --zero 0
run1 z1 --steps 6 --zero 1
NOISE=$(maxdiff "$T/z0a.bin" "$T/z0b.bin") || fail "comparing two --zero 0 runs"
grep -q "AdamW state: .* (--zero 1: a shard of" "$T/z1.log" || { cat "$T/z1.log"; fail "no shard line"; }
grep -q "device: .*(cuda backend)" "$T/z1.log" || { cat "$T/z1.log"; fail "not on the GPU"; }
[ -n "$(step1 "$T/z1.log")" ] && [ "$(step1 "$T/z0a.log")" = "$(step1 "$T/z1.log")" ] ||
  { step1 "$T/z0a.log"; step1 "$T/z1.log"; fail "step 1's loss line differs"; }
grep -q "final:" "$T/z1.log" || fail "no final line"
close "1 rank, --zero 1 vs --zero 0" "$T/z1.bin" "$T/z0a.bin"
cmp -s "$T/z1.bin" "$T/z0a.bin" && echo "  (bitwise the same)"

# -- checkpoints ------------------------------------------------------------------
run1 save-z1 --steps 3 --zero 1 --ckpt-dir "$T/ck1" --ckpt-every 3
run1 save-z0 --steps 3 --zero 0 --ckpt-dir "$T/ck0" --ckpt-every 3
f1=$T/ck1/step-3/rank-0.bin f0=$T/ck0/step-3/rank-0.bin
[ -f "$f1" ] && [ -f "$f0" ] || fail "no checkpoint files"
[ "$(zero_of "$f1")" = 1 ] || fail "the --zero 1 checkpoint does not record it"
[ "$(zero_of "$f0")" = 0 ] || fail "the --zero 0 checkpoint records --zero 1"
[ "$(stat -c %s "$f1")" = "$(stat -c %s "$f0")" ] || fail "the --zero 1 checkpoint is not whole"
run1 res-z1to0 --steps 6 --zero 0 --ckpt-dir "$T/ck1"
run1 res-z0to1 --steps 6 --zero 1 --ckpt-dir "$T/ck0"
for n in res-z1to0 res-z0to1; do
  grep -q "resumed from step 3 of" "$T/$n.log" || { cat "$T/$n.log"; fail "$n: no resume"; }
done
grep -q "saved by 1 ranks with --zero 1; the AdamW state is re-sharded for 1 ranks with --zero 0" \
  "$T/res-z1to0.log" || { cat "$T/res-z1to0.log"; fail "no re-shard line"; }
close "--zero 1 checkpoint resumed with --zero 0" "$T/res-z1to0.bin" "$T/z0a.bin"
close "--zero 0 checkpoint resumed with --zero 1" "$T/res-z0to1.bin" "$T/z0a.bin"

# -- 2 ranks through NCCL ----------------------------------------------------------
# (gpu_nccl_ranks: the wrapper where the two share one GPU; its N unused)
gpu_nccl_ranks "$T"
RUN_WRAP=${WRAP[0]:-}
run w2-z0 2 --steps 6 --zero 0 --ckpt-dir "$T/ck2z0" --ckpt-every 3
run w2-z1 2 --steps 6 --zero 1 --ckpt-dir "$T/ck2" --ckpt-every 3
/usr/bin/python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if b < 0.51*a else 1)" \
  "$(mib "$T/z1.log")" "$(mib "$T/w2-z1.log")" || fail "2 ranks: the AdamW state does not halve"
close "2 ranks, --zero 1 vs --zero 0" "$T/w2-z1.bin" "$T/w2-z0.bin"
[ "$(zero_of "$T/ck2/step-3/rank-0.bin")" = 1 ] || fail "2 ranks: no --zero 1 checkpoint"
# from step 3 of each on 1 rank with --zero 0
rm -rf "$T/ck2/step-6" "$T/ck2z0/step-6"
run1 w2-res-z1 --steps 6 --zero 0 --ckpt-dir "$T/ck2"
run1 w2-res-z0 --steps 6 --zero 0 --ckpt-dir "$T/ck2z0"
grep -q "saved by 2 ranks with --zero 1; the AdamW state is re-sharded for 1 ranks with --zero 0" \
  "$T/w2-res-z1.log" || { cat "$T/w2-res-z1.log"; fail "2 ranks -> 1: no re-shard line"; }
close "2 ranks --zero 1 resumed on 1 rank --zero 0, vs --zero 0's" "$T/w2-res-z1.bin" "$T/w2-res-z0.bin"
# a 1-rank --zero 0 checkpoint taken up by 2 ranks, with and without
# --zero 1: the moments re-sharded on load through NCCL, the same end
for z in 0 1; do
  mkdir "$T/ck0-w2z$z" && cp -r "$T/ck0/step-3" "$T/ck0-w2z$z/" || fail "copying a checkpoint"
  run w2-from1-z$z 2 --steps 6 --zero "$z" --ckpt-dir "$T/ck0-w2z$z"
  grep -q "resumed from step 3 of" "$T/w2-from1-z$z.log" ||
    { cat "$T/w2-from1-z$z.log"; fail "1 rank -> 2 ranks --zero $z: no resume"; }
done
grep -q "saved by 1 ranks with --zero 0; the AdamW state is re-sharded for 2 ranks with --zero 1" \
  "$T/w2-from1-z1.log" || { cat "$T/w2-from1-z1.log"; fail "1 rank -> 2 ranks: no re-shard line"; }
close "1 rank --zero 0 resumed on 2 ranks --zero 1, vs --zero 0" "$T/w2-from1-z1.bin" "$T/w2-from1-z0.bin"
echo "test_train_gpt_zero_gpu: ok"
