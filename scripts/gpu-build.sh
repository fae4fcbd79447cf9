#!/bin/bash
# Build for the GPU machine (Ubuntu 24.04, no libuv, msgpack-c or libevent
# there): libuv, msgpack-c and libevent (--metrics-port) linked statically,
# into .gpu-build (git-ignored), which the device tool carries. CUDA and
# NCCL are loaded at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B .gpu-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAUNCH_STATIC_DEPS=ON >/dev/null
cmake --build .gpu-build -j "$(nproc)"
du -sh .gpu-build
