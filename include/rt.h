/* rt.h - the training runtime: a worker's place in the job launch started,
 * the collectives between the ranks, and progress reports.
 *
 * A trainer started by `launch` calls rt_init() once: it reads the worker
 * environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, LAUNCH_ROUND,
 * the store's LAUNCH_RDZV_* variables), connects to the agent's store with
 * librdzv, picks the GPU of its local rank when it uses CUDA, and sets up
 * the collectives:
 *   - on GPUs, NCCL (loaded at run time), its communicator bootstrapped
 *     through the store with new ids for every restart round;
 *   - on the CPU, TCP connections between every pair of ranks (addresses
 *     exchanged through the store) and an all-reduce with a fixed order:
 *     every element is summed in rank order, ((g0 + g1) + g2) + ..., so
 *     results are bitwise reproducible and equal to the same sum done by
 *     gradient accumulation on one rank.
 * Started without RANK (not under launch), a trainer runs as the only rank
 * of a job of one, with no store.
 *
 * Memory: buffers of rt_allreduce, rt_broadcast and the gradients live
 * where the collectives run: device memory of rt_device() when the runtime
 * uses a GPU, host memory otherwise.
 *
 * Threads: one thread (the trainer's) calls every function. On the CPU the
 * runtime runs its collectives on a communication thread of its own, so
 * the gradient all-reduce overlaps with the rest of backward.
 *
 * Errors: every function returns 0 or a negative code (-errno or an RDZV_E*
 * code of rdzv.h; rt_strerror() describes both). The runtime prints each
 * failure once, where it happens, to stderr, naming the failed call, the
 * rank and the host; the caller needs to add nothing but its own context.
 * After a failed collective the job cannot continue: later collectives
 * fail at once with the same code.
 *
 * Progress: rt_progress() sets the store key launch/progress/<RANK> to
 * "<step> <unix time in ms>" through rdzv_progress() (at most every
 * progress_ms; rt_init reports step 0), which the agent started with
 * --hang-timeout watches to find a rank that stopped making progress.
 * docs/runtime.md has the details.
 */
#ifndef RT_H
#define RT_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_s rt_t;

enum {
  RT_DEVICE_AUTO = 0, /* a GPU when the driver finds one, else the CPU */
  RT_DEVICE_CPU = 1,
  RT_DEVICE_CUDA = 2 /* a GPU or an error */
};

/* Element types of collectives (the values of gpt.h's GPT_FP32 ...). The
 * CPU collectives take RT_FP32 only. */
enum { RT_FP32 = 0, RT_BF16 = 1, RT_FP16 = 2 };

typedef struct rt_options_s {
  size_t size;      /* sizeof(rt_options_t) */
  unsigned version; /* 1 */
  int device;       /* RT_DEVICE_* */
  int timeout_ms;   /* the most a collective or a store call may wait */
  int progress_ms;  /* least interval between two progress reports */
  size_t bucket_bytes; /* gradient buckets: consecutive segments are merged
                          until a bucket reaches this size; 0 = one
                          all-reduce per segment */
} rt_options_t;

#define RT_OPTIONS_INIT                                                        \
  { sizeof(rt_options_t), 1, RT_DEVICE_AUTO, 600000, 1000, 0 }

/* IN opt: NULL for RT_OPTIONS_INIT. OUT *out: free with rt_finalize().
 * RET 0, RDZV_EINVAL (a malformed worker environment), RDZV_ENOTSUP (CUDA
 * asked for and no GPU, driver or NCCL), or the store's and sockets'
 * errors. */
int rt_init(const rt_options_t *opt, rt_t **out);
/* Close the collectives and the store connection. NULL is a no-op. */
void rt_finalize(rt_t *rt);

/* Standby (launch --standby, docs/runtime.md#standby). Call it first in
 * main, before anything reads the rank's environment (RANK, LAUNCH_*...):
 * - Not a standby (LAUNCH_STANDBY_FD unset): RET 0 at once.
 * - A standby: the agent started this process ahead of a failure, with no
 *   rank. It opens the GPU of its LOCAL_RANK as rt_init would (opt->device;
 *   device -1 on the CPU), calls warm(arg, device, cc) to pay the
 *   trainer's own start-up (its CUDA context, model allocations, handles:
 *   what the trainer creates there it keeps and uses after rt_init), tells
 *   the agent it is ready and blocks until the agent hands it a rank's
 *   complete environment, which replaces this process's environment. RET 1:
 *   now call rt_init as any worker does (it joins the store, the round and
 *   the resume step of the failure it replaces).
 * RET < 0: warm's error (reported by warm), RDZV_EINVAL (LAUNCH_STANDBY_FD
 * is not a socket of launch's: reported), -EPIPE (the agent closed it
 * without a rank: the job ended; exit 0 quietly). Never returns while the
 * process waits; a SIGTERM or SIGKILL from the agent ends it there. */
typedef int (*rt_standby_warm_fn)(void *arg, int device, int cc);
int rt_standby_wait(const rt_options_t *opt, rt_standby_warm_fn warm,
                    void *arg);

