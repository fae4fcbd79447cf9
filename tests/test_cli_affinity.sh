#!/bin/bash
# test_cli_affinity.sh - launch topo, launch env and launch doctor as users
# run them: output, JSON that parses, exit codes, and the messages bad input
# gets. Also: hwloc itself loads every topology in tests/topo.
set -u
L=${LAUNCH_BIN:?set by ctest}
S=${LAUNCH_SOURCE_DIR:?set by ctest}
PY=${PYTHON_EXEC:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/launch-cli-XXXXXX")
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; [ -f "$tmp/out" ] && sed 's/^/    /' "$tmp/out" >&2; exit 1; }
# run RC CMD...: run, keep stdout+stderr in $tmp/out, demand exit status RC
run() {
  local want=$1; shift
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "'$*' exited $rc, want $want"
}
has() { grep -qF -- "$1" "$tmp/out" || fail "output lacks '$1'"; }
hasnt() { ! grep -qF -- "$1" "$tmp/out" || fail "output has '$1'"; }
json() { # json PYTHON-EXPR-over-d: stdout of the last run must be JSON
  "$PY" - "$tmp/out" "$1" <<'EOF' || fail "JSON check failed: $1"
import json, sys
d = json.load(open(sys.argv[1]))
assert eval(sys.argv[2]), sys.argv[2]
EOF
}

