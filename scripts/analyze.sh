#!/usr/bin/env bash
# analyze.sh - clang's static analyzer (scan-build) over the C sources, its
# reports compared with scripts/analyze.baseline (those read and found not to
# be bugs, each with the reason). Not part of CI's pass (2.5 minutes on 2
# cores); run it before a change to the C code's error paths or ownership.
#
#   scripts/analyze.sh            build in a fresh directory, analyze, compare
# environment:
#   ANALYZE_KEEP=1   keep the HTML reports (the directory is printed)
#
# A report is named by "file | function | bug type": line numbers move, those
# do not. Exit status: 0 when every report is in the baseline, 1 when a new
# one appears (fix it, or add it to the baseline with the reason it is not a
# bug), 2 when scan-build is missing (apt-get install clang-tools).
# Dead stores (deadcode.DeadStores) are not checked: `if ((rc = f()) != 0)`
# with rc unread afterwards is this code base's style.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
baseline=$root/scripts/analyze.baseline
if ! command -v scan-build >/dev/null 2>&1; then
  echo "analyze: scan-build not found (apt-get install clang-tools)" >&2
  exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/launch-analyze.XXXXXX")
cleanup() {
  if [ -z "${ANALYZE_KEEP:-}" ]; then
    case $work in */launch-analyze.?*) rm -rf -- "$work" ;; esac
  fi
}
trap cleanup EXIT

sb=(scan-build --use-cc=clang -disable-checker deadcode.DeadStores)
"${sb[@]}" cmake -S "$root" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DLAUNCH_CUDA=OFF -DLAUNCH_BUILD_TESTS=OFF >"$work/cmake.log" 2>&1 || {
  cat "$work/cmake.log" >&2
  exit 1
}
"${sb[@]}" -o "$work/report" ninja -C "$work/build" -j "$(nproc)" >"$work/build.log" 2>&1 || {
  tail -20 "$work/build.log" >&2
  exit 1
}

# "file | function | type" of every report, sorted, without repeats.
found=$work/found.txt
: >"$found"
for f in "$work"/report/*/report-*.html; do
  [ -e "$f" ] || continue
  sed -n -e 's/^<!-- BUGFILE \(.*\) -->$/F \1/p' -e 's/^<!-- FUNCTIONNAME \(.*\) -->$/N \1/p' \
    -e 's/^<!-- BUGTYPE \(.*\) -->$/T \1/p' "$f" |
    awk -v root="$root/" '/^F /{f=substr($0,3); sub("^" root, "", f)}
                          /^N /{n=substr($0,3)} /^T /{t=substr($0,3)}
                          END{print f " | " n " | " t}'
done | sort -u >"$found"

known=$work/known.txt
sed -e 's/[[:space:]]*#.*$//' -e '/^[[:space:]]*$/d' "$baseline" | sort -u >"$known"
new=$(comm -23 "$found" "$known")
gone=$(comm -13 "$found" "$known")
echo "analyze: $(wc -l <"$found") distinct reports, $(wc -l <"$known") in the baseline"
if [ -n "$gone" ]; then
  echo "analyze: in the baseline but no longer reported (remove them):"
  echo "$gone" | sed 's/^/  /'
fi
if [ -n "${ANALYZE_KEEP:-}" ]; then
  echo "analyze: reports kept in $work/report"
fi
if [ -n "$new" ]; then
  echo "analyze: NEW reports (fix, or add to scripts/analyze.baseline with the reason):"
  echo "$new" | sed 's/^/  /'
  exit 1
fi
exit 0
