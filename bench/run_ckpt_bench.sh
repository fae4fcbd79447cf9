#!/usr/bin/env bash
# run_ckpt_bench.sh - checkpoint write bandwidth: launch's writer
# (bench/ckpt_bench.c: SHA-256 while writing, fsync, rename, manifest)
# against the disk's own, `dd conv=fsync` of the same size into the same
# directory, alternating so that both see the same disk state.
#
#   bench/run_ckpt_bench.sh [DIR]        (default: a temp dir under $TMPDIR)
# environment:
#   BENCH_SIZE_MB    checkpoint size in MiB (default 1024)
#   BENCH_RUNS       rounds (default 5; medians reported); who goes first
#                    alternates
#   BENCH_SETTLE     seconds of rest after a sync before each run (default 3)
#   BENCH_BUILD_DIR  an existing build (default build-bench/, an optimised
#                    build without sanitizers, configured and built here)
#
# Prints each round, then a markdown table: dd through the page cache and
# with O_DIRECT (MB/s, both with the final fsync), ours (sync) and its ratio
# to the better dd, ours in the background (MB/s and the time the trainer
# is blocked), and one core's SHA-256 speed (the bound of a one-pass
# writer that hashes on one thread).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
size_mb=${BENCH_SIZE_MB:-1024}
runs=${BENCH_RUNS:-5}
build=${BENCH_BUILD_DIR:-$root/build-bench}
base=${1:-${TMPDIR:-/tmp}}
tmp=$(mktemp -d "$base/ckpt-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ ! -x "$build/bin/ckpt_bench" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLAUNCH_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" --target ckpt_bench >/dev/null
fi

dd_mbs=()
direct_mbs=()
ours=()
# dd writes the checkpoint's size in 8 MiB blocks (1 MiB ones when the
# size is no multiple of 8).
if [ $((size_mb % 8)) -eq 0 ]; then
  dd_bs=(bs=8M count=$((size_mb / 8)))
else
  dd_bs=(bs=1M count="$size_mb")
fi
# dd reports bytes/s including the final fsync (conv=fsync). OUT $mbs.
dd_once() {
  local out bytes secs
  out=$(dd if=/dev/zero of="$tmp/dd.bin" "${dd_bs[@]}" \
        conv=fsync "$@" 2>&1 | tail -1)
  rm -f "$tmp/dd.bin"
  bytes=$(echo "$out" | awk '{print $1}')
  if [ "$bytes" != $((size_mb << 20)) ]; then
    echo "run_ckpt_bench: dd wrote ${bytes:-nothing} bytes, not $((size_mb << 20)): $out" >&2
    exit 1
  fi
  secs=$(echo "$out" | sed -n 's/.*copied, \([0-9.e+-]*\) s.*/\1/p')
  mbs=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.1f", b / s / 1e6 }')
}
# Through the page cache as a plain program writes, and with O_DIRECT
# (the device's streaming rate, no page cache in the way).
run_dd() {
  dd_once
  dd_mbs+=("$mbs")
  settle
  dd_once oflag=direct
  direct_mbs+=("$mbs")
}
run_ours() {
  line=$("$build/bin/ckpt_bench" "$tmp/ckpt" --size $((size_mb << 20)) \
         --reps 1 --buffers 3 2>/dev/null)
  rm -rf "$tmp/ckpt"
  ours+=("$line")
}
settle() { sync; sleep "${BENCH_SETTLE:-3}"; }
for r in $(seq "$runs"); do
  # Alternate who goes first: freed blocks (discard, thin provisioning)
  # make the write right after a delete faster or slower on some disks.
  if [ $((r % 2)) -eq 1 ]; then
    settle; run_dd; settle; run_ours
  else
    settle; run_ours; settle; run_dd
  fi
  echo "round $r: dd ${dd_mbs[-1]} MB/s, dd oflag=direct ${direct_mbs[-1]} MB/s; ours: $line"
done

med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
  if (NR % 2) print v[(NR + 1) / 2]; else printf "%.4g\n", (v[NR/2] + v[NR/2 + 1]) / 2 }'; }
field() { printf '%s\n' "${ours[@]}" | sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
dd_m=$(med "${dd_mbs[@]}")
direct_m=$(med "${direct_mbs[@]}")
best=$(awk -v a="$dd_m" -v b="$direct_m" 'BEGIN { print (a > b ? a : b) }')
sync_m=$(med $(field sync_mbs))
async_m=$(med $(field async_mbs))
stall_m=$(med $(field async_stall_ms))
sha_m=$(med $(field sha_mbs))
echo
echo "| size | dd conv=fsync MB/s | dd oflag=direct conv=fsync MB/s | ours (sync) MB/s | ours / the better dd | ours (background) MB/s | trainer blocked | SHA-256 one core MB/s |"
echo "|---|---|---|---|---|---|---|---|"
printf '| %d MiB | %s | %s | %s | %s %% | %s | %s ms | %s |\n' "$size_mb" "$dd_m" \
  "$direct_m" "$sync_m" \
  "$(awk -v a="$sync_m" -v b="$best" 'BEGIN { printf "%.0f", 100 * a / b }')" \
  "$async_m" "$stall_m" "$sha_m"
