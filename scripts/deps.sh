#!/bin/bash
# Install what launch needs from Debian (12 "bookworm" or later), once.
#   scripts/deps.sh          build dependencies
#   scripts/deps.sh --test   plus the real peers the tests run against
# Idempotent: packages already present are not fetched again.
set -euo pipefail

BUILD_PKGS=(build-essential cmake ninja-build pkg-config git
            libuv1-dev libmsgpack-dev libssl-dev libhwloc-dev libnuma-dev
            libevent-dev libprotobuf-c-dev protobuf-c-compiler
            libcurl4-openssl-dev)
TEST_PKGS=(python3 python3-torch hwloc numactl iproute2 procps clang
           libclang-rt-14-dev slurm-wlm munge python3-yaml util-linux
           prometheus chromium nftables etcd-server iptables
           libnetfilter-queue-dev)

want=("${BUILD_PKGS[@]}")
if [ "${1:-}" = "--test" ]; then
  want+=("${TEST_PKGS[@]}")
fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then
    SUDO="sudo"
  else
    echo "deps.sh: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Some optional peers may be missing from a mirror: install what exists.
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  for p in "${missing[@]}"; do
    $SUDO apt-get install -y -qq --no-install-recommends "$p" >/dev/null \
      || echo "deps.sh: could not install $p (tests that need it will skip)" >&2
  done
fi
