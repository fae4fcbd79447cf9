#!/bin/bash
# On a machine with two GPUs or more: ZeRO-1's collectives through NCCL
# (rt_reduce_scatter, rt_allgather with equal and uneven parts, the
# gradient buckets of rt_grads_shard), one rank per GPU under launch
# (tests/gpu/rt_shard_check.cu). Skips (exit 77) with fewer than two GPUs,
# without NCCL, or in a build without CUDA.
set -u
LAUNCH=${LAUNCH_BIN:-build/bin/launch}
BIN=$(dirname "$LAUNCH")
CHECK=$BIN/../tests/rt_shard_check
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
[ -x "$CHECK" ] || { echo "SKIP: built without CUDA (no $CHECK)"; exit 77; }
if ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then echo "SKIP: no GPU"; exit 77; fi
N=$(ls -d /dev/nvidia[0-9]* | wc -l)
[ -n "${CUDA_VISIBLE_DEVICES:-}" ] && N=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
[ "$N" -ge 2 ] || { echo "SKIP: $N GPU (NCCL needs a GPU a rank)"; exit 77; }
"$LAUNCH" --standalone --nproc-per-node "$N" "$CHECK" >"$T/out" 2>&1
rc=$?
if grep -q "need NCCL" "$T/out"; then cat "$T/out"; echo "SKIP: no NCCL"; exit 77; fi
[ $rc -eq 0 ] || { cat "$T/out"; echo "FAIL: exit $rc"; exit 1; }
for r in $(seq 0 $((N - 1))); do
  grep -q "rt_shard_check: rank $r ok ($N ranks)" "$T/out" || { cat "$T/out"; echo "FAIL: rank $r"; exit 1; }
done
cat "$T/out"
echo "test_gpu_rt_shard: ok"
