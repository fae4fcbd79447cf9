#!/bin/bash
# Ranks started with different settings (docs/runtime.md, "Start-up"):
# every rank compares its model, batch and optimiser settings with rank
# 0's before the first step and the job exits 2, the rank that differs
# naming the setting and both values (rank 1 with another --layers
# trained on, to negative losses; with --zero 1 the gradient norm was
# 5e32, or the collective hung until its timeout).
set -u
. "$(dirname "$0")/train_gpt_lib.sh"
M=(--preset tiny --steps 2 --batch 2 --val-every 0 --val-batches 1 --threads 1)

# rank 1 runs with the flags in $EXTRA added
tg=$(realpath "$TG")
cat >"$T/wrap.sh" <<EOF
#!/bin/bash
if [ "\$RANK" = 1 ]; then exec "$tg" "\$@" \$EXTRA; fi
exec "$tg" "\$@"
EOF
chmod +x "$T/wrap.sh"

# differ EXTRA PATTERN: 2 ranks, rank 1 with EXTRA: exit 2 and PATTERN
differ() {
  local rc
  EXTRA=$1 "$LAUNCH" --standalone --nproc-per-node 2 -q "$T/wrap.sh" "${M[@]}" \
    >"$T/out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || { cat "$T/out"; fail "rank 1 with $1: exit $rc, not 2"; }
  grep -q -- "$2" "$T/out" || { cat "$T/out"; fail "rank 1 with $1: no '$2'"; }
  grep -q "1 of 2 ranks run with other settings than rank 0" "$T/out" ||
    { cat "$T/out"; fail "rank 1 with $1: rank 0 does not say so"; }
  grep -q "^step" "$T/out" && { cat "$T/out"; fail "rank 1 with $1: trained"; }
  return 0
}
differ "--layers 3" "rank 1 runs with --layers 3, rank 0 with --layers 2"
differ "--zero 1" "rank 1 runs with --zero 1, rank 0 with --zero 0"
differ "--lr 0.01" "rank 1 runs with --lr 0.00999999978, rank 0 with --lr 0.00300000003"
differ "--dtype fp32" "rank 1 runs with --dtype fp32, rank 0 with --dtype auto"
echo "  rank 1 with another --layers, --zero, --lr, --dtype: exit 2, the setting named"

# another copy of the data: the same size and split, one token changed
# (a node with a stale copy of the data set trained on other samples)
yes "the quick brown fox" | head -c 200000 >"$T/a.txt"
cp "$T/a.txt" "$T/b.txt"
printf 'Z' | dd of="$T/b.txt" bs=1 seek=150000 conv=notrunc status=none
cmp -s "$T/a.txt" "$T/b.txt" && fail "b.txt is a.txt"
M+=(--data "$T/a.txt")
differ "--data $T/b.txt" "rank 1 runs with data hash (of --data's tokens) [0-9a-f]\{16\}, rank 0 with"
echo "  rank 1 with another copy of --data, of the same size: exit 2, the data named"

# the same flags train
EXTRA="" "$LAUNCH" --standalone --nproc-per-node 2 -q "$T/wrap.sh" "${M[@]}" \
  >"$T/out" 2>&1 || { cat "$T/out"; fail "the same flags"; }
grep -q "train_gpt: final: step 2" "$T/out" || { cat "$T/out"; fail "no final line"; }
echo "test_train_gpt_agree: ok"
