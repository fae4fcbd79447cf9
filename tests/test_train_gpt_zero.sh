#!/bin/bash
# train_gpt --zero 1 (ZeRO-1, docs/runtime.md) under launch on the CPU:
#  - with 1, 2 and 4 ranks it ends with bitwise the parameters and prints
#    the same loss lines as --zero 0;
#  - the AdamW state per rank falls with the rank count;
#  - a checkpoint of a --zero 1 run holds the whole state (gathered on
#    save, the header records --zero 1): bitwise the file of --zero 0 but
#    for that field; it resumes on 4 ranks with --zero 1 (re-sharded) as a
#    --zero 0 checkpoint resumes on 4 ranks with --zero 0 (or 1), and on 2
#    ranks with --zero 0 as the uninterrupted --zero 0 run.
set -u
# shellcheck disable=SC2034 # read by run (train_gpt_zero_lib.sh)
M=(--preset tiny --batch 2 --val-every 3 --val-batches 4 --threads 1)
. "$(dirname "$0")/train_gpt_zero_lib.sh"

# The loss lines without their timings.
losses() { grep -E '(step|val) +[0-9]+/|final:' "$1" | sed 's/ | [0-9.]* ms.*//'; }

# -- bitwise the same as --zero 0 -----------------------------------------------
for n in 1 2 4; do
  run z0-w$n $n --steps 4 --zero 0
  run z1-w$n $n --steps 4 --zero 1
  cmp -s "$T/z0-w$n.bin" "$T/z1-w$n.bin" || fail "$n ranks: --zero 1 parameters differ"
  [ "$(losses "$T/z0-w$n.log")" = "$(losses "$T/z1-w$n.log")" ] ||
    { diff <(losses "$T/z0-w$n.log") <(losses "$T/z1-w$n.log"); fail "$n ranks: loss lines differ"; }
  [ "$(losses "$T/z1-w$n.log" | wc -l)" -ge 6 ] || fail "$n ranks: too few loss lines"
done
# the gradient's buckets merged (reduce-scattered as backward goes)
run z1-w4-b 4 --steps 4 --zero 1 --bucket-mb 0.2
cmp -s "$T/z0-w4.bin" "$T/z1-w4-b.bin" || fail "4 ranks, --bucket-mb 0.2: --zero 1 parameters differ"
# gradient accumulation: the reduce-scatter after the last micro-step only
run z0-w2-a2 2 --steps 3 --zero 0 --accum 2
run z1-w2-a2 2 --steps 3 --zero 1 --accum 2
cmp -s "$T/z0-w2-a2.bin" "$T/z1-w2-a2.bin" || fail "2 ranks, --accum 2: --zero 1 parameters differ"
echo "  --zero 1 on 1, 2 and 4 ranks (4 with buckets of 0.2 MiB, 2 with --accum 2): bitwise the parameters and losses of --zero 0"

# -- the state per rank falls with the ranks ------------------------------------
s0=$(mib "$T/z0-w4.log") s1=$(mib "$T/z1-w1.log") s2=$(mib "$T/z1-w2.log") s4=$(mib "$T/z1-w4.log")
echo "  AdamW state per rank: --zero 0: $s0 MiB; --zero 1: $s1 (1 rank), $s2 (2), $s4 (4)"
/usr/bin/python3 -c "import sys; a=[float(x) for x in sys.argv[1:]]; sys.exit(0 if a[0]==a[1] and a[1]>a[2]>a[3] and a[3]<a[1]/3 else 1)" \
  "$s0" "$s1" "$s2" "$s4" || fail "the AdamW state does not fall with the ranks"

# -- checkpoints ------------------------------------------------------------------------
# The saving runs stop at step 3 (their last, saved), the newest step the
# resumed runs find. tiny warms up for 20 steps: until then the learning
# rate does not depend on --steps, so step 3 is that of a 6-step run.
run whole-z0 2 --steps 6 --zero 0
run save-z1 2 --steps 3 --zero 1 --ckpt-dir "$T/ck1" --ckpt-every 3
run save-z0 2 --steps 3 --zero 0 --ckpt-dir "$T/ck0" --ckpt-every 3
for f in "$T"/ck1/step-3/rank-{0,1}.bin; do [ -f "$f" ] || fail "no $f"; done
[ "$(zero_of "$T/ck1/step-3/rank-0.bin")" = 1 ] || fail "the --zero 1 checkpoint does not record it"
[ "$(zero_of "$T/ck0/step-3/rank-0.bin")" = 0 ] || fail "the --zero 0 checkpoint records --zero 1"
for r in 0 1; do
  cmp -s -i 56 "$T/ck1/step-3/rank-$r.bin" "$T/ck0/step-3/rank-$r.bin" ||
    fail "rank $r: the --zero 1 checkpoint's state differs from --zero 0's"
done
echo "  a --zero 1 checkpoint holds the gathered state (bitwise --zero 0's) and records --zero 1"

# 2 ranks, --zero 1 -> 4 ranks, --zero 1: as 2 ranks, --zero 0 -> 4, --zero 0
cp -r "$T/ck1" "$T/ck1a" && cp -r "$T/ck1" "$T/ck1b" && cp -r "$T/ck0" "$T/ck0a"
run res-z1-w4 4 --steps 6 --zero 1 --ckpt-dir "$T/ck1a"
run res-z0-w4 4 --steps 6 --zero 0 --ckpt-dir "$T/ck0"
grep -q "resumed from step 3 of $T/ck1a" "$T/res-z1-w4.log" || { cat "$T/res-z1-w4.log"; fail "no resume on 4 ranks"; }
grep -q "saved by 2 ranks with --zero 1; the AdamW state is re-sharded for 4 ranks with --zero 1" \
  "$T/res-z1-w4.log" || { cat "$T/res-z1-w4.log"; fail "no re-shard line"; }
cmp -s "$T/res-z1-w4.bin" "$T/res-z0-w4.bin" || fail "resumed on 4 ranks: --zero 1 and --zero 0 differ"
[ "$(losses "$T/res-z1-w4.log")" = "$(losses "$T/res-z0-w4.log")" ] || fail "resumed on 4 ranks: loss lines differ"
# and a --zero 0 checkpoint resumed with --zero 1
run res-z0to1-w4 4 --steps 6 --zero 1 --ckpt-dir "$T/ck0a"
cmp -s "$T/res-z0to1-w4.bin" "$T/res-z0-w4.bin" || fail "--zero 0 checkpoint resumed with --zero 1 differs"
echo "  2 ranks --zero 1 resumed on 4 ranks --zero 1, and --zero 0's with --zero 1: bitwise --zero 0's 2 -> 4"

# 2 ranks, --zero 1 -> 2 ranks, --zero 0: the uninterrupted --zero 0 run
run res-z0-w2 2 --steps 6 --zero 0 --ckpt-dir "$T/ck1b"
grep -q "resumed from step 3 of $T/ck1b" "$T/res-z0-w2.log" || { cat "$T/res-z0-w2.log"; fail "no resume with --zero 0"; }
cmp -s "$T/res-z0-w2.bin" "$T/whole-z0.bin" || fail "resumed with --zero 0 != the uninterrupted run"
cmp -s "$T/res-z0-w2.bin" "$T/z0-w2.bin" && fail "the check cannot tell 4 steps from 6"
echo "  2 ranks --zero 1 resumed with --zero 0: bitwise the uninterrupted run"
echo "test_train_gpt_zero: ok"
