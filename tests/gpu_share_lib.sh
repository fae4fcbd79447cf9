# shellcheck shell=bash
# gpu_share_lib.sh - sourced by the GPU tests whose NCCL ranks need a GPU
# each (test_gpu_allreduce.sh, test_gpu_rt_shard.sh,
# test_train_gpt_zero_gpu.sh) so that they also run where one GPU is lent.
#
# NCCL refuses two ranks of one communicator on one GPU of one host
# (ncclInvalidUsage, "Duplicate GPU detected"). It tells hosts apart by a
# hash of NCCL_HOSTID when that is set: given a different NCCL_HOSTID each,
# two ranks on one GPU are two hosts to NCCL, which joins them through its
# socket transport on loopback instead of P2P or shared memory. The calls
# and the data are those of two GPUs (ncclAllReduce, ncclReduceScatter,
# ncclAllGather, grouped ncclReduce and ncclBroadcast); the speed is not,
# and nothing here measures it.
#
# gpu_count: the GPUs this process may use (CUDA_VISIBLE_DEVICES' entries,
# else /dev/nvidiaN), 0 where there is none.
gpu_count() {
  local n
  n=$(ls -d /dev/nvidia[0-9]* 2>/dev/null | wc -l)
  if [ "$n" -gt 0 ] && [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    n=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
  fi
  echo "$n"
}

# gpu_share_wrap DIR: writes DIR/nccl-host-per-rank, which runs its
# arguments with NCCL_HOSTID=launch-test-host-$LOCAL_RANK, sets
# GPU_SHARE_WRAP to its path and exports the socket transport's settings
# for loopback (call it in this shell, not in $(...)). Put the wrapper
# before the worker on launch's command line.
gpu_share_wrap() {
  local w=$1/nccl-host-per-rank
  cat >"$w" <<'EOF'
#!/bin/sh
# one NCCL "host" per local rank (tests/gpu_share_lib.sh)
NCCL_HOSTID=launch-test-host-${LOCAL_RANK:?launch sets LOCAL_RANK}
export NCCL_HOSTID
exec "$@"
EOF
  chmod +x "$w"
  export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
  # shellcheck disable=SC2034 # read by the sourcing script
  GPU_SHARE_WRAP=$w
}

# gpu_nccl_ranks DIR: sets N, the ranks of a one-node NCCL test (a rank a
# GPU, or two on the one GPU), and the array WRAP, what launch puts before
# the worker (nothing, or gpu_share_wrap's wrapper, written in DIR). RET 1
# where there is no GPU.
gpu_nccl_ranks() {
  N=$(gpu_count)
  WRAP=()
  [ "$N" -gt 0 ] || return 1
  if [ "$N" -eq 1 ]; then
    N=2
    gpu_share_wrap "$1"
    WRAP=("$GPU_SHARE_WRAP")
    echo "one GPU: 2 ranks share it, one NCCL host each (socket transport on loopback)"
  fi
}
