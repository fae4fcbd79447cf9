#!/bin/bash
# One environment switch of train_gpt's CUDA backend A/B/... in the whole
# training step, on one GPU, in one call (issue #26): the same gpt_bench
# binary with VAR set to each of VALUES ("-": unset), alternating ROUNDS
# times at each size so that clock and thermal drift fall on all of them;
# gpt2-124m and 350m B16, 774m B8, T 1024, bf16. Prints each run's lines
# that match SHOW, tokens/s and memory, and the GPU's mean SM clock and power
# while it ran (gpu_lib.sh smi_done); then the figures by value.
# usage: bench/gpt_env_ab.sh PATH/TO/gpt_bench VAR "VALUE..."
#        bench/gpt_env_ab.sh - BIN "PATH/TO/gpt_bench..."  (two builds A/B:
#        VAR BIN names the binaries themselves; the first argument is unused)
#        bench/gpt_env_ab.sh PATH/TO/gpt_bench SPLIT "1 2 4"  (the size's batch
#        as K micro-batches of B/K a step, gradient accumulated: --accum K)
# environment: SIZES ("124m 350m 774m"), ROUNDS (2), STEPS (50), BUDGET_S (300),
#              SHOW (a grep -E pattern for the backend's lines: "tokens/s")
set -u
BIN=${1:?usage: gpt_env_ab.sh PATH/TO/gpt_bench VAR \"VALUE...\"}
VAR=${2:?usage: gpt_env_ab.sh PATH/TO/gpt_bench VAR \"VALUE...\"}
VALUES=${3:?usage: gpt_env_ab.sh PATH/TO/gpt_bench VAR \"VALUE...\"}
BUDGET=${BUDGET_S:-300} ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-50} SHOW=${SHOW:-tokens/s}
. "$(dirname "$0")/gpu_lib.sh"
T=$(mktemp -d)
for size in ${SIZES:-124m 350m 774m}; do
  gpt_shape "$size" || exit 2
  for r in $(seq "$ROUNDS"); do
    for v in $VALUES; do
      bin=$BIN args=("${shape[@]}")
      if [ "$VAR" = BIN ]; then e=(); bin=$v
      elif [ "$VAR" = SPLIT ]; then
        e=(); gpt_shape "$size" "$v" || exit 2; args=("${shape[@]}")
      elif [ "$v" = - ]; then e=(-u "$VAR"); else e=("$VAR=$v"); fi
      smi_watch "$T/smi.txt"
      step "$size $VAR=$v round $r" 90 env "${e[@]}" "$bin" "${args[@]}" --steps "$STEPS" \
        --profile 0 >"$T/run.txt"
      smi_done "$T/smi.txt" >>"$T/run.txt"
      grep -E "$SHOW|tokens/s|^SMI" "$T/run.txt" | grep -v "^backend after" | cut -c1-400
      awk -v s="$size" -v m="$VAR=$v" '/^tokens\/s:/ {t = $2} /^SMI/ {sub(/^SMI /, ""); x = " (" $1 " " $2 ")"}
        END {if (t != "") print s, m, t x}' "$T/run.txt" >>"$T/all.txt"
    done
  done
done
echo "== by value (tokens/s, in run order)"
awk '{k=$1" "$2; sep="; "; if (!(k in v)) {o[n++]=k; sep=" "}; $1=$2=""; sub(/^ +/, ""); v[k]=v[k] sep $0}
  END {for (i=0;i<n;i++) print o[i] ":" v[o[i]]}' "$T/all.txt"
rm -rf "$T"
