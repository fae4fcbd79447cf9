#!/bin/bash
# The rendezvous server under simulated agents (issue #10, "1,024 agents"):
# bench/rdzv_load plays N agents from one process against a server it forks,
# for each N, several runs; prints the medians as a table for
# docs/BENCHMARKS.md and keeps every run's JSON. Never part of the tests.
#
#   bench/run_rdzv_load.sh [--build DIR] [--agents "1024 16384"] [--runs 3]
#                          [--steady 10] [--out DIR]
#
# Needs nothing but the build (no Python): runs unchanged on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build
AGENTS="1024 16384"
RUNS=3
STEADY=10
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --agents) AGENTS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --steady) STEADY=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *) echo "run_rdzv_load.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
BIN="$BUILD/bin/rdzv_load"
if [ ! -x "$BIN" ]; then
  echo "run_rdzv_load.sh: $BIN is missing: build first (cmake --build $BUILD --target rdzv_load)" >&2
  exit 2
fi
if [ -z "$OUT" ]; then
  OUT=$(mktemp -d /tmp/rdzv-load.XXXXXX)
fi
mkdir -p "$OUT"
# 16,384 sockets here and as many in the forked server.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

echo "$(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; Linux $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $AGENTS; do
  for r in $(seq 1 "$RUNS"); do
    "$BIN" --agents "$n" --steady "$STEADY" --json "$OUT/agents$n.run$r.json" \
      2>"$OUT/agents$n.run$r.log" >/dev/null \
      || { echo "rdzv_load --agents $n failed: $(tail -1 "$OUT/agents$n.run$r.log")" >&2; exit 1; }
  done
done

# The median of a JSON field over the runs of one N.
median() { # n field
  for f in "$OUT"/agents"$1".run*.json; do
    sed -n "s/.*\"$2\": \([-0-9.e]*\).*/\1/p" "$f"
  done | sort -g | awk '{v[NR]=$1} END{if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}

printf '| agents | connect+HELLO | round (JOIN -> all replies) | server CPU, round | steady: server CPU per heartbeat | steady: %% of one core | complete (REPORT -> SHUTDOWN) | server RSS per agent |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for n in $AGENTS; do
  printf '| %s | %.3f s | %.3f s | %.3f s | %.1f us | %.2f %% | %.3f s | %.0f B |\n' "$n" \
    "$(median "$n" connect_s)" "$(median "$n" round_s)" "$(median "$n" round_server_cpu_s)" \
    "$(median "$n" server_cpu_per_heartbeat_us)" "$(median "$n" steady_core_pct)" \
    "$(median "$n" complete_s)" "$(median "$n" server_bytes_per_agent)"
done
echo "medians of $RUNS runs, heartbeats every 1 s for $STEADY s; every run's JSON and log in $OUT"
echo "goals (GPU machine): 16,384 agents complete a round in < 2 s; their steady heartbeats cost < 10 % of one server core"
