#!/bin/bash
# CUDA graphs (GPT_CUDA_GRAPH=1) against eager steps on one GPU, issue #7:
# the graph test, then bench/gpt_bench at gpt2-124m (B 16, T 1024, bf16)
# alternating eager and graphs ROUNDS times (so that clock and thermal
# drift fall on both), then train_gpt under launch both ways. Each part is
# skipped when fewer seconds than its limit are left of BUDGET_S. Results
# in OUT (graph_ab.txt); the last lines are a table of the medians.
# usage: bench/gpt_graph_ab.sh BINDIR [OUT]   (BINDIR holds gpt_bench,
#        launch, train_gpt, and test_gpt_cuda_graph there or in ../tests)
# environment: ROUNDS (3), STEPS (30), BUDGET_S (240)
set -u
DIR=${1:?usage: gpt_graph_ab.sh BINDIR [OUT]}
OUT=${2:-${OUT:-/tmp/out}}
BUDGET=${BUDGET_S:-240}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-30}
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_lib.sh"
{
  nvidia-smi -L
  TEST=$DIR/test_gpt_cuda_graph
  [ -x "$TEST" ] || TEST=$DIR/../tests/test_gpt_cuda_graph
  step "test_gpt_cuda_graph" 60 "$TEST"
  for r in $(seq 1 "$ROUNDS"); do
    step "gpt_bench eager (round $r)" 40 env GPT_CUDA_GRAPH=0 "$DIR/gpt_bench" --profile 0 \
      --steps "$STEPS"
    step "gpt_bench graph (round $r)" 40 env GPT_CUDA_GRAPH=1 "$DIR/gpt_bench" --profile 0 \
      --steps "$STEPS"
  done
  for g in 0 1; do
    step "train_gpt gpt2-124m GPT_CUDA_GRAPH=$g" 60 env GPT_CUDA_GRAPH=$g "$DIR/launch" \
      --standalone --nproc-per-node 1 "$DIR/train_gpt" --device cuda --preset gpt2-124m \
      --vocab 50257 --batch 16 --seq-len 1024 --steps 40 --log-every 10 --val-every 0
  done
} >"$OUT/graph_ab.txt" 2>&1
grep "^== \|^rc=\|^RESULT\|^ms/step\|^CUDA graphs\|FAIL\|PASS\|^step \|gpt_cuda call" \
  "$OUT/graph_ab.txt"
# the medians of the rounds' medians, eager against graphs
awk '/^RESULT /{g = 0; t = 0; ms = 0
       for (i = 2; i <= NF; i++) { split($i, kv, "=")
         if (kv[1] == "graph") g = kv[2]; if (kv[1] == "tok_s") t = kv[2]; if (kv[1] == "ms") ms = kv[2] }
       n[g]++; tok[g, n[g]] = t; msv[g, n[g]] = ms }
     function med(a, g, k,   i, j, x, v) { for (i = 1; i <= k; i++) v[i] = a[g, i]
       for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
       return v[int((k + 1) / 2)] }
     END { print "\n| steps | runs | tokens/s (median) | ms/step (median) |\n|---|---:|---:|---:|"
       for (g = 0; g <= 1; g++) if (n[g] > 0)
         printf "| %s | %d | %.0f | %.3f |\n", g ? "CUDA graphs" : "eager", n[g], med(tok, g, n[g]), med(msv, g, n[g]) }' \
  "$OUT/graph_ab.txt"
