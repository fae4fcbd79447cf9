/* rt.c - the training runtime of rt.h: the worker environment, the store
 * connection, the collectives (one of two backends behind rt_coll_ops_t:
 * NCCL through rt_gpu.c, or the TCP mesh of rt_mesh.c on a communication
 * thread), gradient buckets, progress. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"
#include "rt_int.h"

#define RT_MAGIC 0x72747274u
#define QUEUE_CAP 64
#define RT_SUB_MAX 64 /* ranks whose bucket parts fit on the stack */

enum { OP_ALLREDUCE, OP_BROADCAST, OP_REDUCE_SCATTER, OP_ALLGATHER };

/* One collective for the communication thread. */
typedef struct op_s {
  int kind, root;
  void *buf;
  size_t n; /* floats (all-reduce), bytes (broadcast), element size
               (all-gather) */
  const size_t *part; /* reduce-scatter, all-gather: world + 1 offsets */
} op_t;

/* The collectives of a job of more than one rank: one table a backend,
 * chosen once by rt_init (coll_nccl where the runtime has a GPU, coll_mesh
 * otherwise). The calls enqueue and return; wait() returns when everything
 * enqueued is done, with the first error (after which every call fails). */
typedef struct rt_coll_ops_s {
  const char *name;
  /* connect the ranks of this round */
  int (*open)(rt_t *rt);
  /* event: run after this cudaEvent_t (NCCL; NULL: at once) */
  int (*allreduce)(rt_t *rt, void *buf, size_t count, int dtype, void *event);
  int (*broadcast)(rt_t *rt, void *buf, size_t bytes, int root);
  /* part: world + 1 offsets, copied where the call returns before the
   * collective is done */
  int (*reduce_scatter)(rt_t *rt, void *buf, const size_t *part, int dtype,
                        void *event);
  int (*allgather)(rt_t *rt, void *buf, const size_t *part, size_t esize);
  /* a few host floats, whatever memory the collectives use; blocks */
  int (*allreduce_host)(rt_t *rt, float *buf, size_t count);
  int (*wait)(rt_t *rt);
} rt_coll_ops_t;

struct rt_s {
  unsigned magic;
  rt_options_t opt;
  rt_who_t who;
  int rank, world, local_rank, local_world;
  int64_t round;
  char host[256];
  rdzv_client_t *store;
  rt_gpu_t *gpu;
  rt_mesh_t *mesh;
  const rt_coll_ops_t *coll; /* NULL in a job of one */
  int64_t last_progress;
  /* the communication thread (CPU collectives) and its queue */
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  op_t q[QUEUE_CAP];
  uint64_t pushed, completed;
  int err, stop;
  /* registered gradients */
  char *grads;
  int gdtype, nseg, nreported;
  size_t *goff, *gcount;
  size_t *gpart;    /* rt_grads_shard: world + 1 offsets, or NULL */
  size_t *subparts; /* a bucket's parts, QUEUE_CAP slots of world + 1 */
  unsigned char *reported;
  size_t pend_off, pend_count;
  void *pend_event;
};

void rt__logf(const rt_who_t *who, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "rt: %s: %s\n", who->text, msg);
}

/* rt.h and gpt.h: called by the model backends, which hold no rt_t, so the
 * rank and host come from the environment launch set. */
void rt_report_error(const char *lib, const char *call, const char *what,
                     const char *file, int line) {
  rdzv_env_t env;
  const char *host, *base = file ? strrchr(file, '/') : NULL;
  char name[256] = "?", rank[16] = "0";
  rdzv_env_parse(NULL, &env, NULL, 0);
  host = env.hostname;
  if (env.rank >= 0)
    snprintf(rank, sizeof(rank), "%d", env.rank);
  if (host == NULL || *host == '\0') {
    if (gethostname(name, sizeof(name) - 1) == 0)
      name[sizeof(name) - 1] = '\0';
    host = name;
  }
  fprintf(stderr, "rt: rank %s on %s: %s call %s failed: %s (%s:%d)\n",
          rank, host, lib, call, what,
          base ? base + 1 : file ? file : "?", line);
}

const char *rt_strerror(int err) { return rdzv_strerror(err); }

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the environment ---------------------------------------------------------- */

static const char *env_or(const char *name) {
  const char *v = getenv(name);
  return v ? v : "(unset)";
}

