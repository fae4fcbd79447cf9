#!/usr/bin/env bash
# run_store_bench.sh - store throughput and latency, side by side in one run:
# `launch server` against PyTorch's own TCPStore server (1.13's poll()
# daemon, or 2.x's libuv server, whichever torch the python has), with the
# same client (build/bin/store_bench) and the same load.
#
#   bench/run_store_bench.sh
# environment:
#   BENCH_SECONDS   measured seconds per run (default 5; plus 1 s warmup)
#   BENCH_CLIENTS   client counts (default "1 8 64 256 1024")
#   BENCH_THREADS   our server's --threads (default: a quarter of the
#                   cores, at most 8, at least 1, as the server's own default); when not 1, a second
#                   server of ours with --threads 1 runs too (row ours-t1)
#   BENCH_BUILD_DIR an existing build to use (default: build-bench/, an
#                   optimised build without sanitizers, configured and built
#                   here when missing)
#   PYTHON_EXEC     the python that imports torch (also PYTHON); default:
#                   the first of python3, python, /usr/bin/python3,
#                   /usr/local/bin/python3 on PATH that imports torch
#   BENCH_ARGS      more store_bench options for the TCPStore runs, e.g.
#                   --torch-get (WAIT and its answer before each GET)
#   BENCH_PIN       1: pin both servers to CPU 0 and the clients to CPU 1
#                   (taskset), so that the server never competes with its
#                   clients for a core; default: the scheduler decides.
#                   One core for the server: pointless with several loops
#                   (set BENCH_THREADS=1 with it)
#
# For each client count it runs: the TCPStore client in torch's numbering
# (tcpstore-v1 for PyTorch 1.13, the Debian package here; tcpstore-v2 for a
# PyTorch 2.x) against torch's server, the same against ours, then the
# native client (librdzv: rdzv_set_nowait then rdzv_get, one write and one
# wait per pair, the set answered only if it fails) and the TCPStore client in the other
# numbering against ours. It prints each run, then markdown tables (ops/s, p50, p99,
# ours/torch; CPU per pair). Every process it starts is killed by pid on
# exit. Only 127.0.0.1 is used.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${BENCH_SECONDS:-5}
clients=${BENCH_CLIENTS:-"1 8 64 256 1024"}
python=${PYTHON_EXEC:-${PYTHON:-}}
if [ -z "$python" ]; then
  for cand in python3 python /usr/bin/python3 /usr/local/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 &&
       "$cand" -c 'import torch.distributed' >/dev/null 2>&1; then
      python=$(command -v "$cand")
      break
    fi
  done
fi
if [ -z "$python" ] || ! "$python" -c 'import torch.distributed' >/dev/null 2>&1; then
  echo "run_store_bench: no python that imports torch.distributed: set" \
       "PYTHON_EXEC" >&2
  exit 2
fi
# 1024 clients need more than 1024 descriptors, in the servers (torch's
# inherits this limit) and in store_bench.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
build=${BENCH_BUILD_DIR:-$root/build-bench}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/store-bench.XXXXXX")
ours_pid=
ours1_pid=
torch_pid=

