# shellcheck shell=bash
# train_gpt_zero_lib.sh - sourced by tests/test_train_gpt_zero*.sh: the
# launcher and train_gpt (LAUNCH_BIN), a temporary folder $T removed at
# exit, fail, and the helpers below. The sourcing script sets M, the
# train_gpt flags of every run.
LAUNCH=${LAUNCH_BIN:-build/bin/launch}
BIN=$(dirname "$LAUNCH")
TG=$BIN/train_gpt
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
unset RANK WORLD_SIZE LOCAL_RANK LAUNCH_RESUME_STEP LAUNCH_CKPT_DIR TRAIN_GPT_NO_PREFETCH

# run NAME RANKS [train_gpt flags...]: under launch; log $T/NAME.log, the
# final parameters $T/NAME.bin
run() {
  local name=$1 n=$2
  shift 2
  "$LAUNCH" --standalone --nproc-per-node "$n" -q "$TG" "${M[@]}" "$@" \
    --dump-params "$T/$name.bin" >"$T/$name.log" 2>&1 ||
    { cat "$T/$name.log"; fail "$name"; }
}
# The --zero of the run that saved a checkpoint shard: the header's int32
# after magic[8] and 11 int32.
zero_of() { od -An -t d4 -j 52 -N 4 "$1" | tr -d ' '; }
# The AdamW state (MiB) a log reports.
mib() { sed -n 's/.*AdamW state: \([0-9.]*\) MiB.*/\1/p' "$1" | head -1; }
