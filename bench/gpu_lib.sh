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
