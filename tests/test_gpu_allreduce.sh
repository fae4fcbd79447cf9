#!/bin/bash
# On a GPU machine: allreduce_check through NCCL, bootstrapped by launch's
# store, on every local GPU, with CPU binding applied. With one GPU, two
# ranks share it, one NCCL host each (tests/gpu_share_lib.sh). Skips
# (exit 77) where there is no GPU or no NCCL.
set -u
LAUNCH=${LAUNCH_BIN:-build/bin/launch}
BIN=$(dirname "$LAUNCH")
. "$(dirname "$0")/gpu_share_lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
gpu_nccl_ranks "$T" || { echo "SKIP: no GPU"; exit 77; }
"$LAUNCH" --standalone --nproc-per-node "$N" "${WRAP[@]}" "$BIN/allreduce_check" >"$T/out" 2>&1
rc=$?
if grep -q "gpu=none" "$T/out"; then cat "$T/out"; echo "SKIP: no usable GPU/NCCL"; exit 77; fi
[ $rc -eq 0 ] || { cat "$T/out"; echo "FAIL: exit $rc"; exit 1; }
want=$(( N * (N + 1) / 2 ))
for r in $(seq 0 $((N - 1))); do
  grep -q "rank=$r, local_rank=$r, world_size=$N, gpu=.*, allreduce=$want" "$T/out" \
    || { cat "$T/out"; echo "FAIL: rank $r"; exit 1; }
done
grep -q "nccl_init_ms=" "$T/out" || { cat "$T/out"; echo "FAIL: no NCCL init time"; exit 1; }
cat "$T/out"
echo "test_gpu_allreduce: ok"
