#!/bin/bash
# train_gpt's resume (docs/runtime.md, "Start-up"): the shard read on a
# thread beside the start-up gives bit for bit the parameters of an
# uninterrupted run, and of the read in place (TRAIN_GPT_NO_PREFETCH=1),
# from a checkpoint of the older format too; another --batch goes on at
# the next window of the data;
# a missing step, a corrupt shard or a shard of another model is reported
# with the same lines and exit code either way.
set -u
. "$(dirname "$0")/train_gpt_lib.sh"
M=(--preset tiny --steps 6 --val-every 0 --val-batches 1 --threads 1)

"$TG" "${M[@]}" --dump-params "$T/whole.bin" >"$T/out" 2>&1 ||
  { cat "$T/out"; fail "the uninterrupted run"; }
"$TG" "${M[@]}" --steps 6 --ckpt-dir "$T/ck" --ckpt-every 3 >"$T/out" 2>&1 ||
  { cat "$T/out"; fail "the run that saves"; }
[ -f "$T/ck/step-3/manifest.json" ] || fail "no step 3 saved"
# the last step is saved too: the trained weights are in the checkpoint
[ -f "$T/ck/step-6/manifest.json" ] || fail "the last step (6) not saved"
cp -r "$T/ck" "$T/ck2"

# resume from step 3, both ways: the same parameters as without the stop
for way in pre inplace; do
  if [ $way = inplace ]; then export TRAIN_GPT_NO_PREFETCH=1; fi
  LAUNCH_RESUME_STEP=3 "$TG" "${M[@]}" --ckpt-dir "$T/ck2" \
    --dump-params "$T/$way.bin" >"$T/out" 2>&1 ||
    { cat "$T/out"; fail "resume ($way)"; }
  grep -q "train_gpt: resumed from step 3 of $T/ck2" "$T/out" ||
    { cat "$T/out"; fail "no resumed line ($way)"; }
  cmp -s "$T/whole.bin" "$T/$way.bin" || fail "resumed ($way) != uninterrupted"
  unset TRAIN_GPT_NO_PREFETCH
done
grep -q "beside the start-up" "$T/out" && fail "the in-place read says it overlapped"
# another --seed: the checkpoint's stays (the data order's state), and the
# set-up line and a warning say so (it printed the ignored --seed)
LAUNCH_RESUME_STEP=3 "$TG" "${M[@]}" --ckpt-dir "$T/ck2" --seed 7 \
  --dump-params "$T/seed.bin" >"$T/out" 2>"$T/err" || { cat "$T/out" "$T/err"; fail "resume --seed 7"; }
grep -q "saved with --seed 1337; this run goes on with it, not --seed 7" "$T/err" ||
  { cat "$T/err"; fail "no warning on --seed 7"; }
grep -q "clip 1, seed 1337$" "$T/out" || { cat "$T/out"; fail "the set-up line's seed"; }
cmp -s "$T/whole.bin" "$T/seed.bin" || fail "resumed with --seed 7 != uninterrupted"
echo "  resumed from step 3 (read beside the start-up, and in place): bitwise the uninterrupted run"

