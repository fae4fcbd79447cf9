#!/bin/bash
# On a GPU machine: allreduce_check through NCCL, bootstrapped by launch's
# store, on every local GPU (at least 2), with CPU binding applied. Skips
# (exit 77) where there is no GPU or no NCCL.
set -u
LAUNCH=${LAUNCH_BIN:-build/bin/launch}
BIN=$(dirname "$LAUNCH")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then echo "SKIP: no GPU"; exit 77; fi
N=$(ls -d /dev/nvidia[0-9]* | wc -l)
[ -n "${CUDA_VISIBLE_DEVICES:-}" ] && N=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
[ "$N" -ge 2 ] || N=2
"$LAUNCH" --standalone --nproc-per-node "$N" "$BIN/allreduce_check" >"$T/out" 2>&1
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