# ---- the topologies themselves ---------------------------------------------
n=0
for x in "$S"/tests/topo/*.xml; do
  if command -v lstopo-no-graphics >/dev/null; then
    lstopo-no-graphics -i "$x" --of console >/dev/null 2>&1 || fail "lstopo -i $x"
  fi
  run 0 "$L" topo --topology "$x"
  has "binding plan"
  n=$((n + 1))
done
[ "$n" -ge 3 ] || fail "only $n topologies in tests/topo"

# ---- launch topo ------------------------------------------------------------
run 0 "$L" topo --topology "$S/tests/topo/v100-pcie-2s.xml" --nproc-per-node 8 --cpu-bind cores --mem-bind local
has "mlx5_0 (0000:18:00.0) runs at PCIe x8 but supports x16"
has "is the closest NIC of GPU 4,5,6,7 on NUMA node 1"
has "local rank 4: GPU4 0000:86:00.0 NUMA 1 cpus 20-24,60-64 (cores) mem bind 1 NIC mlx5_0:1 ib0"
# by default the plan is what launch applies (issue 27: topo planned
# cores/local, launch applied numa/preferred)
run 0 "$L" topo --topology "$S/tests/topo/dgx-a100.xml"
has "binding plan (--cpu-bind numa --mem-bind preferred, 8 local ranks)"
run 0 "$L" topo --topology "$S/tests/topo/dgx-a100.xml" --json --cpu-bind cores --mem-bind local
json 'len(d["gpus"]) == 8 and d["matrix"]["rows"][0][1] == "NV12"'
json 'len({r["hca"] for r in d["plan"]["ranks"]}) == 8 and d["warnings"] == []'
json 'd["plan"]["ranks"][0]["cpus"] == "48-55,176-183"'
run 0 "$L" topo --topology "$S/tests/topo/dgx-a100.xml" --cuda-visible-devices 6,7 --cpu-bind numa --mem-bind none
has "local rank 0: GPU0 0000:b7:00.0 NUMA 5 cpus 80-95,208-223 (numa) mem unbound NIC mlx5_8:1 ibp186s0"
run 2 "$L" topo --cpu-bind '0-3;4-7'
has "separate the per-rank CPU lists with ':'"
run 2 "$L" topo --cpu-bind socket
has "use none, numa"
run 2 "$L" topo --topology "$S/tests/topo/dgx-a100.xml" --cpu-bind 0-3:4-7 --nproc-per-node 3
has "gives 2 CPU lists for 3 local ranks"
run 2 "$L" topo --topology /nonexistent.xml
has "/nonexistent.xml"
run 2 "$L" topo --nproc-per-node 0
# gpu, cpu and auto as the agent counts them, on the topology planned
run 0 "$L" topo --topology "$S/tests/topo/dgx-a100.xml" --nproc-per-node gpu
has "8 local ranks"
run 0 "$L" topo --topology "$S/tests/topo/dgx-a100.xml" --nproc-per-node auto
has "8 local ranks"
run 0 "$L" topo --topology "$S/tests/topo/v100-pcie-2s.xml" --nproc-per-node cpu
has "80 local ranks"
run 0 "$L" topo --cuda-visible-devices -1 --nproc-per-node auto
has "$(nproc) local rank"
run 2 "$L" topo --cuda-visible-devices -1 --nproc-per-node gpu
has "this machine has no GPU CUDA can see"
run 2 "$L" topo --bogus
run 0 "$L" topo --export "$tmp/here.xml"
run 0 "$L" topo --topology "$tmp/here.xml" --json
json 'd["cpus"] >= 1'
run 0 "$L" topo --cpu-bind none --mem-bind none
has "this process may use"

# ---- launch env ---------------------------------------------------------------
run 0 "$L" env --profile pcie-ib --topology "$S/tests/topo/v100-pcie-2s.xml" --nproc-per-node 8 --cpu-bind cores --local-rank 5
has "NCCL_IB_HCA==mlx5_0:1    # profile pcie-ib line"
has "NCCL_SOCKET_IFNAME=ib0"
has "LAUNCH_CPUS=25-29,65-69"
has "NCCL_NVLS_ENABLE=0    # infrastructure lock"
has "TORCH_SYMM_MEM_DISABLE_MULTICAST=1"
has "NVSHMEM_DISABLE_NVLS=1"
# the defaults are the planned machine's (GPUs: numa, preferred), not this one's
run 0 "$L" env --topology "$S/tests/topo/dgx-a100.xml" --nproc-per-node 8 --local-rank 3
has "LAUNCH_CPUS=16-31,144-159"
has "LAUNCH_HCA=mlx5_3"
has "LAUNCH_NETDEV=ibp84s0"
run 0 "$L" env --topology "$S/tests/topo/dgx-a100.xml" --nproc-per-node gpu
has "LOCAL_WORLD_SIZE=8"
# the lock holds against inherited values, even with --allow-env-override
NCCL_NVLS_ENABLE=1 NVSHMEM_DISABLE_NVLS=0 NCCL_DEBUG=INFO \
  run 0 "$L" env --profile auto --allow-env-override
has "NCCL_NVLS_ENABLE=0"
has "NVSHMEM_DISABLE_NVLS=1"
has "NCCL_DEBUG=INFO"
has "overridden to 0: NVLink multicast stays off"
NCCL_DEBUG=INFO run 0 "$L" env --profile auto --json
json '[v["value"] for v in d["vars"] if v["key"] == "NCCL_DEBUG"] == ["INFO"]'
json '[v["source"] for v in d["vars"] if v["key"] == "NCCL_NVLS_ENABLE"] == ["lock"]'
# seed 000's file, as written, linted on this node
cat >"$tmp/nccl.sh" <<'EOF'
export NCCL_IB_DISABLE=0
export NCCL_SOCKET_IFNAME=ib0
export NCCL_IB_HCA=mlx5_0
export NCCL_IB_GID_INDEX=3
export NCCL_SOCKET_TIMEOUT=6000
export NCCL_ASYNC_ERROR_HANDLING=1
export NCCL_DEBUG=INFO
EOF
# a node with eth0 only: the seed's ib0 and mlx5_0 do not exist here
mkdir -p "$tmp/node/sys/class/net/eth0"
run 1 "$L" env --profile "$tmp/nccl.sh" --lint --root "$tmp/node"
has "error [ifname-missing] NCCL_SOCKET_IFNAME=ib0"
has "fix: pick one of this node's interfaces: eth0"
has "error [hca-missing] NCCL_IB_HCA=mlx5_0"
has "warning [unknown-var] NCCL_SOCKET_TIMEOUT=6000 (profile $tmp/nccl.sh line 5)"
has "warning [async-error-handling]"
has "warning [debug-info]"
run 1 "$L" env --profile "$tmp/nccl.sh" --lint --json --root "$tmp/node"
json 'any(f["rule"] == "unknown-var" and f["fix"] for f in d["findings"])'
run 0 "$L" env --profile auto --lint
run 2 "$L" env --profile pcie_ib
has "use a built-in one (auto, pcie-ib, nvlink-ib, roce, socket)"
printf 'NCCL_DEBUG = WARN\n' >"$tmp/bad.env"
run 2 "$L" env --profile "$tmp/bad.env"
has "bad.env:1: no spaces around '='"
run 0 "$L" env --show-profile pcie-ib
cmp -s "$tmp/out" "$S/env/profiles/pcie-ib.env" || fail "--show-profile differs from env/profiles/pcie-ib.env"
run 0 "$L" env --list-profiles
[ "$(wc -l <"$tmp/out")" -eq 5 ] || fail "--list-profiles: not 5 profiles"
run 0 "$L" env --fingerprint --program "$L"
has "launch-fingerprint 1"
has "sha256.launch="
has "env.NCCL_NVLS_ENABLE=0"
run 0 "$L" env --fingerprint --json
json 'd["profile"] == "auto" and "nccl" in d'
run 2 "$L" env --fingerprint --program /nonexistent/train.bin
has "cannot hash /nonexistent/train.bin"
run 2 "$L" env --local-rank 9 --nproc-per-node 2
has "only 2 local ranks planned"
# --nproc-per-node gpu counts the GPUs CUDA sees: a container given 2 of
# the host's 4 (the driver's /proc lists all 4), and CUDA_VISIBLE_DEVICES
# ending at its first index past them
g="$tmp/gpus"
for i in 0 1 2 3; do
  b="0000:0$((i + 1)):00.0"
  mkdir -p "$g/proc/driver/nvidia/gpus/$b" "$g/sys/bus/pci/devices/$b" "$g/dev"
  printf 'Model: \t\t NVIDIA H100\nGPU UUID: \t GPU-0000000%d-0000-4000-8000-000000000000\nDevice Minor: \t %d\nGPU Excluded: \t No\n' \
    "$i" "$i" >"$g/proc/driver/nvidia/gpus/$b/information"
  echo 0x10de >"$g/sys/bus/pci/devices/$b/vendor"
  echo 0x030200 >"$g/sys/bus/pci/devices/$b/class"
done
touch "$g/dev/nvidiactl" "$g/dev/nvidia0" "$g/dev/nvidia2"
run 0 "$L" env --root "$g" --nproc-per-node gpu
has "LOCAL_WORLD_SIZE=2"
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 run 0 "$L" env --root "$g" --nproc-per-node auto
has "LOCAL_WORLD_SIZE=2"
CUDA_VISIBLE_DEVICES=1,GPU-00000002 run 0 "$L" env --root "$g" --nproc-per-node gpu
has "LOCAL_WORLD_SIZE=1"
CUDA_VISIBLE_DEVICES=GPU-00000001 run 2 "$L" env --root "$g" --nproc-per-node gpu
has "no GPU found"

# ---- launch doctor --------------------------------------------------------------
r="$tmp/root"
mk() { mkdir -p "$(dirname "$r$1")"; printf '%s\n' "$2" >"$r$1"; }
mk /proc/sys/kernel/hostname gpu09
mk /proc/sys/kernel/osrelease 5.14.0-362.el9.x86_64
mk /proc/sys/kernel/numa_balancing 1
mk /proc/sys/vm/nr_hugepages 1024
mk /sys/devices/system/cpu/online 0-7
mk /sys/class/infiniband/mlx5_0/ports/1/state "1: DOWN"
mk /sys/class/infiniband/mlx5_0/ports/1/rate "100 Gb/sec (4X EDR)"
run 1 "$L" doctor --root "$r" --no-probe
has "FAIL  IB mlx5_0 port 1"
has "WARN  NUMA balancing"
has "fix: sysctl -w kernel.numa_balancing=0"
has "WARN  GPUs"
run 1 "$L" doctor --root "$r" --no-probe --json
json 'd["host"] == "gpu09" and d["worst"] == "fail" and d["counts"]["fail"] == 1'
run 1 "$L" doctor --root "$r" --no-probe --compact
head -1 "$tmp/out" | grep -qx "launch-doctor 1" || fail "compact header"
run 2 "$L" doctor --json --compact
run 2 "$L" doctor --root /nonexistent-root
has "--root /nonexistent-root: not a directory"
mk /sys/class/infiniband/mlx5_0/ports/1/state "4: ACTIVE"
mk /proc/sys/kernel/numa_balancing 0
run 0 "$L" doctor --root "$r" --no-probe
# the rendezvous port against a real launch server on loopback
"$L" server --host 127.0.0.1 --port 0 --port-file "$tmp/port" >"$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
port=$(cat "$tmp/port" 2>/dev/null) || fail "launch server did not start"
run 0 "$L" doctor --root "$r" --no-probe --rdzv-endpoint "127.0.0.1:$port"
has "PASS  Rendezvous endpoint        127.0.0.1:$port reachable"
kill "$server_pid"; wait "$server_pid" 2>/dev/null; server_pid=
run 1 "$L" doctor --root "$r" --no-probe --rdzv-endpoint "127.0.0.1:$port"
has "connection refused"
# this machine, libraries probed: never a crash, a verdict on every line
"$L" doctor >"$tmp/out" 2>&1
rc=$?
[ "$rc" -le 1 ] || fail "launch doctor on this machine exited $rc"
has "summary:"

# ---- the topology cache on this machine (aff_tcache.c) ----------------------
# Without it, cold, warm, another CPU mask, a damaged file: the same JSON
# byte for byte; a debug line says where the topology came from.
x="$tmp/xdg"; mkdir -m 700 "$x"
cache="$x/launch-topo-$(id -u).topo"
topo() { # topo NAME [prefix cmd...]: JSON in $tmp/NAME.json, debug in $tmp/NAME.err
  local name=$1; shift
  env XDG_RUNTIME_DIR="$x" LAUNCH_DEBUG=aff "$@" "$L" topo --json --nproc-per-node 2 \
    >"$tmp/$name.json" 2>"$tmp/$name.err" || fail "launch topo ($name) failed"
}
came() { # came NAME from|discovered
  if [ "$2" = from ]; then grep -q "topology from the cache" "$tmp/$1.err" || fail "$1: not from the cache"
  else grep -q "topology from the cache" "$tmp/$1.err" && fail "$1: from the cache, want a discovery"; fi
  return 0
}
same() { cmp -s "$tmp/$1.json" "$tmp/$2.json" || fail "$1 and $2 differ: $(diff "$tmp/$1.json" "$tmp/$2.json" | head -5)"; }
topo off env LAUNCH_TOPO_CACHE=0
[ ! -e "$cache" ] || fail "LAUNCH_TOPO_CACHE=0 wrote $cache"
topo cold; came cold discovered; same off cold
[ "$(stat -c %a "$cache")" = 600 ] || fail "$cache is not mode 0600"
topo warm; came warm from; same off warm
if [ "$(nproc)" -gt 1 ]; then
  topo off1 env LAUNCH_TOPO_CACHE=0 taskset -c 0
  topo mask1 taskset -c 0; came mask1 discovered; same off1 mask1
  topo mask1w taskset -c 0; came mask1w from; same off1 mask1w
  topo back; came back discovered; same off back
fi
topo again; came again from
len=$(stat -c %s "$cache")
printf '#' | dd of="$cache" bs=1 seek=$((len * 3 / 4)) conv=notrunc 2>/dev/null
topo corrupt; came corrupt discovered; same off corrupt
topo fixed; came fixed from; same off fixed
truncate -s $((len / 2)) "$cache"
topo trunc; came trunc discovered; same off trunc
topo fixed2; came fixed2 from
# the agent starts from it too (its default binding is none without GPUs)
env XDG_RUNTIME_DIR="$x" LAUNCH_DEBUG=aff "$L" --standalone --nproc-per-node 2 --cpu-bind cores /bin/true \
  >"$tmp/agent.err" 2>&1 || fail "launch --standalone /bin/true: $(tail -3 "$tmp/agent.err")"
came agent from

echo "ok"
