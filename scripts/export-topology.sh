#!/bin/bash
# export-topology.sh - export this machine's topology as hwloc XML so that
# `launch topo --topology FILE` and the tests can plan for it elsewhere.
#
# usage: scripts/export-topology.sh [OUT.xml]
#        (default: tests/topo/h200-gpu-machine.xml next to this script)
#
# Prefers `launch topo --export`, which adds what hwloc leaves out and the
# planner uses: PCIe current/max link width and speed of every GPU and NIC,
# InfiniBand port rates and link layers. Falls back to `lstopo --of xml`
# (hwloc's own attributes only: the link-width warnings then compare
# identical devices instead of each device with its maximum).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../tests/topo/h200-gpu-machine.xml}
launch=${LAUNCH_BIN:-$here/../build/bin/launch}

if [ -x "$launch" ]; then
  "$launch" topo --export "$out"
elif command -v lstopo-no-graphics >/dev/null 2>&1; then
  lstopo-no-graphics --whole-io --of xml -f "$out"
  echo "wrote $out with lstopo (build launch first for PCIe link details)" >&2
elif command -v lstopo >/dev/null 2>&1; then
  lstopo --whole-io --of xml -f "$out"
  echo "wrote $out with lstopo (build launch first for PCIe link details)" >&2
else
  cat >&2 <<MSG
export-topology.sh: neither build/bin/launch nor lstopo is here.
Build launch (cmake -S . -B build && cmake --build build), or install hwloc
(apt-get install hwloc / dnf install hwloc), then run this again.
MSG
  exit 1
fi
# hwloc must read it back.
if command -v lstopo-no-graphics >/dev/null 2>&1; then
  lstopo-no-graphics -i "$out" --of console >/dev/null
fi
echo "$out"
