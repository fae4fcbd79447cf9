#!/bin/bash
# Fetch NVIDIA's cudnn-frontend headers (header-only C++, MIT licence; the
# nvidia-cudnn-frontend wheel on PyPI carries them) into
# /var/cache/launch/cudnn-frontend/include, or DEST, once. The CUDA
# backend's libgpt_cudnn.so (cuDNN's fused attention, model/cuda/
# attention_cudnn.h) is built where they and cuDNN 9 are found; nothing else
# needs them, and a build without them runs the in-tree attention kernels.
#   scripts/cudnn-frontend.sh [DEST]
set -euo pipefail
VERSION=1.32.0 # the headers the H200's figures were taken with (docs/cuda.md)
bash "$(dirname "$0")/wheel-headers.sh" nvidia-cudnn-frontend "$VERSION" include \
  cudnn_frontend.h "${1:-/var/cache/launch/cudnn-frontend}" || {
  echo "cudnn-frontend.sh: the build goes on without cuDNN's attention" >&2
  exit 1
}
