#!/bin/bash
# run_standby_bench.sh BUILD OUT - launch --standby on the GPU machine
# (issue #26, docs/BENCHMARKS.md "resume"):
#   resume: bench/run_resume_bench.py, gpt2-124m, 1 GPU, launch only, 3 runs
#           each without and with --standby (--trace: every line of the
#           restart timed from the kill);
#   tokens/s: train_gpt gpt2-124m under launch, 300 steps, without and with
#           --standby (whose start-up runs beside the training 2 s in),
#           alternating, twice each.
# Source bench/gpu_lib.sh first (NVLink multicast off).
set -u
B=${1:-.gpu-build}
OUT=${2:-/tmp}
for s in "" --standby; do
  timeout 110 python3 -u bench/run_resume_bench.py --preset gpt2-124m \
    --device cuda --nproc 1 --only launch --repeat 3 --build "$B" --trace $s \
    >"$OUT/resume${s:+_standby}.txt" 2>&1
  echo "rc=$?" >>"$OUT/resume${s:+_standby}.txt"
done
for i in 1 2; do
  for s in "" --standby; do
    T=$(mktemp -d)
    timeout 40 "$B/bin/launch" --standalone --nproc-per-node 1 $s \
      "$B/bin/train_gpt" --preset gpt2-124m --device cuda --steps 300 \
      --val-every 0 --log-every 100 >"$T/o" 2>&1
    echo "run $i standby=${s:-no} rc=$?: $(grep 'final:' "$T/o")" >>"$OUT/tokens.txt"
    grep -E "standby|rror" "$T/o" | head -3 >>"$OUT/tokens.txt"
    rm -rf "$T"
  done
done
