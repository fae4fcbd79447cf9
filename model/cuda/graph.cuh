/* graph.cuh - a piece of the training step captured once as a CUDA graph
 * and replayed, so that its ~100 kernels and cuBLASLt products start
 * back to back instead of one host launch each (issue #7: ~0.5 ms of gaps
 * a step at gpt2-124m). Internal to model/cuda/.
 *
 * The work is a function that enqueues on one stream (and on side streams
 * it forks from that stream and joins back with events). It must be the
 * same every time it runs with the same key: fixed device addresses, host
 * copies only from pinned buffers, no host read, no synchronisation, no
 * allocation, no first-use tuning. Scalars that are kernel arguments are
 * part of the key; when the key changes the work is captured again.
 *
 * Capture is thread-local (cudaStreamCaptureModeThreadLocal): a capture-
 * unsafe call of this thread fails instead of running, and gives the
 * capture up. While capturing, failures are not reported (gc_quiet,
 * common.cuh): the first one is what gc_graph_run() returns in `why`, and
 * the caller runs the work eagerly, where a real failure is reported. */
#ifndef GPT_CUDA_GRAPH_CUH
#define GPT_CUDA_GRAPH_CUH

#include <stddef.h>
#include <stdint.h>

#include "common.cuh"

typedef struct gc_graph_s {
  cudaGraphExec_t exec; /* NULL until captured */
  uint64_t key;
  long captures, launches;
} gc_graph_t;

/* Runs fn(arg)'s work on stream s: replays the graph captured for `key`,
 * or captures fn's work first (no graph yet, or another key), instantiates
 * and launches it. fault != 0 (tests) makes the capture end with a
 * capture-unsafe call, as a capture-unsafe kernel launcher would.
 * RET 0: the work is enqueued on s. -EAGAIN: the capture failed, nothing
 * was enqueued; why[n] says what failed; the caller runs fn(arg) itself.
 * Another negative code: launching the graph failed (reported). */
int gc_graph_run(gc_graph_t *g, cudaStream_t s, uint64_t key, int (*fn)(void *), void *arg,
                 int fault, char *why, size_t n);
/* Drops the graph (the next run captures again). */
void gc_graph_reset(gc_graph_t *g);

#endif /* GPT_CUDA_GRAPH_CUH */
