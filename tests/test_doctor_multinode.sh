#!/bin/bash
# launch doctor --nnodes: three nodes on loopback gather their reports
# through the rendezvous (the node at the endpoint hosts it) and each prints
# one table of what differs; a node with another NCCL profile is named, and
# the exit status says so. With identical nodes they agree and exit 0.
set -u
LAUNCH=${LAUNCH_BIN:-build/bin/launch}
T=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; for f in "$T"/*.log; do echo "== $f"; cat "$f"; done; exit 1; }
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run3() { # run3 PROFILE_OF_NODE3 -> runs, fills RC[1..3]
  local P; P=$(port)
  PIDS=()
  for i in 3 2 1; do
    local pr=auto; [ "$i" = 3 ] && pr=$1
    LAUNCH_HOSTNAME=doc$i "$LAUNCH" doctor --no-probe --nnodes 3 --rdzv-id dr \
      --rdzv-endpoint 127.0.0.1:$P --local-addr 127.0.0.$i --nccl-profile "$pr" \
      --join-timeout 60 >"$T/doc$i.log" 2>&1 &
    PIDS[$i]=$!
  done
  for i in 1 2 3; do wait "${PIDS[$i]}"; RC[$i]=$?; done
  PIDS=()
}

run3 socket
for i in 1 2 3; do
  [ "${RC[$i]}" -eq 1 ] || fail "node $i exit ${RC[$i]} with a mismatched node"
  grep -Eq "[0-9]+ items? differs? between the 3 nodes" "$T/doc$i.log" || fail "no diff on node $i"
  grep -q "^1 items" "$T/doc$i.log" && fail "'1 items' on node $i"
  grep -q "nccl.env:.*doc3=socket" "$T/doc$i.log" || fail "node 3's profile not named on node $i"
  grep -q "Rendezvous endpoint .*reachable" "$T/doc$i.log" || fail "endpoint check on node $i"
done
run3 auto
for i in 1 2 3; do
  [ "${RC[$i]}" -eq 0 ] || fail "node $i exit ${RC[$i]} with identical nodes"
  grep -q "3 nodes agree" "$T/doc$i.log" || fail "no agreement on node $i"
done
# the items compared are named, the NCCL variables among them
grep -q "3 nodes agree on the items compared:.*nccl.vars" "$T/doc1.log" || fail "what was compared"
run2() { # run2 NAME HOSTNAME_SUFFIX_OR_EMPTY ARGS... -> logs $T/NAME{1,2}.log, fills RC[1..2]
  local name=$1 suffix=$2 P; P=$(port)
  shift 2
  for i in 1 2; do
    LAUNCH_HOSTNAME=$name${suffix:+$i} "$LAUNCH" doctor --no-probe --nnodes 2 --rdzv-id "$name" \
      --rdzv-endpoint 127.0.0.1:$P --local-addr 127.0.0.$i --join-timeout 30 "$@" \
      >"$T/$name$i.log" 2>&1 &
    PIDS[$i]=$!
  done
  for i in 1 2; do wait "${PIDS[$i]}"; RC[$i]=$?; done
  PIDS=()
}
# two nodes of the same host name are two nodes, told apart by their ids
run2 twin ""
for i in 1 2; do
  [ "${RC[$i]}" -eq 0 ] || fail "twin $i exit ${RC[$i]}"
  grep -q "2 nodes agree" "$T/twin$i.log" || fail "twin $i: not 2 nodes"
  grep -q "2 nodes share a host name" "$T/twin$i.log" || fail "twin $i: shared name not said"
done
# nodes that lost every GPU fail --expect-gpus, as ones that lost one do
mkdir -p "$T/nogpu"
run2 nogpu 1 --root "$T/nogpu" --expect-gpus 8
for i in 1 2; do
  [ "${RC[$i]}" -eq 1 ] || fail "nogpu $i exit ${RC[$i]} with no GPU and --expect-gpus 8"
  grep -q "8 GPUs expected, 0 found" "$T/nogpu$i.log" || fail "nogpu $i: the missing GPUs not named"
done
# a node alone: it says how many reported, after the timeout
LAUNCH_HOSTNAME=solo "$LAUNCH" doctor --no-probe --nnodes 2 --rdzv-endpoint 127.0.0.1:$(port) \
  --join-timeout 1 >"$T/solo.log" 2>&1 && fail "a lone node succeeded"
grep -q "only 1 of 2 nodes reported within 1 s: solo" "$T/solo.log" || fail "no timeout message"
"$LAUNCH" doctor --nnodes 2 >"$T/bad.log" 2>&1 && fail "--nnodes without an endpoint"
grep -q "needs --rdzv-endpoint" "$T/bad.log" || fail "no hint"
echo "test_doctor_multinode: ok"
