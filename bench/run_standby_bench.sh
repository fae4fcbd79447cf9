#!/bin/bash
# run_standby_bench.sh BUILD OUT - launch --standby on the GPU machine
# (issue #26, docs/BENCHMARKS.md "resume"):
#   resume: bench/run_resume_bench.py, gpt2-124m, 1 GPU, launch only, 3 runs
#           each without and with --standby (--trace: every line of the
#           restart timed from the kill);
#   tokens/s: train_gpt gpt2-124m under launch, 300 steps, without and with
#           --standby (whose start-up runs beside the training 2 s in),
#           alternating, twice each;
#   steady: the same, 1,500 steps with a line each, alternating, twice
#           each: the median step time of steps 300..1500 (the standby
#           started and waiting) and train_gpt's own mean of steps 2..1500
#           (bench/standby_steady.py reads the lines); LAUNCH_DEBUG=spawn
#           shows when the standby started.
#   run_standby_bench.sh [BUILD [OUT [all|resume|tokens|steady]]]
# CKPT=1: tokens and steady under launch --ckpt-dir (nothing saved: no
# --ckpt-every; the standby then also makes and page-locks the buffer a
# resume reads into, 1.4 GiB at 124M, while the job trains).
# Source bench/gpu_lib.sh first (NVLink multicast off).
set -u
B=${1:-.gpu-build}
OUT=${2:-/tmp}
WHAT=${3:-all}
# train_gpt 124M under launch, twice without and with --standby,
# alternating: STEPS steps, a line every LOG_EVERY; SUMMARY FILE prints what
# FILE's line of the run says; the lines go to $OUT/FILE.
tokens() { # FILE STEPS LOG_EVERY TIMEOUT SUMMARY...
  local file=$1 steps=$2 every=$3 t=$4 i s T
  shift 4
  for i in 1 2; do
    for s in "" --standby; do
      T=$(mktemp -d)
      LAUNCH_DEBUG=spawn timeout "$t" "$B/bin/launch" --standalone --nproc-per-node 1 $s \
        ${CKPT:+--ckpt-dir "$T/ck"} "$B/bin/train_gpt" --preset gpt2-124m --device cuda --steps "$steps" \
        --val-every 0 --log-every "$every" >"$T/o" 2>&1
      echo "run $i standby=${s:-no} rc=$?: $("$@" "$T/o")" >>"$OUT/$file"
      grep -E "standby pid|rror" "$T/o" | head -3 >>"$OUT/$file"
      rm -rf "$T"
    done
  done
}
final_line() { grep 'final:' "$1"; }
if [ "$WHAT" = steady ]; then
  tokens steady.txt 1500 1 60 python3 bench/standby_steady.py
  exit 0
fi
[ "$WHAT" = tokens ] || for s in "" --standby; do
  timeout 110 python3 -u bench/run_resume_bench.py --preset gpt2-124m \
    --device cuda --nproc 1 --only launch --repeat 3 --build "$B" --trace $s \
    >"$OUT/resume${s:+_standby}.txt" 2>&1
  echo "rc=$?" >>"$OUT/resume${s:+_standby}.txt"
done
[ "$WHAT" = resume ] || tokens tokens.txt 300 100 40 final_line
