#!/usr/bin/env bash
# run_store_ab.sh - interleaved A/B of two builds of the store: each build's
# store_bench against its own `launch server`, the builds alternating run by
# run, several rounds, so that a shared machine's load falls on both alike.
#
#   bench/run_store_ab.sh BUILD_A BUILD_B
#     BUILD_*: build directories holding bin/launch and bin/store_bench
#     (Release, no sanitizers, for figures worth comparing)
# environment:
#   AB_ROUNDS    rounds (default 5)
#   AB_CLIENTS   client counts (default "1 8 64 256")
#   AB_DIALECTS  store_bench dialects (default "tcpstore-v1 native")
#   AB_SECONDS   measured seconds per run (default 2; plus 0.5 s warmup)
#   AB_THREADS   the servers' --threads (default 1)
#
# Prints every run's RESULT line, then per count and dialect the medians of
# ops/s, p99, server and client CPU per pair for A and B, and, per build,
# native / tcpstore-v1 ops/s (the median of the rounds' ratios). Every
# process it starts is killed by pid on exit; only 127.0.0.1 is used.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: run_store_ab.sh BUILD_A BUILD_B" >&2
  exit 2
fi
builds=("$1" "$2")
for b in "${builds[@]}"; do
  if [ ! -x "$b/bin/launch" ] || [ ! -x "$b/bin/store_bench" ]; then
    echo "run_store_ab: $b/bin/launch or $b/bin/store_bench missing: build" \
         "them (cmake --build $b --target launch store_bench)" >&2
    exit 2
  fi
done
rounds=${AB_ROUNDS:-5}
clients=${AB_CLIENTS:-"1 8 64 256"}
dialects=${AB_DIALECTS:-"tcpstore-v1 native"}
seconds=${AB_SECONDS:-2}
threads=${AB_THREADS:-1}
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
tmp=$(mktemp -d "${TMPDIR:-/tmp}/store-ab.XXXXXX")
pids=()

cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ports=()
for i in 0 1; do
  "${builds[$i]}/bin/launch" server --host 127.0.0.1 --port 0 \
    --threads "$threads" --max-conns-per-addr 65536 \
    --port-file "$tmp/port.$i" >"$tmp/server.$i.log" 2>&1 &
  pids+=($!)
  for ((t = 0; t < 200; t++)); do
    [ -s "$tmp/port.$i" ] && break
    sleep 0.05
  done
  [ -s "$tmp/port.$i" ] || { cat "$tmp/server.$i.log" >&2; exit 1; }
  ports+=("$(cat "$tmp/port.$i")")
done

echo "run_store_ab: A=${builds[0]} B=${builds[1]}, $rounds rounds, clients" \
     "$clients, $seconds s a run, --threads $threads, $(nproc) cores," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  for n in $clients; do
    for d in $dialects; do
      for i in 0 1; do
        out=$("${builds[$i]}/bin/store_bench" --endpoint "127.0.0.1:${ports[$i]}" \
                --dialect "$d" --clients "$n" --seconds "$seconds" \
                --warmup 0.5 --value-size 64 --server-pid "${pids[$i]}" |
              sed -n 's/^RESULT //p')
        echo "$r $i $out" | tee -a "$tmp/results" |
          sed 's/^\([0-9]*\) \([01]\) /round \1 build \2: /'
      done
    done
  done
done
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"

awk -v clients="$clients" -v dialects="$dialects" '
function med(key,   n, i, j, t, a) {
  n = cnt[key]
  for (i = 1; i <= n; i++) a[i] = v[key, i]
  for (i = 1; i <= n; i++)
    for (j = i + 1; j <= n; j++)
      if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
  if (n == 0) return 0
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function put(key, x) { v[key, ++cnt[key]] = x }
{
  r = $1; b = $2; d = ""; c = ""
  for (k = 3; k <= NF; k++) {
    split($k, kv, "=")
    f[kv[1]] = kv[2]
  }
  d = f["dialect"]; c = f["clients"]
  put(b SUBSEP c SUBSEP d SUBSEP "ops", f["ops_per_s"])
  put(b SUBSEP c SUBSEP d SUBSEP "p99", f["p99_us"])
  put(b SUBSEP c SUBSEP d SUBSEP "srv", f["server_cpu_us"])
  put(b SUBSEP c SUBSEP d SUBSEP "cli", f["client_cpu_us"])
  ops[r, b, c, d] = f["ops_per_s"]
  if (r > rounds) rounds = r
}
END {
  nd = split(dialects, D, " "); nc = split(clients, C, " ")
  print ""
  print "| clients, dialect | ops/s A → B | p99 µs A → B | server CPU/pair µs A → B | client CPU/pair µs A → B |"
  print "|---|---:|---:|---:|---:|"
  for (j = 1; j <= nd; j++)
    for (i = 1; i <= nc; i++) {
      c = C[i]; d = D[j]
      printf "| %s, %s | %.0f → %.0f | %.1f → %.1f | %.1f → %.1f | %.1f → %.1f |\n", c, d,
        med(0 SUBSEP c SUBSEP d SUBSEP "ops"), med(1 SUBSEP c SUBSEP d SUBSEP "ops"),
        med(0 SUBSEP c SUBSEP d SUBSEP "p99"), med(1 SUBSEP c SUBSEP d SUBSEP "p99"),
        med(0 SUBSEP c SUBSEP d SUBSEP "srv"), med(1 SUBSEP c SUBSEP d SUBSEP "srv"),
        med(0 SUBSEP c SUBSEP d SUBSEP "cli"), med(1 SUBSEP c SUBSEP d SUBSEP "cli")
    }
  if (nd >= 2) {
    print ""
    printf "%s / %s ops/s, median of the rounds'"'"' ratios (same build, same round):\n\n", D[2], D[1]
    print "| clients | A | B |"
    print "|---:|---:|---:|"
    for (i = 1; i <= nc; i++) {
      c = C[i]
      for (b = 0; b <= 1; b++) {
        key = "ratio" SUBSEP b SUBSEP c
        for (r = 1; r <= rounds; r++)
          if (ops[r, b, c, D[1]] > 0)
            put(key, ops[r, b, c, D[2]] / ops[r, b, c, D[1]])
      }
      printf "| %s | %.2fx | %.2fx |\n", c, med("ratio" SUBSEP 0 SUBSEP c),
        med("ratio" SUBSEP 1 SUBSEP c)
    }
  }
}' "$tmp/results"
