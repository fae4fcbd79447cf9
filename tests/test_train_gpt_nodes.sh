#!/bin/bash
# train_gpt on one node of 4 ranks (`launch --standalone --nproc-per-node
# 4`) and on 2 agents x 2 ranks on loopback (127.0.0.2, .3): the same final
# loss, to the last printed digit (the CPU sums have a fixed order).
set -u
. "$(dirname "$0")/train_gpt_lib.sh"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"' EXIT

RUN=(--preset tiny --steps 20 --log-every 10)
"$LAUNCH" --standalone --nproc-per-node 4 -q "$TG" "${RUN[@]}" >"$T/one.log" 2>&1 \
  || { cat "$T/one.log"; fail "standalone"; }
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for i in 2 3; do
  LAUNCH_HOSTNAME=h$i "$LAUNCH" --nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.2:$PORT \
    --rdzv-id tg --local-addr 127.0.0.$i -q "$TG" "${RUN[@]}" >"$T/n$i.log" 2>&1 &
  PIDS+=($!)
done
for p in "${PIDS[@]}"; do wait "$p" || { cat "$T"/n*.log; fail "two agents"; }; done
PIDS=()
one=$(grep -o 'final: step 20 loss [0-9.]* val [0-9.]*' "$T/one.log")
two=$(cat "$T"/n*.log | grep -o 'final: step 20 loss [0-9.]* val [0-9.]*')
[ -n "$one" ] || { cat "$T/one.log"; fail "no final line (one node)"; }
[ "$one" = "$two" ] || { cat "$T/one.log" "$T"/n*.log; fail "final losses differ: '$one' / '$two'"; }
echo "one node x 4 and two nodes x 2: $one"
echo "test_train_gpt_nodes: ok"
