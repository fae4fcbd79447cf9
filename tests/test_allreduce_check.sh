#!/bin/bash
# examples/allreduce_check under launch: through the store on CPU (4 ranks,
# and 2 agents x 2 ranks); through NCCL when a GPU is present (label gpu:
# tests/test_gpu_allreduce.sh). Checks the seed's line on every rank.
set -u
LAUNCH=${LAUNCH_BIN:-build/bin/launch}
BIN=$(dirname "$LAUNCH")
T=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$LAUNCH" --standalone --nproc-per-node 4 -q "$BIN/allreduce_check" --cpu >"$T/one.log" 2>&1 \
  || { cat "$T/one.log"; fail "standalone"; }
for r in 0 1 2 3; do
  grep -q "rank=$r, local_rank=$r, world_size=4, gpu=none, allreduce=10" "$T/one.log" \
    || { cat "$T/one.log"; fail "rank $r"; }
done
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for i in 2 3; do
  LAUNCH_HOSTNAME=h$i "$LAUNCH" --nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.2:$PORT \
    --rdzv-id arc --local-addr 127.0.0.$i -q "$BIN/allreduce_check" --cpu >"$T/n$i.log" 2>&1 &
  PIDS+=($!)
done
for p in "${PIDS[@]}"; do wait "$p" || { cat "$T"/n*.log; fail "two agents"; }; done
PIDS=()
cat "$T"/n*.log > "$T/both.log"
for r in 0 1 2 3; do
  grep -q "rank=$r, local_rank=$((r % 2)), world_size=4, gpu=none, allreduce=10" "$T/both.log" \
    || { cat "$T/both.log"; fail "two agents rank $r"; }
done
# outside launch it says what to do
env -u RANK "$BIN/allreduce_check" >"$T/bare.log" 2>&1 && fail "ran without RANK"
grep -q "run it under launch" "$T/bare.log" || fail "no hint"
echo "test_allreduce_check: ok"
