# gpu_lib.sh - sourced by the GPU-machine scripts of bench/: the environment
# every GPU command there needs, and a time-boxed step.
#   NVLink multicast off (it can take shared GPUs down), the CUDA libraries
#   of pip's nvidia packages on LD_LIBRARY_PATH.
#   step LABEL SECONDS COMMAND...: runs COMMAND under `timeout SECONDS`, or
#   skips it when fewer than SECONDS are left of BUDGET (set by the caller).
#   smi_watch FILE / smi_done FILE: the GPU's clock and power while a command
#   runs (below).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NVLIBS=$(python3 -c 'import nvidia,os;print(":".join(os.path.join(p,d,"lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null)
export LD_LIBRARY_PATH=${NVLIBS}:${LD_LIBRARY_PATH:-}
left() { echo $((BUDGET - SECONDS)); }
step() { # LABEL SECONDS COMMAND...
  local label=$1 t=$2
  shift 2
  if [ "$(left)" -lt "$t" ]; then
    echo "== $label: skipped ($(left) s left)"
    return
  fi
  echo "== $label [$SECONDS s]"
  timeout "$t" "$@" 2>&1
  echo "rc=$? [$SECONDS s]"
}
# gpt_shape SIZE [K]: sets the array `shape` to gpt_bench's (and
#   torch_gpt2.py's) flags for a GPT-2 size of issue #26's table (124m and
#   350m B16, 774m B8); with K > 1 the batch as K micro-batches of B/K a step
#   (--accum K). RET 2 for an unknown size or a K that does not divide B.
gpt_shape() {
  local size=$1 k=${2:-1} b
  case $size in
    124m) shape=(--layers 12 --heads 12 --channels 768) b=16 ;;
    350m) shape=(--layers 24 --heads 16 --channels 1024) b=16 ;;
    774m) shape=(--layers 36 --heads 20 --channels 1280) b=8 ;;
    *) echo "unknown size $size (124m, 350m or 774m)" >&2; return 2 ;;
  esac
  if [ "$k" -lt 1 ] || [ $((b % k)) -ne 0 ]; then
    echo "split $k does not divide $size's batch of $b" >&2
    return 2
  fi
  shape+=(--batch $((b / k)))
  [ "$k" = 1 ] || shape+=(--accum "$k")
}

# smi_watch FILE: samples GPU 0's SM clock (MHz), power (W), utilization (%)
#   and clock-event reasons every 100 ms into FILE, in the background, until
#   smi_done FILE, which prints one line over the busy samples (utilization
#   >= 90 %):  SMI sm_mhz=MEAN power_w=MEAN limit_w=L power_capped=SHARE
#   samples=N. Training on the H200 runs at its 700 W cap: the SM clock falls
#   to ~1,550 MHz of 1,980 (docs/benchmarks/2026-12-06-h200.md), so a change
#   is worth what it saves in energy, not in idle time. Nothing where
#   nvidia-smi is missing.
smi_watch() {
  smi_pid=
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi -i 0 --query-gpu=clocks.sm,power.draw,utilization.gpu,clocks_event_reasons.active \
    --format=csv,noheader,nounits -lms 100 >"$1" 2>/dev/null &
  smi_pid=$!
}
smi_done() {
  [ -n "${smi_pid:-}" ] || return 0
  kill "$smi_pid" 2>/dev/null
  wait "$smi_pid" 2>/dev/null
  smi_pid=
  local limit
  limit=$(nvidia-smi -i 0 --query-gpu=power.limit --format=csv,noheader,nounits 2>/dev/null)
  # reasons: 0x4 the software power cap, 0x80 the hardware power brake
  awk -F', *' -v lim="${limit:-0}" '
    function hex(h, i, v) { v = 0; h = tolower(h)
      for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
      return v }
    $3 + 0 >= 90 { n++; c += $1; p += $2; low = hex(substr($4, length($4) - 1))
      if (int(low / 4) % 2 || int(low / 128) % 2) cap++ }
    END { if (n) printf "SMI sm_mhz=%.0f power_w=%.0f limit_w=%.0f power_capped=%.2f samples=%d\n",
                        c / n, p / n, lim, cap / n, n }' "$1"
}
