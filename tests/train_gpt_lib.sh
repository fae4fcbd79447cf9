# shellcheck shell=bash
# train_gpt_lib.sh - sourced by the train_gpt test scripts: the launcher
# (LAUNCH_BIN, default build/bin/launch) and train_gpt beside it, a
# temporary folder $T removed at exit, fail, and no rank variables of an
# outer launcher (a test run under launch or torchrun must not inherit them).
# A script that starts processes of its own replaces the EXIT trap.
LAUNCH=${LAUNCH_BIN:-build/bin/launch}
BIN=$(dirname "$LAUNCH")
TG=$BIN/train_gpt
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
unset RANK WORLD_SIZE LOCAL_RANK LAUNCH_RESUME_STEP LAUNCH_CKPT_DIR TRAIN_GPT_NO_PREFETCH