static int read_env(rt_t *rt) {
  rdzv_env_t env;
  char why[160];
  int has_rank, bad;
  bad = rdzv_env_parse(NULL, &env, why, sizeof(why)) != 0;
  if (env.hostname)
    snprintf(rt->host, sizeof(rt->host), "%s", env.hostname);
  else if (gethostname(rt->host, sizeof(rt->host) - 1) != 0)
    snprintf(rt->host, sizeof(rt->host), "?");
  rt->world = 1;
  rt->local_world = 1;
  rt->rank = 0;
  has_rank = env.rank >= 0;
  if (has_rank) {
    rt->rank = env.rank;
    rt->world = env.world_size;
    rt->local_rank = env.local_rank >= 0 ? env.local_rank : 0;
    rt->local_world = env.local_world_size >= 0 ? env.local_world_size : 1;
    rt->round = env.round >= 0 ? env.round : 0;
    bad |= rt->world < 1 || rt->world > (1 << 24) || rt->local_world < 1 ||
           rt->rank >= rt->world || rt->local_rank >= rt->local_world;
  }
  if (bad)
    goto bad;
  rt->who.rank = rt->rank;
  snprintf(rt->who.text, sizeof(rt->who.text), "rank %d on %s", rt->rank,
           rt->host);
  return has_rank;
bad:
  if (why[0])
    fprintf(stderr, "rt: %s\n", why);
  fprintf(stderr, "rt: the worker environment is malformed (RANK=%s "
          "WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s LAUNCH_ROUND=%s): "
          "start the trainer with launch (docs/runtime.md)\n",
          env_or("RANK"), env_or("WORLD_SIZE"), env_or("LOCAL_RANK"),
          env_or("LOCAL_WORLD_SIZE"), env_or("LAUNCH_ROUND"));
  return RDZV_EINVAL;
}

/* ---- the communication thread ---------------------------------------------------- */

static int run_op(rt_t *rt, const op_t *op) {
  if (op->kind == OP_ALLREDUCE)
    return rt__mesh_allreduce(rt->mesh, op->buf, op->n);
  if (op->kind == OP_REDUCE_SCATTER)
    return rt__mesh_reduce_scatter(rt->mesh, op->buf, op->part);
  if (op->kind == OP_ALLGATHER)
    return rt__mesh_allgather(rt->mesh, op->buf, op->part, op->n);
  return rt__mesh_broadcast(rt->mesh, op->buf, op->n, op->root);
}

static void *comm_main(void *arg) {
  rt_t *rt = arg;
  pthread_mutex_lock(&rt->mu);
  for (;;) {
    op_t op;
    int rc, err;
    while (rt->completed == rt->pushed && !rt->stop)
      pthread_cond_wait(&rt->work, &rt->mu);
    if (rt->completed == rt->pushed)
      break; /* stopping, nothing left */
    op = rt->q[rt->completed % QUEUE_CAP];
    err = rt->err;
    pthread_mutex_unlock(&rt->mu);
    /* after a failure the peers are in an unknown state: fail the rest */
    rc = err ? err : run_op(rt, &op);
    pthread_mutex_lock(&rt->mu);
    if (rc != 0 && rt->err == 0)
      rt->err = rc;
    rt->completed++;
    pthread_cond_broadcast(&rt->done);
  }
  pthread_mutex_unlock(&rt->mu);
  return NULL;
}

/* Queue op; RET the count of completed ops at which it is done. A bucket's
 * reduce-scatter (op->part NULL, sub not) gets its parts copied into the
 * queue slot's own, free once the slot is. */
static uint64_t push_op(rt_t *rt, const op_t *op, const size_t *sub) {
  uint64_t seq;
  pthread_mutex_lock(&rt->mu);
  while (rt->pushed - rt->completed >= QUEUE_CAP)
    pthread_cond_wait(&rt->done, &rt->mu);
  rt->q[rt->pushed % QUEUE_CAP] = *op;
  if (sub) {
    size_t *slot = rt->subparts + (rt->pushed % QUEUE_CAP) * ((size_t)rt->world + 1);
    memcpy(slot, sub, ((size_t)rt->world + 1) * sizeof(size_t));
    rt->q[rt->pushed % QUEUE_CAP].part = slot;
  }
  seq = ++rt->pushed;
  pthread_cond_signal(&rt->work);
  pthread_mutex_unlock(&rt->mu);
  return seq;
}

