#!/bin/bash
# train_gpt under launch on the CPU:
#  - `tiny` on the default corpus learns: the validation loss falls below
#    3.0 (from ln 256 = 5.55) within 150 steps;
#  - data parallelism is exact: 4 ranks x micro-batch 2 and 1 rank x 4
#    micro-steps (with 1 or 2 threads) end with bitwise the same parameters
#    (and a different seed does not).
# One node of 4 ranks against two of 2: tests/test_train_gpt_nodes.sh.
set -u
. "$(dirname "$0")/train_gpt_lib.sh"

# -- tiny learns ------------------------------------------------------------
OMP_NUM_THREADS=2 "$TG" --preset tiny --steps 150 --log-every 50 >"$T/tiny.log" 2>&1 \
  || { cat "$T/tiny.log"; fail "tiny"; }
cat "$T/tiny.log"
grep -Eq '^step +1/150 \| loss 5\.[0-9]+ \| norm [0-9.]+ \| lr [0-9.e+-]+ \| [0-9.]+ ms \| [0-9]+ tok/s$' \
  "$T/tiny.log" || fail "the step line's format"
val=$(sed -n 's/^train_gpt: final: step 150 loss [0-9.]* val \([0-9.]*\).*/\1/p' "$T/tiny.log")
[ -n "$val" ] || fail "no final line"
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$val') < 3.0 else 1)" \
  || fail "validation loss $val after 150 steps, not below 3.0"

# -- data parallelism is exact --------------------------------------------------
SMALL=(--preset tiny --steps 3 --batch 2 --val-every 0)
"$LAUNCH" --standalone --nproc-per-node 4 -q "$TG" "${SMALL[@]}" --dump-params "$T/w4" \
  >"$T/w4.log" 2>&1 || { cat "$T/w4.log"; fail "4 ranks"; }
"$TG" "${SMALL[@]}" --accum 4 --threads 1 --dump-params "$T/w1" >"$T/w1.log" 2>&1 \
  || { cat "$T/w1.log"; fail "1 rank"; }
"$TG" "${SMALL[@]}" --accum 4 --threads 2 --dump-params "$T/w1t" >"$T/w1t.log" 2>&1 \
  || { cat "$T/w1t.log"; fail "1 rank, 2 threads"; }
"$TG" "${SMALL[@]}" --accum 4 --seed 7 --dump-params "$T/seed7" >/dev/null 2>&1 \
  || fail "seed 7"
grep -q "global batch: 4 ranks x micro-batch 2 x accum 1 = 8 sequences x 64 tokens = 512 tokens" \
  "$T/w4.log" || { cat "$T/w4.log"; fail "global batch line"; }
[ -s "$T/w1" ] || fail "no parameter dump"
cmp "$T/w4" "$T/w1" || fail "4 ranks and 1 rank x 4 micro-steps differ"
cmp "$T/w1t" "$T/w1" || fail "1 and 2 threads differ"
cmp -s "$T/seed7" "$T/w1" && fail "another seed gives the same parameters"
echo "data parallelism: 4 ranks and 1 rank x 4 micro-steps (1 and 2 threads) bitwise equal"

echo "test_train_gpt: ok"
