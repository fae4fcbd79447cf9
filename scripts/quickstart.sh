#!/bin/bash
# Install what is missing, build, and run the main job on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"

# The main job: a standalone rendezvous server and four clients that
# publish, count and meet at a barrier through it.
T=$(mktemp -d)
trap 'kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; rm -rf "$T"' EXIT
build/bin/launch server --host 127.0.0.1 --port 0 --port-file "$T/port" &
SPID=$!
for _ in $(seq 500); do [ -s "$T/port" ] && break; sleep 0.01; done
PORT=$(cat "$T/port")
pids=()
for r in 0 1 2 3; do
  LAUNCH_RDZV_ENDPOINT=127.0.0.1:$PORT LAUNCH_RDZV_ID=quickstart \
    build/bin/store_client "$r" 4 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