static int wait_op(rt_t *rt, uint64_t seq) {
  int err;
  pthread_mutex_lock(&rt->mu);
  while (rt->completed < seq)
    pthread_cond_wait(&rt->done, &rt->mu);
  err = rt->err;
  pthread_mutex_unlock(&rt->mu);
  return err;
}

/* ---- the collectives' backends ------------------------------------------------------- */

/* The TCP mesh: every call queued for the communication thread. */
static int mesh_open(rt_t *rt) {
  int rc = rt__mesh_open(rt->store, &rt->who, rt->world, rt->round,
                         rt->opt.timeout_ms, &rt->mesh);
  if (rc != 0)
    return rc;
  if ((rc = pthread_create(&rt->thread, NULL, comm_main, rt)) != 0) {
    rt__logf(&rt->who, "pthread_create(communication thread): %s",
             strerror(rc));
    return -rc;
  }
  rt->thread_started = 1;
  return 0;
}

static int mesh_allreduce(rt_t *rt, void *buf, size_t count, int dtype,
                          void *event) {
  op_t op = {OP_ALLREDUCE, 0, buf, count, NULL};
  (void)dtype, (void)event; /* RT_FP32; host memory, nothing to wait for */
  push_op(rt, &op, NULL);
  return 0;
}

static int mesh_broadcast(rt_t *rt, void *buf, size_t bytes, int root) {
  op_t op = {OP_BROADCAST, root, buf, bytes, NULL};
  push_op(rt, &op, NULL);
  return 0;
}

/* With rt_grads_shard's slots the parts are copied (a bucket's live on the
 * caller's stack); without, only rt_reduce_scatter calls, and waits. */
static int mesh_reduce_scatter(rt_t *rt, void *buf, const size_t *part,
                               int dtype, void *event) {
  op_t op = {OP_REDUCE_SCATTER, 0, buf, 0, part};
  (void)dtype, (void)event;
  push_op(rt, &op, rt->subparts ? part : NULL);
  return 0;
}

static int mesh_allgather(rt_t *rt, void *buf, const size_t *part,
                          size_t esize) {
  op_t op = {OP_ALLGATHER, 0, buf, esize, part};
  push_op(rt, &op, NULL);
  return 0;
}

static int mesh_allreduce_host(rt_t *rt, float *buf, size_t count) {
  mesh_allreduce(rt, buf, count, RT_FP32, NULL);
  return wait_op(rt, rt->pushed);
}

static int mesh_wait(rt_t *rt) { return wait_op(rt, rt->pushed); }

static const rt_coll_ops_t coll_mesh = {
    .name = "tcp mesh",
    .open = mesh_open,
    .allreduce = mesh_allreduce,
    .broadcast = mesh_broadcast,
    .reduce_scatter = mesh_reduce_scatter,
    .allgather = mesh_allgather,
    .allreduce_host = mesh_allreduce_host,
    .wait = mesh_wait,
};

/* NCCL on the runtime's stream (rt_gpu.c). */
static int nccl_open(rt_t *rt) {
  return rt__gpu_nccl_init(rt->gpu, rt->store, rt->rank, rt->world,
                           rt->opt.timeout_ms);
}

static int nccl_allreduce(rt_t *rt, void *buf, size_t count, int dtype,
                          void *event) {
  return rt__gpu_allreduce(rt->gpu, buf, count, dtype, event);
}

static int nccl_broadcast(rt_t *rt, void *buf, size_t bytes, int root) {
  return rt__gpu_broadcast(rt->gpu, buf, bytes, root);
}

static int nccl_reduce_scatter(rt_t *rt, void *buf, const size_t *part,
                               int dtype, void *event) {
  return rt__gpu_reduce_scatter(rt->gpu, buf, part, dtype, event);
}

static int nccl_allgather(rt_t *rt, void *buf, const size_t *part,
                          size_t esize) {
  return rt__gpu_allgather(rt->gpu, buf, part, esize);
}

static int nccl_allreduce_host(rt_t *rt, float *buf, size_t count) {
  return rt__gpu_allreduce_host(rt->gpu, buf, count);
}

static int nccl_wait(rt_t *rt) {
  return rt__gpu_wait(rt->gpu, rt->opt.timeout_ms);
}

static const rt_coll_ops_t coll_nccl = {
    .name = "nccl",
    .open = nccl_open,
    .allreduce = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .reduce_scatter = nccl_reduce_scatter,
    .allgather = nccl_allgather,
    .allreduce_host = nccl_allreduce_host,
    .wait = nccl_wait,
};

