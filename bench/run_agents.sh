#!/bin/bash
# Real agents on loopback (issue #10, "1,024 agents"): for each N, N `launch`
# agents on 127.0.x.y, one worker each, through run_launch_bench.py's
# section 4 (--only many, no torchrun): last agent started -> all workers
# started and -> all agents exited, the CPU of it all, the VmHWM of the
# hosting and of a non-hosting agent. An N whose agents would not fit in
# the memory available (8 MB an agent and its worker, measured, with room
# to spare) is skipped, said so. Never part of the tests.
#
#   bench/run_agents.sh [--build DIR] [--agents "256 1024"] [--runs 3]
#                       [--json-dir DIR]
#
# Runs unchanged on the GPU machine (any python3; torch is not needed).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=build
AGENTS="256 1024"
RUNS=3
JSON_DIR=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --agents) AGENTS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --json-dir) JSON_DIR=$2; shift 2 ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "run_agents.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ ! -x "$BUILD/bin/launch" ]; then
  echo "run_agents.sh: $BUILD/bin/launch is missing: build first (cmake --build $BUILD)" >&2
  exit 2
fi
PY=$(command -v python3 || command -v python || true)
if [ -z "$PY" ]; then
  echo "run_agents.sh: no python3 on PATH" >&2
  exit 2
fi
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
for n in $AGENTS; do
  need_kb=$((n * 16 * 1024))
  if [ "$need_kb" -gt "$avail_kb" ]; then
    echo "$n agents: skipped, they need about $((need_kb / 1024)) MB and $((avail_kb / 1024)) MB are available"
    continue
  fi
  json=()
  if [ -n "$JSON_DIR" ]; then
    mkdir -p "$JSON_DIR"
    json=(--json "$JSON_DIR/agents$n.json")
  fi
  "$PY" bench/run_launch_bench.py --build "$BUILD" --no-torch --only many \
    --agents "$n" --agent-runs "$RUNS" "${json[@]}"
done
