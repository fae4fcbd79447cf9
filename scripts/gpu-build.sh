#!/bin/bash
# Build for the GPU machine (Ubuntu 24.04, no libuv, msgpack-c or libevent
# there): libuv, msgpack-c and libevent (--metrics-port) linked statically,
# into .gpu-build (git-ignored), which the device tool carries (bin/ and
# lib/: lib/libgpt_cudnn.so is cuDNN's attention, loaded at run time from
# ../lib beside the executables). CUDA, NCCL and cuDNN are loaded at run
# time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# cuDNN's attention needs the cudnn-frontend headers; without them the build
# runs the in-tree attention kernels
bash scripts/cudnn-frontend.sh || true
# the MLP's fused input gradient (model/cuda/mlp_sm90.cu) needs CUTLASS's
# headers; without them cuBLASLt's ways stay
bash scripts/cutlass.sh || true
cmake -S . -B .gpu-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAUNCH_STATIC_DEPS=ON >/dev/null
cmake --build .gpu-build -j "$(nproc)"
du -sh .gpu-build
