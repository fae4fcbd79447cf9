#!/bin/bash
# Fetch NVIDIA's CUTLASS headers (header-only C++, BSD-3-Clause; the
# nvidia-cutlass wheel on PyPI carries them) into
# /var/cache/launch/cutlass/include, or DEST, once. The CUDA backend's
# fused MLP gradient (model/cuda/mlp_sm90.cu) and lab/cuda's mlp_cutlass are
# built where they are found; nothing requires them.
#   scripts/cutlass.sh [DEST]
set -euo pipefail
VERSION=4.2.0.0
bash "$(dirname "$0")/wheel-headers.sh" nvidia-cutlass "$VERSION" \
  cutlass_library/source/include cutlass/cutlass.h "${1:-/var/cache/launch/cutlass}"
