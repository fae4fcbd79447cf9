#!/bin/bash
# The training benchmark of issue #7 on one GPU, side by side in one run:
# the CUDA backend of train_gpt (bench/gpt_bench, through gpt.h) against
# PyTorch eager and torch.compile (bench/torch_gpt2.py), same model, shapes
# and step count; then a table with ratios. Logs go to OUTDIR.
# usage: bench/run_gpt_bench.sh PATH/TO/gpt_bench [OUTDIR]
# environment: STEPS (20), WARMUP (5), PROFILE (5), PYTHON (python3)
set -u
BIN=${1:?usage: run_gpt_bench.sh PATH/TO/gpt_bench [OUTDIR]}
OUTDIR=${2:-.}
STEPS=${STEPS:-20} WARMUP=${WARMUP:-5} PROFILE=${PROFILE:-5} PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
echo "== launch-cuda: $BIN"
"$BIN" --steps "$STEPS" --warmup "$WARMUP" --profile "$PROFILE" 2>&1 | tee "$OUTDIR/bench_launch_cuda.log"
echo "== torch eager"
"$PY" "$HERE/torch_gpt2.py" --steps "$STEPS" --warmup "$WARMUP" 2>&1 | tee "$OUTDIR/bench_torch_eager.log"
echo "== torch.compile"
"$PY" "$HERE/torch_gpt2.py" --compile --steps "$STEPS" --warmup "$WARMUP" 2>&1 | tee "$OUTDIR/bench_torch_compile.log"
"$PY" - "$OUTDIR" <<'PY'
import re, sys, os
d = sys.argv[1]
rows = []
for f in ("bench_launch_cuda.log", "bench_torch_eager.log", "bench_torch_compile.log"):
    try:
        for line in open(os.path.join(d, f)):
            if line.startswith("RESULT "):
                rows.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
    except OSError:
        pass
if not rows:
    sys.exit("no RESULT lines: see the logs above")
base = next((r for r in rows if r["impl"] == "launch-cuda"), None)
print("\n| implementation | tokens/s | ms/step | MFU | peak memory (GiB) | launch-cuda speed-up |")
print("|---|---:|---:|---:|---:|---:|")
for r in rows:
    up = float(base["tok_s"]) / float(r["tok_s"]) if base else float("nan")
    print(f"| {r['impl']} | {float(r['tok_s']):,.0f} | {float(r['ms']):.2f} | "
          f"{100 * float(r['mfu']):.1f}% | {float(r['mem_gib']):.2f} | {up:.2f}x |")
PY