int rt_rank(const rt_t *rt);
int rt_world_size(const rt_t *rt);
int rt_local_rank(const rt_t *rt);
int rt_local_world_size(const rt_t *rt);
/* The restart round (LAUNCH_ROUND, or TORCHELASTIC_RESTART_COUNT). */
int64_t rt_round(const rt_t *rt);
/* The host name launch gave this node (LAUNCH_HOSTNAME), or gethostname. */
const char *rt_host(const rt_t *rt);
/* GPU index (CUDA numbering of this process) or -1 on the CPU. */
int rt_device(const rt_t *rt);
/* "cpu", or the GPU's name ("NVIDIA H200"). */
const char *rt_device_name(const rt_t *rt);
/* The GPU's compute capability as 10 * major + minor (90 for sm_90); 0 on
 * the CPU. */
int rt_device_cc(const rt_t *rt);
/* The store connection (NULL when not under launch), for the trainer's own
 * keys (checkpoint coordination). Same thread as every other call. */
rdzv_client_t *rt_store(rt_t *rt);

/* Sum count elements of buf over all ranks, in place. Blocks. */
int rt_allreduce(rt_t *rt, void *buf, size_t count, int dtype);
/* The same for a few host floats (losses, counters), in any mode. */
int rt_allreduce_host(rt_t *rt, float *buf, size_t count);
/* Copy bytes of root's buf to every rank's buf. Blocks. */
int rt_broadcast(rt_t *rt, void *buf, size_t bytes, int root);
/* The halves of the all-reduce, for sharded optimizer state (ZeRO-1).
 * part: world + 1 ascending offsets in elements; rank r's part of buf is
 * [part[r], part[r+1]) (parts of any sizes, empty ones too). Both block.
 * rt_reduce_scatter: this rank's part of buf becomes the sum over ranks
 * (on the CPU in rank order, as rt_allreduce); the rest of buf is left in
 * an unspecified state. RT_FP32 only on the CPU.
 * rt_allgather: every rank's part of buf is copied into every rank's buf;
 * elements of esize bytes, copied without arithmetic (any bits).
 * On GPUs: ncclReduceScatter / ncclAllGather in place when all parts have
 * one size, else one ncclReduce / ncclBroadcast per rank in a group.
 * RET 0, RDZV_EINVAL (bad part or dtype), or a collective's error. */
int rt_reduce_scatter(rt_t *rt, void *buf, const size_t *part, int dtype);
int rt_allgather(rt_t *rt, void *buf, const size_t *part, size_t esize);
/* Return when every rank has entered. */
int rt_barrier(rt_t *rt);

/* ---- gradient all-reduce, overlapped with backward ------------------------
 *
 * Register the gradient buffer once: nseg segments, segment i covering
 * count[i] elements from off[i] (gpt_segment() gives them for the GPT
 * model). Each step, backward reports every segment through
 * rt_grads_ready() as soon as it is final (it has gpt.h's gpt_segment_cb
 * signature: pass it with the rt_t as argument), which starts that
 * segment's all-reduce at once; rt_grads_wait() returns when all of them
 * are done. On a GPU `stream_event` is a cudaEvent_t recorded after the
 * segment's last kernel: the all-reduce runs on the runtime's own stream,
 * after that event. */
int rt_grads_register(rt_t *rt, void *grads, int dtype, int nseg,
                      const size_t *off, const size_t *count);
int rt_grads_ready(void *rt, int seg, void *stream_event);
/* Segments not reported this step are all-reduced here (on a GPU, the
 * caller synchronises its stream first). */
int rt_grads_wait(rt_t *rt);
/* ZeRO-1: from now on the registered gradient is reduce-scattered, not
 * all-reduced, bucket by bucket as backward reports it: after
 * rt_grads_wait() elements [part[rank], part[rank+1]) of the gradient
 * hold the sum over ranks (on the CPU in rank order, bitwise the
 * all-reduce's), the rest is unspecified. part: world + 1 ascending
 * offsets into the whole gradient, copied; NULL goes back to the
 * all-reduce. Call between steps. RET 0, RDZV_EINVAL, RDZV_ENOMEM. */
int rt_grads_shard(rt_t *rt, const size_t *part);

/* Report that `step` is done (rate-limited, see above). */
int rt_progress(rt_t *rt, int64_t step);
/* rt_progress with named scalars (loss, grad norm, lr, step time, tokens,
 * total steps: rdzv_scalars_t of rdzv.h; s may be NULL). Rate-limited
 * alike: the report that is sent carries the scalars of its own step. */
int rt_progress_ex(rt_t *rt, int64_t step, const rdzv_scalars_t *s);

/* A message for any code the runtime returns. */
const char *rt_strerror(int err);

/* A failed call of a GPU library, printed once to stderr with the rank and
 * host launch gave this worker, e.g. rt_report_error("cuBLAS",
 * "cublasLtMatmul(qkv)", "CUBLAS_STATUS_...", __FILE__, __LINE__). The
 * model's backends hold no rt_t and call it too: model/gpt.h declares the
 * same function, which the runtime implements. */
void rt_report_error(const char *lib, const char *call, const char *what,
                     const char *file, int line);

#ifdef __cplusplus
}
#endif
#endif /* RT_H */
