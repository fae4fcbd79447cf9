#!/bin/bash
# What runs on the GPU machine (the device tool), from the repository root,
# with a build carried in .gpu-build (scripts/gpu-build.sh). Results go to
# $OUT (at most 8 files come back). NVLink multicast stays off: every
# worker launch starts gets NCCL_NVLS_ENABLE=0 and the two others from the
# infrastructure lock; they are also exported here for PyTorch's own runs.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=.gpu-build/bin
L=$B/launch
PY=""
for p in python3 /usr/bin/python3 /opt/conda/bin/python /usr/local/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null; then PY=$(command -v "$p"); break; fi
done
export PYTHON_EXEC=$PY LAUNCH_BIN=$L LAUNCH_SOURCE_DIR=$PWD LAUNCH_BUILD_DIR=$PWD/.gpu-build
NG=$(nvidia-smi -L 2>/dev/null | grep -c GPU)
{
  date; uname -a; nproc; free -g | head -2
  nvidia-smi; nvidia-smi topo -m; nvidia-smi -L
  echo "python: $PY"; $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
  ls -l /usr/lib/x86_64-linux-gnu/libnccl* 2>/dev/null
  numactl -H 2>/dev/null; lscpu | head -20
} >"$OUT/machine.txt" 2>&1
{
  echo "== launch topo"; $L topo
  echo "== launch doctor"; $L doctor
  echo "== launch env --lint"; $L env --lint
} >"$OUT/node.txt" 2>&1
bash scripts/export-topology.sh "$OUT/h200.xml" >>"$OUT/node.txt" 2>&1
{
  echo "== allreduce_check, NCCL bootstrapped by launch, $NG GPUs, binding reported"
  $L --standalone --nproc-per-node "$NG" --report-bindings $B/allreduce_check
  echo "rc=$?"
  for sz in 8388608 268435456 1073741824; do
    echo "== allreduce_check --bench $sz"
    $L --standalone --nproc-per-node "$NG" -q $B/allreduce_check --bench $sz --iters 20
    echo "== torch under launch (agent store: TCPStore 2.x dialect) $sz"
    $L --standalone --nproc-per-node "$NG" -q examples/torch_allreduce_bench.py $sz 20
    echo "== torch under torchrun $sz"
    $PY -m torch.distributed.run --standalone --nproc_per_node "$NG" examples/torch_allreduce_bench.py $sz 20 2>&1 | grep -v Warning
  done
  echo "== allreduce_check through a 2-agent rendezvous (127.0.0.2, 127.0.0.3), one GPU each"
  P=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  for i in 2 3; do
    CUDA_VISIBLE_DEVICES=$((i - 2)) LAUNCH_HOSTNAME=gpu$i $L --nnodes 2 --nproc-per-node 1 \
      --rdzv-endpoint 127.0.0.2:$P --rdzv-id two --local-addr 127.0.0.$i -q $B/allreduce_check &
  done
  wait
  echo "== the same two agents, rank 1 failing once: restart, new NCCL ids, done"
  cat > /tmp/flaky.sh <<'SH'
#!/bin/bash
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then echo "rank 1 fails once" >&2; exit 3; fi
exec "$ARC"
SH
  chmod +x /tmp/flaky.sh
  P=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  for i in 2 3; do
    ARC=$PWD/$B/allreduce_check CUDA_VISIBLE_DEVICES=$((i - 2)) LAUNCH_HOSTNAME=gpu$i $L --nnodes 2 \
      --nproc-per-node 1 --max-restarts 1 --rdzv-endpoint 127.0.0.2:$P --rdzv-id flaky \
      --local-addr 127.0.0.$i /tmp/flaky.sh &
  done
  wait
} >"$OUT/allreduce.txt" 2>&1
{
  for t in tests/test_gpu_allreduce.sh; do echo "== $t"; bash $t; echo "rc=$?"; done
  for t in test_aff_bind test_aff_plan test_nccl_ids test_native_ops test_tcpstore_wire; do
    echo "== $t"; .gpu-build/tests/$t; echo "rc=$?"
  done
  for t in test_torch_tcpstore.py test_torch_launch.py test_agent_single.py test_agent_node.py \
           test_agent_multinode.py test_agent_cli.py; do
    echo "== $t"; timeout 300 $PY tests/$t; echo "rc=$?"
  done
} >"$OUT/tests.txt" 2>&1
echo done
