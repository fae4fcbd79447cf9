#!/bin/bash
# What a metrics collection costs the agent, NVML included (issue #23):
# bench/metrics_collect with the node's NVML, then without (the
# difference is NVML's share of time; its memory is the GPU sampler's,
# a child process: launcher/sampler.h). No HTTP server: the collection's
# own cost (run_metrics_bench.py measures the served one). Then where
# NVML's memory goes (bench/nvml_mem: VmRSS after its load, init, handles
# and queries; its resident mappings), with nvmlInit_v2's flags and with
# NVML_INIT_FLAG_NO_ATTACH.
#   bash bench/run_metrics_collect.sh BUILD_DIR [N [CKPT_DIR]]
# CKPT_DIR (default $TMPDIR): the disk whose diskstats row is read.
set -eu
B=${1:?usage: run_metrics_collect.sh BUILD_DIR [N]}
N=${2:-2000}
CKPT=${3:-${TMPDIR:-/tmp}}
bin=$B/bin/metrics_collect
[ -x "$bin" ] || { echo "no $bin: build the metrics_collect target" >&2; exit 127; }
# metrics_collect is not launch: the GPU sampler is $B/bin/launch.
export LAUNCH_GPU_SAMPLER=${LAUNCH_GPU_SAMPLER:-$B/bin/launch}
echo "== with NVML (libnvidia-ml.so.1), through the GPU sampler"
"$bin" "$N" "$CKPT"
echo "== without NVML"
LAUNCH_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "$bin" "$N" "$CKPT"
mem=$B/bin/nvml_mem
if [ -x "$mem" ]; then
  echo "== NVML's memory, nvmlInit_v2"
  "$mem" 0
  echo "== NVML's memory, nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH)"
  "$mem" 2
else
  echo "no $mem: build the nvml_mem target for NVML's memory by mapping"
fi
