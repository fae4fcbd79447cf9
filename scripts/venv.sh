#!/bin/bash
# Build (once per machine) and print the path of a virtual environment with
# current PyTorch and the trainers' libraries from PyPI: the tests run the
# real libraries users run today beside Debian's python3-torch 1.13.
#   scripts/venv.sh            build if missing, print the venv's directory
#   LAUNCH_VENV=DIR            use this directory (default: /var/cache/launch/venv,
#                              or ~/.cache/launch/venv when not root)
# A venv whose stamp matches this script's package list is reused as it is.
# Exit 0 with the path on stdout; exit 1 (and a line on stderr) when PyPI or
# python3-venv is missing: the tests that need it then skip with that reason.
set -euo pipefail

PKGS=(torch transformers accelerate "deepspeed" megatron-core tensorboard
      numpy safetensors)

if [ -n "${LAUNCH_VENV:-}" ]; then
  dir=$LAUNCH_VENV
elif [ "$(id -u)" -eq 0 ]; then
  dir=/var/cache/launch/venv
else
  dir=${XDG_CACHE_HOME:-$HOME/.cache}/launch/venv
fi
stamp="$dir/.launch-stamp"
want="v1 ${PKGS[*]}"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dir/bin/python" ]; then
  echo "$dir"
  exit 0
fi

py=/usr/bin/python3
if ! "$py" -c 'import ensurepip' 2>/dev/null; then
  echo "venv.sh: $py has no venv support (apt-get install python3-venv)" >&2
  exit 1
fi
mkdir -p "$(dirname "$dir")"
lock="$(dirname "$dir")/.venv.lock"
exec 9>"$lock"
flock 9
# Another run may have finished it while we waited for the lock.
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$dir"
  exit 0
fi
echo "venv.sh: building $dir (once per machine): ${PKGS[*]}" >&2
"$py" -m venv "$dir" >&2
"$dir/bin/pip" install -q --upgrade pip wheel setuptools >&2
# DeepSpeed's sdist imports torch while it builds: torch first.
"$dir/bin/pip" install -q torch >&2
DS_BUILD_OPS=0 "$dir/bin/pip" install -q "${PKGS[@]}" >&2 || {
  echo "venv.sh: pip install failed; tests that need current PyTorch will skip" >&2
  exit 1
}
echo "$want" > "$stamp"
echo "$dir"