# a checkpoint of the format before the data position counted windows
# (TGPTCK1: micro-batches) resumes as before: the header's magic and
# position rewritten (then not hashed: LAUNCH_CKPT_VERIFIED names the step)
cp -r "$T/ck" "$T/old"
/usr/bin/python3 - "$T/old/step-3/rank-0.bin" <<'PY' || fail "rewriting the header as TGPTCK1"
import struct, sys
with open(sys.argv[1], "r+b") as f:
    h = f.read(80)
    assert h[:8] == b"TGPTCK2\0", h[:8]
    batch, = struct.unpack_from("<i", h, 8 + 7 * 4)
    window, = struct.unpack_from("<Q", h, 72)
    f.seek(0)
    f.write(b"TGPTCK1\0")
    f.seek(72)
    f.write(struct.pack("<Q", window // batch))
PY
LAUNCH_RESUME_STEP=3 LAUNCH_CKPT_VERIFIED=3 "$TG" "${M[@]}" --ckpt-dir "$T/old" \
  --dump-params "$T/old.bin" >"$T/out" 2>&1 || { cat "$T/out"; fail "resume (TGPTCK1)"; }
cmp -s "$T/whole.bin" "$T/old.bin" || fail "resumed (TGPTCK1) != uninterrupted"
echo "  a checkpoint of the older format (TGPTCK1) resumes bitwise too"

# another --batch goes on at the next window of the data (it resumed at
# micro-batch 2 of the new size: --batch 2 to 4 skipped windows 4..7).
# With --lr 0 the parameters stay, so a step's loss is the mean loss of
# its windows: step 3 with --batch 4 after 2 steps of --batch 2 covers
# windows 4..7, steps 3 and 4 of --batch 2; its step 4, their steps 5, 6.
Z=(--preset tiny --val-every 0 --val-batches 1 --threads 1 --lr 0 --warmup 0)
"$TG" "${Z[@]}" --batch 2 --steps 6 --ckpt-dir "$T/bz" --ckpt-every 2 >"$T/b2" 2>&1 ||
  { cat "$T/b2"; fail "--batch 2"; }
LAUNCH_RESUME_STEP=2 "$TG" "${Z[@]}" --batch 4 --steps 4 --ckpt-dir "$T/bz" \
  >"$T/b4" 2>"$T/b4.err" || { cat "$T/b4" "$T/b4.err"; fail "resume with --batch 4"; }
grep -q "continues it with --batch 4 .*from window 4 of the training data" "$T/b4.err" ||
  { cat "$T/b4.err"; fail "no warning naming window 4"; }
awk -F'|' 'FNR == 1 { f++ }
  /^step/ { split($1, s, /[ \/]+/); split($2, l, / +/); loss[f, s[2] + 0] = l[3] }
  END {
    for (k = 3; k <= 4; k++) {
      want = (loss[1, 2 * k - 3] + loss[1, 2 * k - 2]) / 2
      d = loss[2, k] - want
      if (loss[2, k] == "" || d > 5e-6 || d < -5e-6) {
        printf "step %d of --batch 4: loss %s, not %.6f (the mean of --batch 2 steps %d, %d)\n",
          k, loss[2, k], want, 2 * k - 3, 2 * k - 2
        bad = 1
      }
    }
    exit bad
  }' "$T/b2" "$T/b4" || fail "resumed with --batch 4 on other windows"
echo "  resumed with --batch 4 from a --batch 2 checkpoint: the next windows"

# failures: the same stderr and exit code from the thread and in place.
# both CODE PATTERN VAR=VALUE [train_gpt flags...]
both() {
  local code=$1 pat=$2 var=$3 rc
  shift 3
  for way in pre inplace; do
    if [ $way = pre ]; then
      env "$var" "$TG" "${M[@]}" --ckpt-dir "$T/bad" "$@" >"$T/out.$way" 2>"$T/err.$way"
    else
      env TRAIN_GPT_NO_PREFETCH=1 "$var" "$TG" "${M[@]}" --ckpt-dir "$T/bad" "$@" \
        >"$T/out.$way" 2>"$T/err.$way"
    fi
    rc=$?
    [ $rc -eq "$code" ] || { cat "$T/err.$way"; fail "$way: exit $rc, not $code"; }
    grep -q -- "$pat" "$T/err.$way" || { cat "$T/err.$way"; fail "$way: no '$pat'"; }
  done
  cmp -s "$T/err.pre" "$T/err.inplace" ||
    { diff "$T/err.pre" "$T/err.inplace"; fail "the two reads report differently"; }
}
cp -r "$T/ck" "$T/bad"
both 1 "checkpoint step 7 in $T/bad" LAUNCH_RESUME_STEP=7
/usr/bin/python3 - "$T/bad/step-3/rank-0.bin" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(200)
    b = f.read(1)
    f.seek(200)
    f.write(bytes([b[0] ^ 1]))
PY
both 1 "step-3/rank-0.bin: SHA-256" LAUNCH_RESUME_STEP=3
rm -rf "$T/bad" && cp -r "$T/ck" "$T/bad"
both 2 "its shard is not of this model" LAUNCH_RESUME_STEP=3 --channels 32
echo "  a missing step, a corrupt shard, another model: the same lines and exit code both ways"
echo "test_train_gpt_resume: ok"
