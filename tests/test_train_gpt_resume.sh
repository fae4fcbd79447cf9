#!/bin/bash
# train_gpt's resume (docs/runtime.md, "Start-up"): the shard read on a
# thread beside the start-up gives bit for bit the parameters of an
# uninterrupted run, and of the read in place (TRAIN_GPT_NO_PREFETCH=1);
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
echo "  resumed from step 3 (read beside the start-up, and in place): bitwise the uninterrupted run"

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
