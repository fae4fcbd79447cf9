#!/bin/bash
# The training benchmark of issues #7 and #26 on one GPU, side by side in
# one run: the CUDA backend of train_gpt (bench/gpt_bench, through gpt.h)
# against PyTorch eager and torch.compile (bench/torch_gpt2.py), same model,
# shapes and step count, for each GPT-2 size asked; then a table a size with
# the ratios and each run's mean SM clock and power (gpu_lib.sh smi_done: the
# H200 trains at its power cap). Logs go to OUTDIR (bench_IMPL_SIZE.log).
# usage: bench/run_gpt_bench.sh PATH/TO/gpt_bench [OUTDIR]
# environment: SIZES ("124m"; any of 124m 350m 774m: B16, B16, B8 as in
#              issue #26's table), EAGER (1; 0 leaves PyTorch eager out),
#              STEPS (20), WARMUP (5), PROFILE (5), PYTHON (python3),
#              SPLIT (1; K runs each size's batch as K micro-batches of B/K a
#              step with the gradient accumulated, --accum K, on every side)
set -u
BIN=${1:?usage: run_gpt_bench.sh PATH/TO/gpt_bench [OUTDIR]}
OUTDIR=${2:-.}
STEPS=${STEPS:-20} WARMUP=${WARMUP:-5} PROFILE=${PROFILE:-5} PY=${PYTHON:-python3}
SIZES=${SIZES:-124m} EAGER=${EAGER:-1} SPLIT=${SPLIT:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUTDIR"
. "$HERE/gpu_lib.sh"
# run IMPL COMMAND...: the command's output (and the clock and power while it
# ran) into bench_IMPL_SIZE.log, for the loop's $size
run() {
  local log=$OUTDIR/bench_$1_$size.log
  shift
  smi_watch "$log.smi"
  "$@" 2>&1 | tee "$log"
  smi_done "$log.smi" | tee -a "$log"
  rm -f "$log.smi"
}
for size in $SIZES; do
  gpt_shape "$size" "$SPLIT" || exit 2
  echo "== $size launch-cuda: $BIN ${shape[*]}"
  run launch_cuda "$BIN" "${shape[@]}" --steps "$STEPS" --warmup "$WARMUP" --profile "$PROFILE"
  if [ "$EAGER" = 1 ]; then
    echo "== $size torch eager"
    run torch_eager "$PY" "$HERE/torch_gpt2.py" "${shape[@]}" --steps "$STEPS" --warmup "$WARMUP"
  fi
  echo "== $size torch.compile"
  run torch_compile "$PY" "$HERE/torch_gpt2.py" "${shape[@]}" --compile --steps "$STEPS" \
    --warmup "$WARMUP"
done
EAGER=$EAGER "$PY" - "$OUTDIR" $SIZES <<'PY'
import os, sys
d, sizes = sys.argv[1], sys.argv[2:]
impls = ("launch_cuda",) + (("torch_eager",) if os.environ["EAGER"] == "1" else ()) + (
    "torch_compile",)
missing = []
for size in sizes:
    rows = []
    for impl in impls:
        log = os.path.join(d, f"bench_{impl}_{size}.log")
        n = len(rows)
        smi = {}
        try:
            for line in open(log):
                if line.startswith("RESULT "):
                    rows.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
                elif line.startswith("SMI "):
                    smi = dict(kv.split("=", 1) for kv in line.split()[1:])
        except OSError:
            pass
        if len(rows) > n:
            rows[-1]["smi"] = smi
        else:
            missing.append(f"gpt2-{size} {impl} (see {log})")
    if not rows:
        print(f"\n{size}: no RESULT lines: see the logs above")
        continue
    base = next((r for r in rows if r["impl"] == "launch-cuda"), None)
    print(f"\ngpt2-{size}\n| implementation | tokens/s | ms/step | MFU | peak memory (GiB) | "
          "launch-cuda speed-up | SM clock (MHz), power (W), power-capped |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        up = float(base["tok_s"]) / float(r["tok_s"]) if base else float("nan")
        s = r["smi"]
        clk = (f"{s['sm_mhz']}, {s['power_w']} of {s['limit_w']}, {float(s['power_capped']):.0%}"
               if s else "-")
        print(f"| {r['impl']} | {float(r['tok_s']):,.0f} | {float(r['ms']):.2f} | "
              f"{100 * float(r['mfu']):.1f}% | {float(r['mem_gib']):.2f} | {up:.2f}x | {clk} |")
if missing:
    sys.exit("run_gpt_bench.sh: no RESULT line, the run failed: " + "; ".join(missing))
PY
