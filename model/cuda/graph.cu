/* graph.cu - capture once, replay after (graph.cuh). */
#include <stdio.h>
#include <string.h>

#include "graph.cuh"

void gc_graph_reset(gc_graph_t *g) {
  if (g->exec)
    cudaGraphExecDestroy(g->exec);
  g->exec = NULL;
}

/* Why the capture failed: the first failure seen while quiet, else the
 * capture's own error, else the work's return code. */
static int capture_failed(const char *call, cudaError_t e, int rc, char *why, size_t n) {
  if (gc_quiet_what[0])
    snprintf(why, n, "%s", gc_quiet_what);
  else if (e != cudaSuccess)
    snprintf(why, n, "%s: %s", call, cudaGetErrorString(e));
  else
    snprintf(why, n, "the captured work returned %d", rc);
  (void)cudaGetLastError(); /* capture errors are not sticky: clear it */
  return -EAGAIN;
}

int gc_graph_run(gc_graph_t *g, cudaStream_t s, uint64_t key, int (*fn)(void *), void *arg,
                 int fault, char *why, size_t n) {
  if (g->exec && g->key == key) {
    GC_CUDA(cudaGraphLaunch(g->exec, s));
    g->launches++;
    return 0;
  }
  gc_graph_reset(g);
  cudaGraph_t graph = NULL;
  gc_quiet = 1;
  gc_quiet_what[0] = '\0';
  /* Thread-local: this thread's capture-unsafe calls (a synchronisation,
   * an allocation, a host read) fail and invalidate the capture instead of
   * running at capture time; other threads (NCCL's, the runtime's) are
   * not affected. */
  cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    gc_quiet = 0;
    return capture_failed("cudaStreamBeginCapture", e, 0, why, n);
  }
  int rc = fn(arg);
  if (rc >= 0 && fault) {
    /* what a launcher that synchronises would do: not permitted here */
    cudaError_t fe = cudaStreamSynchronize(s);
    if (fe == cudaSuccess) {
      rc = -EAGAIN;
      snprintf(gc_quiet_what, sizeof(gc_quiet_what),
               "the injected fault (cudaStreamSynchronize) was permitted while capturing");
    } else {
      rc = gc_cuda_fail(fe, "cudaStreamSynchronize (injected fault)", __FILE__, __LINE__);
    }
  }
  /* Always ended, also after a failure: the stream (and the side streams
   * that joined it) leave capture mode. */
  e = cudaStreamEndCapture(s, &graph);
  gc_quiet = 0;
  if (rc < 0 || e != cudaSuccess || graph == NULL) {
    if (graph)
      cudaGraphDestroy(graph);
    return capture_failed("cudaStreamEndCapture", e, rc, why, n);
  }
  cudaGraphExec_t exec = NULL;
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess)
    return capture_failed("cudaGraphInstantiate", e, 0, why, n);
  g->exec = exec;
  g->key = key;
  g->captures++;
  GC_CUDA(cudaGraphLaunch(g->exec, s));
  g->launches++;
  return 0;
}