/* ---- init / finalize ---------------------------------------------------------------- */

void rt_finalize(rt_t *rt) {
  if (rt == NULL)
    return;
  if (rt->thread_started) {
    pthread_mutex_lock(&rt->mu);
    rt->stop = 1;
    pthread_cond_signal(&rt->work);
    pthread_mutex_unlock(&rt->mu);
    pthread_join(rt->thread, NULL);
  }
  rt__mesh_close(rt->mesh);
  rt__gpu_close(rt->gpu);
  rdzv_close(rt->store);
  free(rt->goff);
  free(rt->gcount);
  free(rt->gpart);
  free(rt->subparts);
  free(rt->reported);
  pthread_cond_destroy(&rt->work);
  pthread_cond_destroy(&rt->done);
  pthread_mutex_destroy(&rt->mu);
  rt->magic = 0;
  free(rt);
}

static int pick_device(rt_t *rt) {
  const char *why = "";
  int rc;
  if (rt->opt.device == RT_DEVICE_CPU)
    return 0;
  rc = rt__gpu_open(&rt->who, rt->local_rank, &rt->gpu, &why);
  if (rc == RDZV_ENOTSUP && rt->opt.device == RT_DEVICE_AUTO)
    return 0; /* no GPU here: the CPU it is */
  if (rc == RDZV_ENOTSUP)
    rt__logf(&rt->who, "a GPU was asked for, but %s", why);
  return rc;
}

int rt_init(const rt_options_t *opt, rt_t **out) {
  rt_options_t defaults = RT_OPTIONS_INIT;
  rt_t *rt;
  int rc, under_launch;
  *out = NULL;
  if (opt && (opt->size < sizeof(rt_options_t) || opt->version != 1 ||
              opt->device < RT_DEVICE_AUTO || opt->device > RT_DEVICE_CUDA ||
              opt->timeout_ms < 1 || opt->progress_ms < 0))
    return RDZV_EINVAL;
  if ((rt = calloc(1, sizeof(*rt))) == NULL)
    return RDZV_ENOMEM;
  rt->magic = RT_MAGIC;
  rt->opt = opt ? *opt : defaults;
  pthread_mutex_init(&rt->mu, NULL);
  pthread_cond_init(&rt->work, NULL);
  pthread_cond_init(&rt->done, NULL);
  if ((rc = under_launch = read_env(rt)) < 0)
    goto fail;
  if (under_launch && (rc = rdzv_connect_from_env(&rt->store)) != 0) {
    const char *ep = getenv("LAUNCH_RDZV_ENDPOINT");
    rt__logf(&rt->who, "cannot reach launch's store at %s: %s",
             ep ? ep : getenv("MASTER_ADDR") ? getenv("MASTER_ADDR") : "(unset)",
             rdzv_strerror(rc));
    rt->store = NULL;
    goto fail;
  }
  if ((rc = pick_device(rt)) != 0)
    goto fail;
  if (rt->world > 1) {
    rt->coll = rt->gpu ? &coll_nccl : &coll_mesh;
    if ((rc = rt->coll->open(rt)) != 0)
      goto fail;
  }
  /* step 0: the rank is up (a watcher sees it before the first step) */
  if ((rc = rt_progress(rt, 0)) != 0)
    goto fail;
  *out = rt;
  return 0;
fail:
  rt_finalize(rt);
  return rc;
}

/* ---- accessors --------------------------------------------------------------------------- */

int rt_rank(const rt_t *rt) { return rt->rank; }
int rt_world_size(const rt_t *rt) { return rt->world; }
int rt_local_rank(const rt_t *rt) { return rt->local_rank; }
int rt_local_world_size(const rt_t *rt) { return rt->local_world; }
int64_t rt_round(const rt_t *rt) { return rt->round; }
const char *rt_host(const rt_t *rt) { return rt->host; }
int rt_device(const rt_t *rt) { return rt->gpu ? rt__gpu_device(rt->gpu) : -1; }
const char *rt_device_name(const rt_t *rt) {
  return rt->gpu ? rt__gpu_name(rt->gpu) : "cpu";
}
int rt_device_cc(const rt_t *rt) { return rt->gpu ? rt__gpu_cc(rt->gpu) : 0; }
rdzv_client_t *rt_store(rt_t *rt) { return rt->store; }

