# shellcheck shell=bash
# train_gpt_zero_lib.sh - sourced by tests/test_train_gpt_zero*.sh: what
# train_gpt_lib.sh gives ($LAUNCH, $TG, $T, fail) and the helpers below.
# The sourcing script sets M, the train_gpt flags of every run.
. "$(dirname "${BASH_SOURCE[0]}")/train_gpt_lib.sh"

# run NAME RANKS [train_gpt flags...]: under launch; log $T/NAME.log, the
# final parameters $T/NAME.bin. RUN_WRAP, when set, is put before train_gpt
# (tests/gpu_share_lib.sh's wrapper).
run() {
  local name=$1 n=$2
  shift 2
  "$LAUNCH" --standalone --nproc-per-node "$n" -q ${RUN_WRAP:+"$RUN_WRAP"} "$TG" "${M[@]}" "$@" \
    --dump-params "$T/$name.bin" >"$T/$name.log" 2>&1 ||
    { cat "$T/$name.log"; fail "$name"; }
}
# The --zero of the run that saved a checkpoint shard: the header's int32
# after magic[8] and 11 int32.
zero_of() { od -An -t d4 -j 52 -N 4 "$1" | tr -d ' '; }
# The AdamW state (MiB) a log reports.
mib() { sed -n 's/.*AdamW state: \([0-9.]*\) MiB.*/\1/p' "$1" | head -1; }
