#!/bin/bash
# Every GPU-machine figure of the open issues in one or two device calls:
# the GPU tests, the training benchmark against PyTorch, resume after a
# failure against torchrun, the launcher against torchrun, the store
# against PyTorch's TCPStore, simulated and real agents, checkpoint
# bandwidth against dd. Each part is skipped when fewer seconds than its
# limit are left of BUDGET_S; PARTS picks parts (default: all).
#   bench/gpu_all.sh BUILD_DIR [OUT]      (BUILD_DIR/bin holds the binaries)
# environment: PARTS (tests gpt scaling resume launch topo store load agents
# ckpt adv torchlaunch metrics), BUDGET_S (560), LAUNCH_BENCH_ONLY (run_launch_bench --only).
# A part whose binary is not in BUILD_DIR/bin fails with rc=127 and the
# others go on.
set -u
B=${1:?usage: gpu_all.sh BUILD_DIR [OUT]}
B=$(cd "$B" && pwd) || { echo "gpu_all.sh: no build directory $1" >&2; exit 2; }
OUT=${2:-${OUT:-/tmp/out}}
BUDGET=${BUDGET_S:-560}
PARTS=${PARTS:-"tests gpt scaling resume launch topo store load agents ckpt adv torchlaunch metrics"}
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
. bench/gpu_lib.sh
PY=""
for p in python3 /usr/bin/python3 /usr/local/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null; then PY=$(command -v "$p"); break; fi
done
export PYTHON_EXEC=$PY PYTHON=$PY
# A test binary: the build puts it in tests/ (bin/ in older carried builds).
tbin() { if [ -x "$B/tests/$1" ]; then echo "$B/tests/$1"; else echo "$B/bin/$1"; fi; }
want() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
step() { # PART LABEL SECONDS COMMAND...
  local part=$1 label=$2 t=$3
  shift 3
  want "$part" || return 0
  if [ "$(left)" -lt "$t" ]; then echo "== $label: skipped ($(left) s left)"; return; fi
  echo "== $label [$SECONDS s]"
  timeout "$t" "$@" 2>&1
  echo "rc=$? [$SECONDS s]"
}
{
  date -u; nvidia-smi -L; nproc; free -g | head -2
  echo "python: $PY $($PY -c 'import torch;print(torch.__version__, torch.cuda.nccl.version())' 2>&1)"
  step tests "test_gpt_cuda_kernels" 40 "$(tbin test_gpt_cuda_kernels)"
  step tests "test_gpt_cuda_graph" 40 "$(tbin test_gpt_cuda_graph)"
  step tests "test_gpt_cuda_model" 60 "$(tbin test_gpt_cuda_model)"
  step tests "launch topo --json: no cache, cold, warm (the same bytes)" 30 sh -c '
    d=$(mktemp -d) && for m in 0 1 2; do XDG_RUNTIME_DIR=$d LAUNCH_TOPO_CACHE=$((m > 0)) "$0/bin/launch" \
      topo --json --nproc-per-node 8 >"$d/$m.json" || exit 1; done &&
    md5sum "$d"/*.json && [ "$(md5sum "$d"/*.json | cut -d" " -f1 | sort -u | wc -l)" = 1 ] &&
    echo "topology identical with and without the cache"; rc=$?; rm -r "$d"; exit $rc' "$B"
  step tests "cuBLASLt tuning cache: first and second start" 60 sh -c '
    d=$(mktemp -d) && rc=0 && for i in 1 2; do GPT_CUDA_TUNE_CACHE=$d/tune.txt "$0/bin/gpt_bench" \
      --steps 3 --warmup 1 --profile 0 >"$d/out" 2>&1 || { rc=$?; tail -5 "$d/out"; }
      grep -E "backend after|RESULT" "$d/out"; done; rm -r "$d"; exit $rc' "$B"
  step tests "test_aff_gpu_probe" 30 "$(tbin test_aff_gpu_probe)"
  step tests "test_aff_libs" 30 "$(tbin test_aff_libs)"
  step tests "launch topo --gpu-probe check" 30 "$B/bin/launch" topo --gpu-probe check
  step tests "launch doctor" 30 "$B/bin/launch" doctor
  step tests "launch env ASYNC name" 20 sh -c "'$B/bin/launch' env --all --no-python '$PY' x.py | grep ASYNC"
  step gpt "train_gpt gpt2-124m under launch" 90 "$B/bin/launch" --standalone --nproc-per-node 1 \
    "$B/bin/train_gpt" --device cuda --preset gpt2-124m --vocab 50257 --batch 16 --seq-len 1024 \
    --steps 60 --log-every 20 --val-every 0
  step gpt "run_gpt_bench (launch-cuda, torch eager, torch.compile)" 240 \
    bash bench/run_gpt_bench.sh "$B/bin/gpt_bench" "$OUT/gpt"
  step scaling "train_gpt 1 and N GPUs, --zero 0 and 1 (says so and stops with one GPU)" 240 \
    bash bench/run_scaling.sh "$B/bin"
  step resume "resume bench gpt2-124m 1 GPU" 200 "$PY" -u bench/run_resume_bench.py --build "$B" \
    --preset gpt2-124m --device cuda --nproc 1 --repeat 3 --timeout 60 --trace
  step launch "run_launch_bench vs torchrun" 280 "$PY" -u bench/run_launch_bench.py --build "$B" \
    --runs 10 --torch-runs 3 ${LAUNCH_BENCH_ONLY:+--only "$LAUNCH_BENCH_ONLY"} --json "$OUT/launch.json"
  step topo "run_topo_cache_bench (no cache, cache, --cpu-bind none)" 90 "$PY" -u \
    bench/run_topo_cache_bench.py --build "$B" --runs 30 --bind numa
  step store "run_store_bench vs TCPStore" 200 env BENCH_BUILD_DIR="$B" BENCH_SECONDS=3 \
    bash bench/run_store_bench.sh
  step load "run_rdzv_load 1024/16384" 120 bash bench/run_rdzv_load.sh --build "$B" --runs 3 --steady 10
  step agents "run_agents 256 1024" 120 bash bench/run_agents.sh --build "$B" --agents "256 1024" --runs 1
  step ckpt "run_ckpt_bench vs dd" 100 env BENCH_BUILD_DIR="$B" BENCH_RUNS=3 BENCH_SETTLE=1 \
    bash bench/run_ckpt_bench.sh
  step adv "run_adv_latency (every memory attack at once)" 150 env LAUNCH_BIN="$B/bin/launch" \
    ADV_TEST_BIN="$(tbin test_adv_memory)" BENCH_RUNS=${ADV_RUNS:-8} bash bench/run_adv_latency.sh "$B"
  step torchlaunch "test_torch_launch with torch 2.11" 200 env LAUNCH_BIN="$B/bin/launch" \
    LAUNCH_BUILD_DIR="$B" LAUNCH_SOURCE_DIR="$PWD" "$PY" tests/test_torch_launch.py
  step metrics "metrics collection cost with and without NVML, NVML's memory (#23)" 60 \
    bash bench/run_metrics_collect.sh "$B" 2000
  step metrics "agent CPU and memory with --metrics-port, smaps by mapping (#23)" 90 \
    python3 -u bench/run_metrics_bench.py --build "$B" --seconds 20
  step metrics "test_metrics_text with the GPU's NVML" 30 env LAUNCH_TEST_EXPECT_GPU=1 \
    "$B/tests/test_metrics_text"
} 2>&1 | tee "$OUT/gpu_all.txt"
