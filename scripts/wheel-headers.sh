#!/bin/bash
# Fetch a header-only C++ library that NVIDIA ships inside a PyPI wheel into
# DEST/include, once (DEST/VERSION records which). scripts/cudnn-frontend.sh
# and scripts/cutlass.sh call it; nothing in the product requires either.
#   scripts/wheel-headers.sh PACKAGE VERSION PREFIX MARKER DEST
# PREFIX: the headers' folder inside the wheel (it becomes DEST/include);
# MARKER: a header whose presence means they are there.
# Needs python3 with pip (or the venv of scripts/venv.sh) and PyPI.
set -euo pipefail
if [ $# -ne 5 ]; then
  echo "usage: wheel-headers.sh PACKAGE VERSION PREFIX MARKER DEST" >&2
  exit 2
fi
PKG=$1 VERSION=$2 PREFIX=$3 MARKER=$4 DEST=$5
if [ -f "$DEST/include/$MARKER" ] && [ -f "$DEST/VERSION" ] &&
   [ "$(cat "$DEST/VERSION")" = "$VERSION" ]; then
  exit 0
fi
PY=python3
[ -x /var/cache/launch/venv/bin/python ] && PY=/var/cache/launch/venv/bin/python
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
if ! "$PY" -m pip download --quiet --no-deps --dest "$T" "$PKG==$VERSION" 2>"$T/err"; then
  echo "wheel-headers.sh: could not download $PKG==$VERSION from PyPI:" >&2
  tail -3 "$T/err" >&2
  exit 1
fi
mkdir -p "$DEST"
"$PY" - "$T" "$DEST" "$PREFIX" <<'PY'
import glob, os, shutil, sys, zipfile
src, dest, prefix = sys.argv[1], sys.argv[2], sys.argv[3].rstrip("/") + "/"
whl = glob.glob(os.path.join(src, "*.whl"))[0]
inc = os.path.join(dest, "include")
n = 0
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if not name.startswith(prefix) or name.endswith("/"):
            continue
        rel = name[len(prefix):]
        if ".." in rel.split("/"):
            sys.exit(f"wheel-headers.sh: {name}: a path that leaves the folder")
        out = os.path.join(inc, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(name) as f, open(out, "wb") as g:
            shutil.copyfileobj(f, g)
        n += 1
print(f"wheel-headers.sh: {n} headers from {os.path.basename(whl)} in {inc}")
PY
echo "$VERSION" >"$DEST/VERSION"