/* ---- collectives ----------------------------------------------------------------------------- */

static int dtype_size(int dtype) {
  return dtype == RT_FP32 ? 4 : dtype == RT_BF16 || dtype == RT_FP16 ? 2 : 0;
}

/* rc of an enqueued collective; when 0, wait for it. */
static int then_wait(rt_t *rt, int rc) {
  return rc != 0 ? rc : rt->coll->wait(rt);
}

int rt_allreduce(rt_t *rt, void *buf, size_t count, int dtype) {
  if (dtype_size(dtype) == 0 || (rt->gpu == NULL && dtype != RT_FP32))
    return RDZV_EINVAL;
  if (rt->world == 1 || count == 0)
    return 0;
  return then_wait(rt, rt->coll->allreduce(rt, buf, count, dtype, NULL));
}

int rt_allreduce_host(rt_t *rt, float *buf, size_t count) {
  if (rt->world == 1 || (rt->gpu == NULL && count == 0))
    return 0;
  return rt->coll->allreduce_host(rt, buf, count);
}

int rt_broadcast(rt_t *rt, void *buf, size_t bytes, int root) {
  if (root < 0 || root >= rt->world)
    return RDZV_EINVAL;
  if (rt->world == 1 || bytes == 0)
    return 0;
  return then_wait(rt, rt->coll->broadcast(rt, buf, bytes, root));
}

/* part: world + 1 offsets, ascending. */
static int valid_part(const rt_t *rt, const size_t *part) {
  if (part == NULL)
    return 0;
  for (int r = 0; r < rt->world; r++)
    if (part[r + 1] < part[r])
      return 0;
  return 1;
}

int rt_reduce_scatter(rt_t *rt, void *buf, const size_t *part, int dtype) {
  if (dtype_size(dtype) == 0 || (rt->gpu == NULL && dtype != RT_FP32) ||
      !valid_part(rt, part))
    return RDZV_EINVAL;
  if (rt->world == 1)
    return 0;
  return then_wait(rt, rt->coll->reduce_scatter(rt, buf, part, dtype, NULL));
}

int rt_allgather(rt_t *rt, void *buf, const size_t *part, size_t esize) {
  if (esize == 0 || !valid_part(rt, part))
    return RDZV_EINVAL;
  if (rt->world == 1)
    return 0;
  return then_wait(rt, rt->coll->allgather(rt, buf, part, esize));
}

int rt_barrier(rt_t *rt) {
  char name[64];
  int rc;
  if (rt->world == 1)
    return 0;
  snprintf(name, sizeof(name), "rt/%" PRId64 "/barrier", rt->round);
  rc = rdzv_barrier(rt->store, name, (uint32_t)rt->world, rt->opt.timeout_ms);
  if (rc != 0)
    rt__logf(&rt->who, "barrier: %s (%s)", rdzv_strerror(rc),
             rc == -ETIMEDOUT ? "a rank did not arrive: see the other logs"
                              : rdzv_last_error(rt->store));
  return rc;
}

/* ---- gradients -------------------------------------------------------------------------------- */

int rt_grads_register(rt_t *rt, void *grads, int dtype, int nseg,
                      const size_t *off, const size_t *count) {
  size_t *o, *c;
  unsigned char *r;
  if (grads == NULL || nseg < 1 || dtype_size(dtype) == 0 ||
      (rt->gpu == NULL && dtype != RT_FP32))
    return RDZV_EINVAL;
  o = malloc((size_t)nseg * sizeof(size_t));
  c = malloc((size_t)nseg * sizeof(size_t));
  r = calloc((size_t)nseg, 1);
  if (o == NULL || c == NULL || r == NULL) {
    free(o), free(c), free(r);
    return RDZV_ENOMEM;
  }
  memcpy(o, off, (size_t)nseg * sizeof(size_t));
  memcpy(c, count, (size_t)nseg * sizeof(size_t));
  free(rt->goff), free(rt->gcount), free(rt->reported);
  rt->goff = o;
  rt->gcount = c;
  rt->reported = r;
  rt->grads = grads;
  rt->gdtype = dtype;
  rt->nseg = nseg;
  rt->nreported = 0;
  rt->pend_count = 0;
  return 0;
}

