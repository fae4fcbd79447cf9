#!/bin/bash
# What runs on the GPU machine for issue #7's GPU half, from a folder DIR
# holding gpt_bench, test_gpt_cuda_kernels, test_gpt_cuda_model and
# torch_gpt2.py (built elsewhere and carried): machine facts, the GPU tests
# (with the attention kernels timed), the benchmark with this build's
# defaults and with fewer classifier chunks, the kernels the product was
# measured against (lab/cuda/'s programs, where DIR holds them: a build
# with -DLAUNCH_LAB=ON; lab/cuda/README.md), then PyTorch eager and
# torch.compile on the same model while the time budget allows. Results in
# OUT (at most 8 files; summary.txt last). NVLink multicast stays off.
# usage: bench/gpt_gpu_session.sh DIR [OUT]
# environment: BUDGET_S (seconds for the whole script, default 900),
#              STEPS (20), WARMUP (5)
set -u
DIR=${1:?usage: gpt_gpu_session.sh DIR [OUT]}
OUT=${2:-${OUT:-/tmp/out}}
BUDGET=${BUDGET_S:-900} STEPS=${STEPS:-20} WARMUP=${WARMUP:-5}
T0=$SECONDS
left() { echo $((BUDGET - (SECONDS - T0))); }
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# cuBLASLt from PyTorch's wheels (the machine has no system copy on the path)
NVLIBS=$(python3 -c 'import nvidia,os;print(":".join(os.path.join(p,d,"lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null)
export LD_LIBRARY_PATH=${NVLIBS}:${LD_LIBRARY_PATH:-}
{
  date -u; uname -r; nproc
  nvidia-smi; nvidia-smi -q -d CLOCK | head -40
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  ldd "$DIR/gpt_bench"
} >"$OUT/machine.txt" 2>&1
GPT_TEST_TIME=1 timeout 150 "$DIR/test_gpt_cuda_kernels" >"$OUT/test_gpt_cuda_kernels.txt" 2>&1
echo "rc=$?" >>"$OUT/test_gpt_cuda_kernels.txt"
timeout 120 "$DIR/test_gpt_cuda_model" >"$OUT/test_gpt_cuda_model.txt" 2>&1
echo "rc=$?" >>"$OUT/test_gpt_cuda_model.txt"

# one gpt_bench run: LABEL PROFILE_STEPS [VAR=VALUE...]
bench() {
  local label=$1 prof=$2
  shift 2
  echo "== $label ($*)"
  env "$@" timeout 60 "$DIR/gpt_bench" --steps "$STEPS" --warmup "$WARMUP" --profile "$prof" 2>&1
  echo "rc=$?"
}
{
  bench "default" 5
  bench "7 classifier chunks (256 MiB)" 0 GPT_CUDA_LOGITS_MIB=256
  for p in attention_sm90 attention_mma layernorm_backward; do
    [ -x "$DIR/$p" ] || continue
    echo "== lab/cuda/$p"
    timeout 60 "$DIR/$p" 2>&1
    echo "rc=$?"
  done
} >"$OUT/bench.txt" 2>&1

# PyTorch, the same model and shapes, while the budget allows
for mode in eager compile; do
  l=$(left)
  need=$([ $mode = eager ] && echo 60 || echo 100)
  if [ "$l" -lt "$need" ]; then
    echo "skipped: $l s of the budget left" >"$OUT/torch_$mode.log"
    continue
  fi
  flag=$([ $mode = compile ] && echo --compile)
  # shellcheck disable=SC2086
  timeout $((l - 10)) python3 "$DIR/torch_gpt2.py" $flag --steps "$STEPS" --warmup "$WARMUP" \
    >"$OUT/torch_$mode.log" 2>&1
  echo "rc=$?" >>"$OUT/torch_$mode.log"
done

{
  for t in test_gpt_cuda_kernels test_gpt_cuda_model; do
    echo "== $t: $(tail -2 "$OUT/$t.txt" | tr '\n' ' ')"
    grep "FAIL" "$OUT/$t.txt" | head -20
  done
  grep "^attention variant\|^attention fwd\|^attention .*: fwd" "$OUT/test_gpt_cuda_kernels.txt" |
    grep -v "rel err" | head -20
  grep "^== \|^RESULT\|^rc=" "$OUT/bench.txt"
  grep -A16 "^| kernel class" "$OUT/bench.txt"
  grep "^per kernel class" "$OUT/bench.txt"
  grep -h "^RESULT\|^skipped\|^rc=" "$OUT/torch_eager.log" "$OUT/torch_compile.log"
  echo "session: $((SECONDS - T0)) s"
} >"$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
