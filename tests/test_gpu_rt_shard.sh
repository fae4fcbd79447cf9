#!/bin/bash
# On a GPU machine: ZeRO-1's collectives through NCCL
# (rt_reduce_scatter, rt_allgather with equal and uneven parts, the
# gradient buckets of rt_grads_shard), one rank per GPU under launch
# (tests/gpu/rt_shard_check.cu); with one GPU, two ranks share it, one
# NCCL host each (tests/gpu_share_lib.sh). Skips (exit 77) without a GPU,
# without NCCL, or in a build without CUDA.
set -u
LAUNCH=${LAUNCH_BIN:-build/bin/launch}
BIN=$(dirname "$LAUNCH")
CHECK=$BIN/../tests/rt_shard_check
. "$(dirname "$0")/gpu_share_lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
[ -x "$CHECK" ] || { echo "SKIP: built without CUDA (no $CHECK)"; exit 77; }
gpu_nccl_ranks "$T" || { echo "SKIP: no GPU"; exit 77; }
"$LAUNCH" --standalone --nproc-per-node "$N" "${WRAP[@]}" "$CHECK" >"$T/out" 2>&1
rc=$?
if grep -q "need NCCL" "$T/out"; then cat "$T/out"; echo "SKIP: no NCCL"; exit 77; fi
[ $rc -eq 0 ] || { cat "$T/out"; echo "FAIL: exit $rc"; exit 1; }
for r in $(seq 0 $((N - 1))); do
  grep -q "rt_shard_check: rank $r ok ($N ranks)" "$T/out" || { cat "$T/out"; echo "FAIL: rank $r"; exit 1; }
done
cat "$T/out"
echo "test_gpu_rt_shard: ok"