int rt_grads_shard(rt_t *rt, const size_t *part) {
  size_t *gp = NULL, *sp = NULL, w1 = (size_t)rt->world + 1;
  if (part && !valid_part(rt, part))
    return RDZV_EINVAL;
  if (part && ((gp = malloc(w1 * sizeof(size_t))) == NULL ||
               (sp = malloc(QUEUE_CAP * w1 * sizeof(size_t))) == NULL)) {
    free(gp);
    return RDZV_ENOMEM;
  }
  if (gp)
    memcpy(gp, part, w1 * sizeof(size_t));
  /* the queue is empty between steps: no op reads the old slots */
  if (rt->thread_started)
    wait_op(rt, rt->pushed);
  free(rt->gpart);
  free(rt->subparts);
  rt->gpart = gp;
  rt->subparts = sp;
  return 0;
}

/* Start the all-reduce of the pending bucket, or with rt_grads_shard its
 * reduce-scatter: the shards' parts that fall in the bucket. */
static int flush(rt_t *rt) {
  size_t es = (size_t)dtype_size(rt->gdtype);
  void *p = rt->grads + rt->pend_off * es;
  size_t n = rt->pend_count, a = rt->pend_off, sub[RT_SUB_MAX + 1] = {0};
  size_t *sp = sub;
  int rc = 0;
  rt->pend_count = 0;
  if (n == 0)
    return 0;
  if (rt->gpart == NULL)
    return rt->coll->allreduce(rt, p, n, rt->gdtype, rt->pend_event);
  if (rt->world > RT_SUB_MAX &&
      (sp = malloc(((size_t)rt->world + 1) * sizeof(size_t))) == NULL)
    return RDZV_ENOMEM;
  for (int r = 0; r <= rt->world; r++) {
    size_t x = rt->gpart[r] < a ? a : rt->gpart[r];
    sp[r] = (x > a + n ? a + n : x) - a;
  }
  rc = rt->coll->reduce_scatter(rt, p, sp, rt->gdtype, rt->pend_event);
  if (sp != sub)
    free(sp);
  return rc;
}

int rt_grads_ready(void *arg, int seg, void *stream_event) {
  rt_t *rt = arg;
  size_t off, n;
  int rc = 0;
  if (rt == NULL || rt->magic != RT_MAGIC || seg < 0 || seg >= rt->nseg ||
      rt->reported[seg])
    return RDZV_EINVAL;
  rt->reported[seg] = 1;
  rt->nreported++;
  if (rt->world == 1)
    return 0;
  off = rt->goff[seg];
  n = rt->gcount[seg];
  /* consecutive segments lie one below the other: they join the bucket */
  if (rt->pend_count > 0 && off + n == rt->pend_off) {
    rt->pend_off = off;
    rt->pend_count += n;
  } else {
    if ((rc = flush(rt)) != 0)
      return rc;
    rt->pend_off = off;
    rt->pend_count = n;
  }
  rt->pend_event = stream_event;
  if (rt->pend_count * (size_t)dtype_size(rt->gdtype) >= rt->opt.bucket_bytes ||
      rt->nreported == rt->nseg)
    rc = flush(rt);
  return rc;
}

int rt_grads_wait(rt_t *rt) {
  int rc = 0;
  if (rt->nseg == 0)
    return RDZV_EINVAL;
  for (int s = 0; s < rt->nseg && rc == 0; s++)
    if (!rt->reported[s])
      rc = rt_grads_ready(rt, s, NULL);
  if (rc == 0)
    rc = flush(rt);
  memset(rt->reported, 0, (size_t)rt->nseg);
  rt->nreported = 0;
  if (rt->world == 1 || rc != 0)
    return rc;
  return rt->coll->wait(rt);
}

/* ---- progress ------------------------------------------------------------------------------------ */

int rt_progress(rt_t *rt, int64_t step) {
  return rt_progress_ex(rt, step, NULL);
}

int rt_progress_ex(rt_t *rt, int64_t step, const rdzv_scalars_t *s) {
  int64_t now = mono_ms();
  int rc;
  if (rt->store == NULL)
    return 0;
  if (rt->last_progress != 0 && now - rt->last_progress < rt->opt.progress_ms)
    return 0;
  rt->last_progress = now;
  rc = rdzv_progress_ex(rt->store, rt->rank, step, s, rt->opt.timeout_ms);
  if (rc != 0)
    rt__logf(&rt->who, "progress report to the store failed: %s",
             rdzv_strerror(rc));
  return rc;
}
