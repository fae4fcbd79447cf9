#!/bin/bash
# Install what is missing, build, and run the main job on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"

# The main job: GPT-2 training (train_gpt --preset tiny, docs/runtime.md)
# under launch --standalone: one rank per GPU (NCCL, bootstrapped by
# launch's store) or, without a GPU, four ranks on the CPU (the all-reduce
# over TCP between them, in a fixed order).
if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  exec build/bin/launch --standalone --nproc-per-node gpu build/bin/train_gpt --preset tiny
fi
exec build/bin/launch --standalone --nproc-per-node 4 build/bin/train_gpt --preset tiny
