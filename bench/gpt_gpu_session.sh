#!/bin/bash
# What runs on the GPU machine for issue #7's GPU half, from a folder DIR
# holding gpt_bench, test_gpt_cuda_kernels, test_gpt_cuda_model,
# run_gpt_bench.sh and torch_gpt2.py (built elsewhere and carried):
# machine facts, the GPU tests, then the benchmark side by side with
# PyTorch. Results in OUT (at most 8 files). NVLink multicast stays off.
# usage: bench/gpt_gpu_session.sh DIR [OUT]
set -u
DIR=${1:?usage: gpt_gpu_session.sh DIR [OUT]}
OUT=${2:-${OUT:-/tmp/out}}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# cuBLASLt from PyTorch's wheels (the machine has no system copy on the path)
NVLIBS=$(python3 -c 'import nvidia,os;print(":".join(os.path.join(p,d,"lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null)
export LD_LIBRARY_PATH=${NVLIBS}:${LD_LIBRARY_PATH:-}
{
  date -u; uname -r; nproc
  nvidia-smi; nvidia-smi -q -d CLOCK | head -40
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -2
  ldd "$DIR/gpt_bench"
} >"$OUT/machine.txt" 2>&1
for t in test_gpt_cuda_kernels test_gpt_cuda_model; do
  timeout 300 "$DIR/$t" >"$OUT/$t.txt" 2>&1
  echo "rc=$?" >>"$OUT/$t.txt"
  echo "== $t: $(tail -2 "$OUT/$t.txt" | tr '\n' ' ')"
  grep FAIL "$OUT/$t.txt" | head -20
done
{
  bash "$DIR/run_gpt_bench.sh" "$DIR/gpt_bench" "$OUT"
  echo "== fp16 (loss scale 1), 10 steps"
  "$DIR/gpt_bench" --dtype fp16 --steps 10 --profile 0
  echo "== bf16, backward on one stream (GPT_CUDA_STREAMS=1), 20 steps"
  GPT_CUDA_STREAMS=1 "$DIR/gpt_bench" --profile 0
  echo "== bf16 without cuBLASLt's fused epilogues, 20 steps"
  GPT_CUDA_NO_EPILOGUES=1 "$DIR/gpt_bench" --profile 0
  echo "== bf16 with cuBLASLt candidates timed (GPT_CUDA_TUNE=1), 20 steps"
  GPT_CUDA_TUNE=1 "$DIR/gpt_bench" --profile 0
} >"$OUT/bench.txt" 2>&1
grep -A20 "^| implementation" "$OUT/bench.txt"
grep -A16 "^| kernel class" "$OUT/bench.txt"
grep "^tokens/s\|^ms/step\|^backend after\|^==" "$OUT/bench.txt"
