# gpu_lib.sh - sourced by the GPU-machine scripts of bench/: the environment
# every GPU command there needs, and a time-boxed step.
#   NVLink multicast off (it can take shared GPUs down), the CUDA libraries
#   of pip's nvidia packages on LD_LIBRARY_PATH.
#   step LABEL SECONDS COMMAND...: runs COMMAND under `timeout SECONDS`, or
#   skips it when fewer than SECONDS are left of BUDGET (set by the caller).
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
