#!/usr/bin/env bash
# fuzz-short.sh - build the libFuzzer targets with clang and run each one for a
# bounded time on its corpus. CI calls it; so can anyone before a commit.
#
#   scripts/fuzz-short.sh [TARGET...]      (default: every target of
#                                          fuzz/CMakeLists.txt)
# environment:
#   FUZZ_SECONDS    seconds per target (default 30)
#   FUZZ_BUILD_DIR  clang build directory (default build-fuzz/)
#   FUZZ_WORK_DIR   where new inputs accumulate (default fuzz/corpus-work/,
#                   ignored by git; the seeds in fuzz/corpus/ stay untouched)
#   FUZZ_CC         the clang to use (default clang)
#   FUZZ_ARGS       extra libFuzzer flags, e.g. "-jobs=2 -workers=2"
#   FUZZ_JOBS       targets run at once (default nproc)
#
# Each target runs with -max_len from fuzz/fuzz_<target>.options. Exit status:
# 0 when no target crashed (or clang is missing: then nothing runs), 1 when
# one did: its input is copied into fuzz/crashers/<target>/ so that ctest's
# replay_<target> replays it from then on; commit it with the fix.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${FUZZ_SECONDS:-30}
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
work=${FUZZ_WORK_DIR:-$root/fuzz/corpus-work}
cc=${FUZZ_CC:-clang}
read -r -a extra <<<"${FUZZ_ARGS:-}"

if ! command -v "$cc" >/dev/null 2>&1; then
  echo "fuzz-short: $cc not found; fuzzing skipped (install clang to fuzz)"
  exit 0
fi
case $seconds in
  '' | *[!0-9]*) echo "fuzz-short: FUZZ_SECONDS='$seconds' is not a number" >&2
                 exit 2 ;;
esac

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(sed -n 's/^launch_fuzz_target(\([a-z0-9_]*\).*/\1/p' \
                           "$root/fuzz/CMakeLists.txt")
fi

generator=()
if command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
# -O1 with asserts kept (no NDEBUG): the usual libFuzzer build.
mkdir -p "$work"
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=$cc cmake -S "$root" -B "$build" "${generator[@]}" -DLAUNCH_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
    >"$work/configure.log" 2>&1 || {
    cat "$work/configure.log" >&2
    echo "fuzz-short: configuring $build failed" >&2
    exit 2
  }
fi
build_targets=()
for t in "${targets[@]}"; do
  build_targets+=(--target "fuzz_$t")
done
cmake --build "$build" "${build_targets[@]}" >/dev/null || {
  echo "fuzz-short: building the fuzz targets failed" >&2
  cmake --build "$build" "${build_targets[@]}" >&2 || true
  exit 2
}

# One target a core (FUZZ_JOBS, default nproc): the same seconds for every
# target, in a fraction of the wall time. Each target's report is printed
# in the list's order once all have run.
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $jobs in
  '' | *[!0-9]* | 0) echo "fuzz-short: FUZZ_JOBS='$jobs' is not a positive number" >&2
                     exit 2 ;;
esac

# fuzz_one TARGET: runs it, writes its report to $work/TARGET.report and
# exits 1 when it crashed.
fuzz_one() {
  local t=$1 bin=$build/bin/fuzz_$1 seeds=$root/fuzz/corpus/$1
  local crashers=$root/fuzz/crashers/$1 art=$work/artifacts/$1 log=$work/$1.log
  local report=$work/$1.report max_len rc execs cov found f
  max_len=$(sed -n 's/^max_len *= *\([0-9]*\).*/\1/p' \
              "$root/fuzz/fuzz_$t.options" 2>/dev/null || true)
  max_len=${max_len:-4096}
  mkdir -p "$work/$t" "$art" "$crashers"
  rm -f "$art"/*
  echo "fuzz-short: $t for ${seconds}s (max_len $max_len)" >"$report"
  set +e
  # New inputs go to the first directory (work); the seeds are read only.
  "$bin" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/" \
    "${extra[@]}" "$work/$t" "$seeds" "$crashers" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" |
            tail -1 || true)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  echo "fuzz-short: $t: ${execs:-?} runs, ${cov:-no coverage line}, exit $rc" >>"$report"
  found=0
  for f in "$art"/*; do
    [ -f "$f" ] || continue
    found=1
    cp "$f" "$crashers/"
    echo "fuzz-short: $t CRASHED: saved fuzz/crashers/$t/$(basename "$f")" >>"$report"
  done
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    { grep -E 'ERROR|runtime error|invariant failed|SUMMARY' "$log" | head -20 || true
      echo "fuzz-short: $t failed; full log: $log"
      echo "fuzz-short: fix the bug, then commit the input in fuzz/crashers/$t/" \
           "with the fix (ctest's replay_$t replays it forever)"
    } >>"$report"
    return 1
  fi
  return 0
}

echo "fuzz-short: ${#targets[@]} targets, ${seconds}s each, $jobs at a time"
failed=0
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
for t in "${targets[@]}"; do
  cat "$work/$t.report"
done
exit $failed
