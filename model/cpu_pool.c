/* cpu_pool.c - the CPU backend's thread pool: one parallel loop at a time,
 * split into fixed contiguous ranges, the calling thread taking the first.
 * Workers sleep on a condition variable between loops: ranks share cores
 * (4 ranks on 2 cores in the tests), so nobody spins. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_int.h"

typedef struct worker_s {
  cpu_pool_t *pool;
  int tid;
} worker_t;

struct cpu_pool_s {
  int n; /* threads, the caller included */
  pthread_t *th;
  worker_t *w;
  int started; /* workers running (for teardown after a partial start) */
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  unsigned long gen; /* bumped for each loop the workers take part in */
  int remaining;     /* workers that have not finished the current loop */
  int stop;
  /* the current loop */
  cpu_task_fn fn;
  void *ctx;
  size_t items, grain, units;
  int parts;
  float **scratch;
  float *shared;
  float **extra; /* grown by cpu__pool_reserve */
  size_t extra_floats;
};

int cpu_default_threads(void) {
  const char *v = getenv("OMP_NUM_THREADS");
  cpu_set_t set;
  if (v != NULL && *v != '\0') {
    char *end;
    long x = strtol(v, &end, 10);
    /* "4" or "4,2" (nested levels): the first level */
    if (x > 0 && x <= 4096 && (*end == '\0' || *end == ','))
      return (int)x;
  }
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  return 1;
}

static void run_part(cpu_pool_t *p, int part) {
  size_t u0 = p->units * (size_t)part / (size_t)p->parts;
  size_t u1 = p->units * (size_t)(part + 1) / (size_t)p->parts;
  size_t lo = u0 * p->grain, hi = u1 * p->grain;
  if (hi > p->items)
    hi = p->items;
  if (lo < hi)
    p->fn(p->ctx, lo, hi, part);
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  cpu_pool_t *p = w->pool;
  unsigned long seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->gen == seen && !p->stop)
      pthread_cond_wait(&p->go, &p->mu);
    if (p->stop)
      break;
    seen = p->gen;
    pthread_mutex_unlock(&p->mu);
    /* the loop's fields are stable until every worker has reported */
    if (w->tid < p->parts)
      run_part(p, w->tid);
    pthread_mutex_lock(&p->mu);
    if (--p->remaining == 0)
      pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void cpu_pool_destroy(cpu_pool_t *p) {
  if (p == NULL)
    return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->started; i++)
    pthread_join(p->th[i], NULL);
  for (int i = 0; i < p->n; i++) {
    if (p->scratch)
      free(p->scratch[i]);
    if (p->extra)
      free(p->extra[i]);
  }
  free(p->scratch);
  free(p->extra);
  free(p->shared);
  free(p->th);
  free(p->w);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

int cpu_pool_create(int threads, cpu_pool_t **out) {
  cpu_pool_t *p;
  int rc = 0;
  *out = NULL;
  if (threads == 0)
    threads = cpu_default_threads();
  if (threads < 1 || threads > CPU_POOL_MAX_THREADS)
    return -EINVAL;
  if ((p = calloc(1, sizeof(*p))) == NULL)
    return -ENOMEM;
  p->n = threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  p->th = calloc((size_t)threads, sizeof(*p->th));
  p->w = calloc((size_t)threads, sizeof(*p->w));
  p->scratch = calloc((size_t)threads, sizeof(*p->scratch));
  p->extra = calloc((size_t)threads, sizeof(*p->extra));
  if (p->th == NULL || p->w == NULL || p->scratch == NULL || p->extra == NULL) {
    cpu_pool_destroy(p);
    return -ENOMEM;
  }
  {
    void *mem = NULL;
    if (posix_memalign(&mem, 64, CPU_SHARED_FLOATS * sizeof(float)) != 0) {
      cpu_pool_destroy(p);
      return -ENOMEM;
    }
    p->shared = mem;
  }
  for (int i = 0; i < threads; i++) {
    void *mem = NULL;
    if (posix_memalign(&mem, 64, CPU_SCRATCH_FLOATS * sizeof(float)) != 0) {
      cpu_pool_destroy(p);
      return -ENOMEM;
    }
    p->scratch[i] = mem;
  }
  /* worker i runs part i; the caller runs part 0 */
  for (int i = 1; i < threads; i++) {
    p->w[i].pool = p;
    p->w[i].tid = i;
    if ((rc = pthread_create(&p->th[i - 1], NULL, worker_main, &p->w[i])) != 0) {
      cpu_pool_destroy(p);
      return -rc;
    }
    p->started++;
  }
  *out = p;
  return 0;
}

int cpu_pool_threads(const cpu_pool_t *p) { return p->n; }

float *cpu__pool_scratch(cpu_pool_t *p, int tid) { return p->scratch[tid]; }

float *cpu__pool_extra(cpu_pool_t *p, int tid) { return p->extra[tid]; }

float *cpu__pool_shared(cpu_pool_t *p) { return p->shared; }

int cpu__pool_reserve(cpu_pool_t *p, size_t floats) {
  if (floats <= p->extra_floats)
    return 0;
  for (int i = 0; i < p->n; i++) {
    void *mem = NULL;
    if (posix_memalign(&mem, 64, floats * sizeof(float)) != 0)
      return -ENOMEM; /* the smaller buffers stay usable */
    free(p->extra[i]);
    p->extra[i] = mem;
  }
  p->extra_floats = floats;
  return 0;
}

void cpu_parallel(cpu_pool_t *p, size_t n, size_t grain, cpu_task_fn fn,
                  void *ctx) {
  size_t units;
  if (n == 0)
    return;
  if (grain == 0)
    grain = 1;
  units = (n + grain - 1) / grain;
  if (p->n == 1 || units == 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->items = n;
  p->grain = grain;
  p->units = units;
  p->parts = units < (size_t)p->n ? (int)units : p->n;
  p->remaining = p->n - 1;
  p->gen++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  run_part(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->remaining > 0)
    pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