cleanup() {
  # Close torch's stdin (it exits on EOF), then make sure, by pid.
  exec 3>&-
  for pid in $ours_pid $ours1_pid $torch_pid; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in $ours_pid $ours1_pid $torch_pid; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_file() { # FILE SECONDS
  local i
  for ((i = 0; i < $2 * 20; i++)); do
    [ -s "$1" ] && return 0
    sleep 0.05
  done
  return 1
}

if [ -z "${BENCH_BUILD_DIR:-}" ]; then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    generator=()
    command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
    cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DLAUNCH_BUILD_TESTS=OFF >"$tmp/configure.log" 2>&1 || {
      cat "$tmp/configure.log" >&2
      exit 2
    }
  fi
  cmake --build "$build" --target launch store_bench >/dev/null
fi
pin_srv=()
pin_cli=()
if [ "${BENCH_PIN:-0}" = 1 ]; then
  pin_srv=(taskset -c 0)
  pin_cli=(taskset -c 1)
fi
launch=$build/bin/launch
bench=$build/bin/store_bench
if ! grep -q 'CMAKE_BUILD_TYPE:STRING=Release' "$build/CMakeCache.txt" ||
   grep -q 'LAUNCH_ASAN:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "run_store_bench: warning: $build is not a Release build without" \
       "sanitizers; the figures will not be comparable" >&2
fi

# Our server: with BENCH_THREADS loops (else a quarter of the cores, at
# most 8, as its own default), and with one loop when that is more.
if [ -z "${BENCH_THREADS:-}" ]; then
  ncpu=$(nproc)
  BENCH_THREADS=$((ncpu / 4))
  [ "$BENCH_THREADS" -gt 8 ] && BENCH_THREADS=8
  [ "$BENCH_THREADS" -lt 1 ] && BENCH_THREADS=1
fi
threads_arg=(--threads "$BENCH_THREADS")
start_ours() { # NAME EXTRA... ; sets started_pid, started_port
  local name=$1
  shift
  "${pin_srv[@]}" "$launch" server --host 127.0.0.1 --port 0 \
    --max-conns-per-addr 65536 --port-file "$tmp/$name.port" "$@" \
    >"$tmp/$name.log" 2>&1 &
  started_pid=$!
  wait_file "$tmp/$name.port" 10 || { cat "$tmp/$name.log" >&2; exit 1; }
  started_port=$(cat "$tmp/$name.port")
}
start_ours ours "${threads_arg[@]}"
ours_pid=$started_pid ours_port=$started_port
ours_threads=$(sed -n 's/.*, \([0-9]*\) event loops*$/\1/p' "$tmp/ours.log")
if [ "$ours_threads" != 1 ]; then
  start_ours ours1 --threads 1
  ours1_pid=$started_pid ours1_port=$started_port
fi

# PyTorch's TCPStore server (1.13: the legacy poll() daemon thread of the
# master store; 2.4+: the libuv server), alive until its stdin closes.
mkfifo "$tmp/torch.in"
"${pin_srv[@]}" "$python" -c '
import datetime, os, sys
import torch
import torch.distributed as dist
kw = dict(is_master=True, wait_for_workers=False,
          timeout=datetime.timedelta(seconds=600))
try:  # 2.x: the libuv server (the default from 2.4 on), said explicitly
    store = dist.TCPStore("127.0.0.1", 0, use_libuv=True, **kw)
except TypeError:  # 1.13 has no such option
    store = dist.TCPStore("127.0.0.1", 0, **kw)
backend = "libuv" if getattr(store, "libuvBackend", False) else "legacy"
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("%d %s %s\n" % (store.port, torch.__version__, backend))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
sys.stdin.read()
' "$tmp/torch.port" <"$tmp/torch.in" >"$tmp/torch.log" 2>&1 &
torch_pid=$!
exec 3>"$tmp/torch.in"
wait_file "$tmp/torch.port" 60 || { cat "$tmp/torch.log" >&2; exit 1; }
read -r torch_port torch_version torch_backend <"$tmp/torch.port"
if [ "${torch_version%%.*}" -ge 2 ]; then
  ts=tcpstore-v2 alt=tcpstore-v1
else
  ts=tcpstore-v1 alt=tcpstore-v2
fi

echo "run_store_bench: ours (launch server, $ours_threads event loops) on" \
     "127.0.0.1:$ours_port${ours1_pid:+ (and --threads 1 on $ours1_port)}," \
     "torch $torch_version TCPStore ($torch_backend server, $python) on" \
     "127.0.0.1:$torch_port;" \
     "$seconds s per run, 64-byte values, $(nproc) cores" \
     "$([ ${#pin_srv[@]} -gt 0 ] && echo "(servers pinned to CPU 0," \
          "clients to CPU 1)" || echo "shared by clients and servers")"

declare -A res
read -r -a bench_args <<<"${BENCH_ARGS:-}"
run() { # NAME DIALECT PORT CLIENTS SERVER_PID
  local out extra=()
  [ "$2" != native ] && extra=("${bench_args[@]}")
  out=$("${pin_cli[@]}" "$bench" --endpoint "127.0.0.1:$3" --dialect "$2" \
          --clients "$4" --seconds "$seconds" --warmup 1 --value-size 64 \
          --server-pid "$5" "${extra[@]}")
  echo "$out" | sed -n '1,4p' | sed "s/^/[$1] /"
  res[$1.$4]=$(echo "$out" | sed -n 's/^RESULT //p')
}
field() { # RESULT KEY
  echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

for n in $clients; do
  run torch "$ts" "$torch_port" "$n" "$torch_pid"
  run ours "$ts" "$ours_port" "$n" "$ours_pid"
  run native native "$ours_port" "$n" "$ours_pid"
  run ours_alt "$alt" "$ours_port" "$n" "$ours_pid"
  if [ -n "$ours1_pid" ]; then
    run ours1 "$ts" "$ours1_port" "$n" "$ours1_pid"
  fi
done

echo
echo "Client: $ts ${BENCH_ARGS:+$BENCH_ARGS }for torch and ours;" \
     "ours also with $alt and native (librdzv: rdzv_set_nowait then" \
     "rdzv_get, written together, the set answered only if it fails: one" \
     "round trip a pair," \
     "as the TCPStore client's SET+GET)."
echo
echo "| clients | torch $torch_version ops/s | p50 us | p99 us | ours ops/s |" \
     "p50 us | p99 us | ours/torch ops/s | ours p99 <= torch p99 |" \
     "ours $alt ops/s | native ops/s | native p50 us | native p99 us |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---:|---:|"
for n in $clients; do
  t=${res[torch.$n]} o=${res[ours.$n]} v=${res[ours_alt.$n]}
  m=${res[native.$n]}
  to=$(field "$t" ops_per_s) oo=$(field "$o" ops_per_s)
  tp=$(field "$t" p99_us) op=$(field "$o" p99_us)
  ratio=$(awk -v a="$oo" -v b="$to" \
            'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }')
  p99ok=$(awk -v a="$op" -v b="$tp" \
            'BEGIN { print ((a <= b) ? "yes" : "no") }')
  echo "| $n | $to | $(field "$t" p50_us) | $tp | $oo | $(field "$o" p50_us)" \
       "| $op | $ratio | $p99ok | $(field "$v" ops_per_s) |" \
       "$(field "$m" ops_per_s) | $(field "$m" p50_us) | $(field "$m" p99_us) |"
done

if [ -n "$ours1_pid" ]; then
  echo
  echo "One event loop (--threads 1) against $ours_threads, same client ($ts):"
  echo
  echo "| clients | ours-t1 ops/s | p99 us | ours-t$ours_threads ops/s | p99 us |"
  echo "|---:|---:|---:|---:|---:|"
  for n in $clients; do
    o=${res[ours.$n]} w=${res[ours1.$n]}
    echo "| $n | $(field "$w" ops_per_s) | $(field "$w" p99_us) |" \
         "$(field "$o" ops_per_s) | $(field "$o" p99_us) |"
  done
fi

echo
echo "CPU per pair (us; server = the server process, clients = store_bench):"
echo
echo "| clients | torch server | ours server | native: ours server |" \
     "clients vs torch | clients vs ours | native: clients |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for n in $clients; do
  t=${res[torch.$n]} o=${res[ours.$n]} m=${res[native.$n]}
  echo "| $n | $(field "$t" server_cpu_us) | $(field "$o" server_cpu_us) |" \
       "$(field "$m" server_cpu_us) | $(field "$t" client_cpu_us) |" \
       "$(field "$o" client_cpu_us) | $(field "$m" client_cpu_us) |"
done
