#!/bin/bash
# `launch server` as a user runs it: flags, errors that say what to do, a
# chosen port, dual-stack IPv4/IPv6, clean shutdown on SIGTERM and SIGINT,
# and an outside program built against the *installed* librdzv through
# pkg-config (examples/store_client.c).
set -u
LAUNCH=${LAUNCH_BIN:-build/bin/launch}
SRC=${LAUNCH_SOURCE_DIR:-.}
BUILD=${LAUNCH_BUILD_DIR:-build}
T=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect_fail "what" "message fragment" cmd...
expect_fail() {
  local what=$1 frag=$2; shift 2
  "$@" >"$T/out" 2>&1 && fail "$what: exit 0"
  local rc=$?
  [ "$rc" -ne 0 ] || fail "$what: exit 0"
  grep -q -- "$frag" "$T/out" || { cat "$T/out"; fail "$what: no '$frag' in the message"; }
}

expect_fail "bad port" "--port: 'abc' is not a port" "$LAUNCH" server --port abc
expect_fail "port out of range" "0-65535" "$LAUNCH" server --port 70000
expect_fail "unknown flag" "unknown or incomplete option '--bogus'" "$LAUNCH" server --bogus
expect_fail "missing token file" "--token-file $T/nope" "$LAUNCH" server --port 0 --token-file "$T/nope"
: > "$T/empty"
expect_fail "empty token file" "is empty" "$LAUNCH" server --port 0 --token-file "$T/empty"
expect_fail "bad allow list" "does not parse" "$LAUNCH" server --port 0 --tcpstore-allow 300.1.1.1/8
expect_fail "no program" "no program given" "$LAUNCH" --standalone
expect_fail "threads 0" "--threads: '0' is not a number of event loops (1-64)" "$LAUNCH" server --port 0 --threads 0
expect_fail "threads env" "LAUNCH_SERVER_THREADS='x'" env LAUNCH_SERVER_THREADS=x "$LAUNCH" server --port 0
"$LAUNCH" server --help | grep -q "TCPStore has no authentication" || fail "--help lacks the TCPStore warning"

start_server() { # start_server NAME args... -> sets PORT, SPID
  rm -f "$T/$1.port"
  local name=$1; shift
  "$LAUNCH" server --port 0 --port-file "$T/$name.port" "$@" >"$T/$name.log" 2>&1 &
  SPID=$!
  PIDS+=("$SPID")
  for _ in $(seq 500); do [ -s "$T/$name.port" ] && break; sleep 0.01; done
  [ -s "$T/$name.port" ] || { cat "$T/$name.log"; fail "server $name did not start"; }
  PORT=$(cat "$T/$name.port")
}

# dual stack: one listener answers on 127.0.0.1 and on ::1
start_server dual
grep -q "listening on \* port $PORT" "$T/dual.log" || fail "no listening line"
/usr/bin/python3 - "$PORT" <<'PY' || fail "dual-stack check"
import socket, struct, sys
port = int(sys.argv[1])
for fam, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    s = socket.socket(fam); s.settimeout(5); s.connect((host, port))
    s.sendall(b"\x00\xce\xf7\x85\x3c" + b"\x0d" + struct.pack("<I", 77))  # VALIDATE, PING
    assert s.recv(4) == struct.pack("<I", 77), host
    s.close()
PY
# the port is taken: a clear message
expect_fail "port in use" "another server holds the port" "$LAUNCH" server --port "$PORT"
kill -TERM "$SPID"; wait "$SPID"; rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM exit status $rc"
grep -q "shutting down" "$T/dual.log" || fail "no shutdown line"

# SIGINT too, with a unix socket that disappears afterwards
start_server uds --unix "$T/uds.sock"
[ -S "$T/uds.sock" ] || fail "no unix socket"
kill -INT "$SPID"; wait "$SPID" || fail "SIGINT exit status"
[ -e "$T/uds.sock" ] && fail "unix socket left behind"

# an outside program, built against the installed library via pkg-config
cmake --install "$BUILD" --prefix "$T/prefix" >"$T/install.log" 2>&1 || { cat "$T/install.log"; fail "cmake --install"; }
[ -f "$T/prefix/include/rdzv.h" ] || fail "rdzv.h not installed"
PCDIR=$(dirname "$(find "$T/prefix" -name rdzv.pc | head -1)")
[ -n "$PCDIR" ] || fail "rdzv.pc not installed"
CFLAGS_LIBS=$(PKG_CONFIG_PATH=$PCDIR pkg-config --cflags --libs rdzv) || fail "pkg-config rdzv"
cc "$SRC/examples/store_client.c" $CFLAGS_LIBS -o "$T/store_client" ${LAUNCH_EXAMPLE_CFLAGS:-} \
  || fail "examples/store_client.c does not build against the installed library"
LIBDIR=$(PKG_CONFIG_PATH=$PCDIR pkg-config --variable=libdir rdzv)
echo "secret-$$" > "$T/token"
# ... served by 3 event loops (the ranks' connections land on different ones)
start_server ex --token-file "$T/token" --threads 3
grep -q "3 event loops" "$T/ex.log" || fail "no '3 event loops' in the listening line"
for r in 0 1 2; do
  LD_LIBRARY_PATH=$LIBDIR LAUNCH_RDZV_ENDPOINT=127.0.0.1:$PORT LAUNCH_RDZV_ID=example \
    LAUNCH_RDZV_TOKEN_FILE="$T/token" "$T/store_client" $r 3 >"$T/ex$r.out" 2>&1 &
  PIDS+=($!); EX[$r]=$!
done
for r in 0 1 2; do wait "${EX[$r]}" || { cat "$T/ex$r.out"; fail "example rank $r"; }; grep -q "sum=6" "$T/ex$r.out" || fail "rank $r sum"; done
# without the token the same program is refused with a message saying why
LD_LIBRARY_PATH=$LIBDIR LAUNCH_RDZV_ENDPOINT=127.0.0.1:$PORT LAUNCH_RDZV_ID=example \
  "$T/store_client" 0 1 >"$T/noauth.out" 2>&1 && fail "connected without the token"
grep -q "token" "$T/noauth.out" || { cat "$T/noauth.out"; fail "no token hint"; }
kill -TERM "$SPID"; wait "$SPID"
echo "test_cli_server: ok"
