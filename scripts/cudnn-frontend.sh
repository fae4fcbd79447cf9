#!/bin/bash
# Fetch NVIDIA's cudnn-frontend headers (header-only C++, MIT licence; the
# nvidia-cudnn-frontend wheel on PyPI carries them) into
# /var/cache/launch/cudnn-frontend/include, or DEST, once. The CUDA
# backend's libgpt_cudnn.so (cuDNN's fused attention, model/cuda/
# attention_cudnn.h) is built where they and cuDNN 9 are found; nothing else
# needs them, and a build without them runs the in-tree attention kernels.
#   scripts/cudnn-frontend.sh [DEST]
# Needs python3 with pip (or the venv of scripts/venv.sh) and PyPI.
set -euo pipefail
VERSION=1.32.0 # the headers the H200's figures were taken with (docs/cuda.md)
DEST=${1:-/var/cache/launch/cudnn-frontend}
if [ -f "$DEST/include/cudnn_frontend.h" ] && [ -f "$DEST/VERSION" ] &&
   [ "$(cat "$DEST/VERSION")" = "$VERSION" ]; then
  exit 0
fi
PY=python3
[ -x /var/cache/launch/venv/bin/python ] && PY=/var/cache/launch/venv/bin/python
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if ! "$PY" -m pip download --quiet --no-deps --dest "$T" \
    "nvidia-cudnn-frontend==$VERSION" 2>"$T/err"; then
  echo "cudnn-frontend.sh: could not download nvidia-cudnn-frontend==$VERSION from PyPI:" >&2
  tail -3 "$T/err" >&2
  echo "cudnn-frontend.sh: the build goes on without cuDNN's attention" >&2
  exit 1
fi
mkdir -p "$DEST"
"$PY" - "$T" "$DEST" <<'PY'
import glob, os, sys, zipfile
src, dest = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(src, "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("include/")]
    for n in names:
        z.extract(n, dest)
print(f"cudnn-frontend.sh: {len(names)} headers from {os.path.basename(whl)} in {dest}/include")
PY
echo "$VERSION" >"$DEST/VERSION"
