/* matmul.cu - the cuBLASLt side: one cache entry per distinct product
 * (shape, types, epilogue) holding its descriptors and the algorithm the
 * heuristic picked, so steady-state calls only set pointers and launch.
 * The algorithms chosen by timing are also kept in a file per user
 * (tune_cache.h), read by the next start: a restart does not time again. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matmul.cuh"
#include "tune_cache.h"

#define GC_MM_CACHE 96
#define GC_MM_CANDS 8

typedef struct mm_key_s {
  int m, n, k, ta, tb, lda, ldb, ldd;
  int ab, cd, epi;
  long aux_ld;
} mm_key_t;

typedef struct mm_entry_s {
  mm_key_t key;
  int supported; /* 0: no algorithm for this epilogue */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  cublasLtMatmulAlgo_t cands[GC_MM_CANDS]; /* the heuristic's best few */
  int ncands, tuned;
} mm_entry_t;

struct gc_mm_s {
  cublasLtHandle_t lt;
  void *ws;
  size_t ws_size;
  int allow_fused, tune;
  int fallbacks, tuned;
  int choice[GC_CHOICES];
  float choice_ms[GC_CHOICES][GC_CHOICE_WAYS];
  cudaEvent_t ev[2];
  char dev[TC_DEV_MAX]; /* the tuning cache's device key; "" no cache */
  int dev_known;        /* dev is set (at the first product with candidates) */
  uint64_t ltver;
  int cache_hits;
  int n;
  mm_entry_t e[GC_MM_CACHE];
};

/* ---- the tuning cache, one per process -------------------------------------- */

static pthread_mutex_t tc_mu = PTHREAD_MUTEX_INITIALIZER;
static int tc_state;       /* 0 not read yet, 1 read, -1 off */
static char tc_file[4096];
static tc_table_t tc_mem;  /* what the file held, and this process's choices */
static int tc_warned;

/* Read the file once. RET whether there is a cache. tc_mu held. */
static int tc_ready(void) {
  if (tc_state == 0) {
    int rc = tc_path(tc_file, sizeof(tc_file));
    tc_state = -1;
    if (rc == 1) {
      /* unreadable, corrupt or foreign: ignored, rewritten at the first
       * choice */
      (void)tc_load(tc_file, &tc_mem);
      tc_state = 1;
    }
  }
  return tc_state == 1;
}

static void mm_key_values(const gc_mm_t *mm, const mm_entry_t *x, int64_t v[TC_KEY_N]) {
  const mm_key_t *k = &x->key;
  const int64_t vals[TC_KEY_N] = {k->m,   k->n,  k->k,   k->ta,     k->tb,
                                  k->lda, k->ldb, k->ldd, k->ab,     k->cd,
                                  k->epi, (int64_t)k->aux_ld, (int64_t)mm->ws_size};
  memcpy(v, vals, sizeof(vals));
}

static void tc_device(gc_mm_t *mm);

/* The cached choice for x, when the heuristic still offers it. */
static int tc_lookup(gc_mm_t *mm, mm_entry_t *x) {
  int64_t key[TC_KEY_N];
  int hit = 0;
  if (!mm->dev_known)
    tc_device(mm);
  if (!mm->dev[0])
    return 0;
  mm_key_values(mm, x, key);
  pthread_mutex_lock(&tc_mu);
  const tc_entry_t *e = tc_ready() ? tc_find(&tc_mem, mm->dev, mm->ltver, key) : NULL;
  for (int i = 0; e && i < x->ncands && !hit; i++)
    if (memcmp(x->cands[i].data, e->algo, sizeof(e->algo)) == 0) {
      x->algo = x->cands[i];
      hit = 1;
    }
  pthread_mutex_unlock(&tc_mu);
  return hit;
}

/* Keep x's timed choice, in memory and in the file (merged with what other
 * processes wrote meanwhile). A file that cannot be written is said once. */
static void tc_store(gc_mm_t *mm, const mm_entry_t *x) {
  tc_entry_t e;
  int rc;
  if (!mm->dev[0])
    return;
  memset(&e, 0, sizeof(e));
  memcpy(e.dev, mm->dev, sizeof(e.dev));
  e.ltver = mm->ltver;
  mm_key_values(mm, x, e.key);
  memcpy(e.algo, x->algo.data, sizeof(e.algo));
  pthread_mutex_lock(&tc_mu);
  if (tc_ready() && tc_put(&tc_mem, &e) == 0 && (rc = tc_update(tc_file, &e, 1)) != 0 &&
      !tc_warned) {
    tc_warned = 1;
    fprintf(stderr, "gpt_cuda: warning: the cuBLASLt tuning cache %s cannot be written "
            "(%s): the next start times the products again; set GPT_CUDA_TUNE_CACHE to "
            "a writable file, or 0 (docs/runtime.md)\n", tc_file, strerror(-rc));
  }
  pthread_mutex_unlock(&tc_mu);
}

/* The device key of the current GPU ("" when it cannot be had: no cache). */
static void tc_device(gc_mm_t *mm) {
  cudaDeviceProp p;
  int d = 0;
  mm->dev[0] = '\0';
  mm->dev_known = 1;
  if (cudaGetDevice(&d) != cudaSuccess || cudaGetDeviceProperties(&p, d) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (tc_device_key(mm->dev, sizeof(mm->dev), p.name, p.major * 10 + p.minor,
                    p.multiProcessorCount) != 0)
    mm->dev[0] = '\0';
  mm->ltver = (uint64_t)cublasLtGetVersion();
}

#define GC_LT(call, what)                                                      \
  do {                                                                         \
    cublasStatus_t st_ = (call);                                               \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                          \
      return gc_cublas_fail((int)st_, what, __FILE__, __LINE__);               \
  } while (0)

int gc_mm_create(gc_mm_t **out, size_t workspace, int allow_fused) {
  gc_mm_t *mm = (gc_mm_t *)calloc(1, sizeof(*mm));
  if (!mm)
    return -ENOMEM;
  mm->allow_fused = allow_fused;
  for (int i = 0; i < GC_CHOICES; i++)
    mm->choice[i] = -1;
  const char *tune = getenv("GPT_CUDA_TUNE");
  mm->tune = !(tune && strcmp(tune, "0") == 0); /* on unless GPT_CUDA_TUNE=0 */
  cublasStatus_t st = cublasLtCreate(&mm->lt);
  if (st != CUBLAS_STATUS_SUCCESS) {
    free(mm);
    return gc_cublas_fail((int)st, "cublasLtCreate", __FILE__, __LINE__);
  }
  cudaError_t e = cudaMalloc(&mm->ws, workspace);
  if (e != cudaSuccess) {
    cublasLtDestroy(mm->lt);
    free(mm);
    return gc_cuda_fail(e, "cudaMalloc(cuBLASLt workspace)", __FILE__, __LINE__);
  }
  mm->ws_size = workspace;
  if (mm->tune && (cudaEventCreate(&mm->ev[0]) != cudaSuccess ||
                   cudaEventCreate(&mm->ev[1]) != cudaSuccess)) {
    (void)cudaGetLastError();
    mm->tune = 0;
  }
  *out = mm;
  return 0;
}

void gc_mm_destroy(gc_mm_t *mm) {
  if (!mm)
    return;
  for (int i = 0; i < mm->n; i++) {
    mm_entry_t *x = &mm->e[i];
    if (x->desc)
      cublasLtMatmulDescDestroy(x->desc);
    if (x->la)
      cublasLtMatrixLayoutDestroy(x->la);
    if (x->lb)
      cublasLtMatrixLayoutDestroy(x->lb);
    if (x->lc)
      cublasLtMatrixLayoutDestroy(x->lc);
  }
  for (int i = 0; i < 2; i++)
    if (mm->ev[i])
      cudaEventDestroy(mm->ev[i]);
  cudaFree(mm->ws);
  cublasLtDestroy(mm->lt);
  free(mm);
}

int gc_mm_fallbacks(const gc_mm_t *mm) { return mm->fallbacks; }
int gc_mm_tuned(const gc_mm_t *mm) { return mm->tuned; }
int gc_mm_cache_hits(const gc_mm_t *mm) { return mm->cache_hits; }
int gc_mm_tuning(const gc_mm_t *mm) { return mm->tune; }
int gc_mm_fused(const gc_mm_t *mm) { return mm->allow_fused; }
int *gc_mm_choice(gc_mm_t *mm, int slot) { return &mm->choice[slot]; }
float *gc_mm_choice_ms(gc_mm_t *mm, int slot) { return mm->choice_ms[slot]; }

const char *gc_mm_way_name(int slot, int way, int brief) {
  /* the same three ways in every slot */
  static const char *const name[GC_CHOICE_WAYS][2] = {
      {"in cuBLASLt's epilogue", "epilogue"},
      {"as a kernel", "kernel"},
      {"in CUTLASS's epilogue", "CUTLASS"},
  };
  if (slot < 0 || slot >= GC_CHOICES || way < 0 || way >= GC_CHOICE_WAYS)
    return "?";
  return name[way][brief ? 1 : 0];
}

int gc_mm_time(gc_mm_t *mm, cudaStream_t s, int reps, int (*fn)(void *), void *arg, float *ms) {
  GC_TRY(fn(arg)); /* warm-up */
  GC_CUDA(cudaEventRecord(mm->ev[0], s));
  for (int i = 0; i < reps; i++)
    GC_TRY(fn(arg));
  GC_CUDA(cudaEventRecord(mm->ev[1], s));
  GC_CUDA(cudaEventSynchronize(mm->ev[1]));
  GC_CUDA(cudaEventElapsedTime(ms, mm->ev[0], mm->ev[1]));
  return 0;
}

static int is_fused(cublasLtEpilogue_t e) {
  return e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS;
}

static int mm_build(gc_mm_t *mm, mm_entry_t *x, const gc_mm_args_t *a) {
  const char *nm = a->name;
  cublasOperation_t ta = a->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = a->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cudaDataType_t scale = CUDA_R_32F;
  GC_LT(cublasLtMatmulDescCreate(&x->desc, CUBLAS_COMPUTE_32F, scale),
        "cublasLtMatmulDescCreate");
  GC_LT(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
        "cublasLtMatmulDescSetAttribute(TRANSA)");
  GC_LT(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
        "cublasLtMatmulDescSetAttribute(TRANSB)");
  cublasLtEpilogue_t epi = a->epi;
  GC_LT(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                       sizeof(epi)),
        "cublasLtMatmulDescSetAttribute(EPILOGUE)");
  if (a->bias)
    GC_LT(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                         &a->bias, sizeof(a->bias)),
          "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  if (a->aux) {
    int64_t ld = a->aux_ld;
    GC_LT(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                         &a->aux, sizeof(a->aux)),
          "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
    GC_LT(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                         sizeof(ld)),
          "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)");
  }
  int ar = a->ta ? a->k : a->m, ac = a->ta ? a->m : a->k;
  int br = a->tb ? a->n : a->k, bc = a->tb ? a->k : a->n;
  GC_LT(cublasLtMatrixLayoutCreate(&x->la, a->ab, ar, ac, a->lda), "cublasLtMatrixLayoutCreate(A)");
  GC_LT(cublasLtMatrixLayoutCreate(&x->lb, a->ab, br, bc, a->ldb), "cublasLtMatrixLayoutCreate(B)");
  GC_LT(cublasLtMatrixLayoutCreate(&x->lc, a->cd, a->m, a->n, a->ldd),
        "cublasLtMatrixLayoutCreate(C)");

  cublasLtMatmulPreference_t pref;
  GC_LT(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  /* Weight matrices sit inside the flat parameter array: 16-byte aligned
   * (channels % 8 == 0), not 256 as the heuristic would otherwise assume. */
  uint32_t align = 16;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &mm->ws_size, sizeof(mm->ws_size));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                       &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                       &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                       &align, sizeof(align));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                       &align, sizeof(align));
  cublasLtMatmulHeuristicResult_t res[GC_MM_CANDS];
  int got = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(mm->lt, x->desc, x->la, x->lb, x->lc,
                                                     x->lc, pref, mm->tune ? GC_MM_CANDS : 1,
                                                     res, &got);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && got == 0)) {
    if (is_fused(a->epi)) {
      x->supported = 0;
      return 0;
    }
    char what[160];
    snprintf(what, sizeof(what), "cublasLtMatmulAlgoGetHeuristic(%s)", nm);
    return gc_cublas_fail((int)CUBLAS_STATUS_NOT_SUPPORTED, what, __FILE__, __LINE__);
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    char what[160];
    snprintf(what, sizeof(what), "cublasLtMatmulAlgoGetHeuristic(%s)", nm);
    return gc_cublas_fail((int)st, what, __FILE__, __LINE__);
  }
  x->algo = res[0].algo;
  x->ncands = 0;
  for (int i = 0; i < got; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS)
      x->cands[x->ncands++] = res[i].algo;
  x->tuned = x->ncands <= 1;
  x->supported = 1;
  /* chosen by an earlier start's timing: no need to time again */
  if (!x->tuned && mm->tune && tc_lookup(mm, x)) {
    x->tuned = 1;
    mm->cache_hits++;
  }
  return 0;
}

/* On its first call, a product is timed with each of the heuristic's
 * candidates (3 runs after a warm-up, CUDA events) and keeps the fastest:
 * the heuristic's first choice is often not the best for the long, thin
 * weight-gradient products. Runs are idempotent (outputs rewritten with the
 * same values) except an in-place accumulation, which is timed into a
 * scratch copy. On by default (GPT_CUDA_TUNE=0 turns it off): on the H200
 * at gpt2-124m's shapes, 30.07 -> 29.76 ms a step (2026-12-01); on an H100
 * at gpt2-350m, power-capped at 700 W, 207.7k -> 212.2k tokens/s (2026-12-07,
 * docs/benchmarks/2026-12-07-h200.md section 4). */
static int mm_tune(gc_mm_t *mm, mm_entry_t *x, const gc_mm_args_t *a, cudaStream_t s) {
  void *D = a->D, *scratch = NULL;
  const void *C = a->C ? a->C : a->D;
  if (a->beta != 0.f && C == a->D) {
    size_t bytes = (size_t)a->ldd * a->n * (a->cd == CUDA_R_32F ? 4 : 2);
    if (cudaMalloc(&scratch, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      x->tuned = 1; /* no room to try: keep the heuristic's choice */
      return 0;
    }
    D = scratch;
  }
  float best = 0.f;
  int bi = -1;
  for (int i = 0; i < x->ncands; i++) {
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    for (int r = 0; r < 4 && st == CUBLAS_STATUS_SUCCESS; r++) {
      if (r == 1)
        cudaEventRecord(mm->ev[0], s);
      st = cublasLtMatmul(mm->lt, x->desc, &a->alpha, a->A, x->la, a->B, x->lb, &a->beta, C,
                          x->lc, D, x->lc, &x->cands[i], mm->ws, mm->ws_size, s);
    }
    if (st != CUBLAS_STATUS_SUCCESS)
      continue;
    cudaEventRecord(mm->ev[1], s);
    float ms = 0.f;
    if (cudaEventSynchronize(mm->ev[1]) != cudaSuccess ||
        cudaEventElapsedTime(&ms, mm->ev[0], mm->ev[1]) != cudaSuccess) {
      cudaFree(scratch);
      return gc_cuda_fail(cudaGetLastError(), "cudaEventSynchronize(cuBLASLt tuning)", __FILE__,
                          __LINE__);
    }
    if (bi < 0 || ms < best)
      best = ms, bi = i;
  }
  if (scratch)
    cudaFree(scratch);
  x->tuned = 1;
  mm->tuned++;
  if (bi >= 0) {
    x->algo = x->cands[bi];
    tc_store(mm, x);
  }
  return 0;
}

int gc_mm(gc_mm_t *mm, const gc_mm_args_t *a, cudaStream_t s) {
  if (!mm->allow_fused && is_fused(a->epi))
    return -ENOTSUP;
  mm_key_t key;
  memset(&key, 0, sizeof(key));
  key.m = a->m, key.n = a->n, key.k = a->k, key.ta = a->ta, key.tb = a->tb;
  key.lda = a->lda, key.ldb = a->ldb, key.ldd = a->ldd;
  key.ab = (int)a->ab, key.cd = (int)a->cd, key.epi = (int)a->epi;
  key.aux_ld = a->aux ? a->aux_ld : 0;
  mm_entry_t *x = NULL;
  for (int i = 0; i < mm->n; i++)
    if (memcmp(&mm->e[i].key, &key, sizeof(key)) == 0) {
      x = &mm->e[i];
      break;
    }
  if (!x) {
    if (mm->n == GC_MM_CACHE)
      return gc_fail(-ENOSPC, "cuBLASLt descriptor cache", "full", __FILE__, __LINE__);
    x = &mm->e[mm->n++];
    memset(x, 0, sizeof(*x));
    x->key = key;
    GC_TRY(mm_build(mm, x, a));
  } else {
    if (a->bias)
      GC_LT(cublasLtMatmulDescSetAttribute(x->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                           &a->bias, sizeof(a->bias)),
            "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    if (a->aux)
      GC_LT(cublasLtMatmulDescSetAttribute(x->desc,
                                           CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                           &a->aux, sizeof(a->aux)),
            "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
  }
  if (!x->supported) {
    mm->fallbacks++;
    return -ENOTSUP;
  }
  if (!x->tuned)
    GC_TRY(mm_tune(mm, x, a, s));
  cublasStatus_t st =
      cublasLtMatmul(mm->lt, x->desc, &a->alpha, a->A, x->la, a->B, x->lb, &a->beta,
                     a->C ? a->C : a->D, x->lc, a->D, x->lc, &x->algo, mm->ws,
                     mm->ws_size, s);
  if (st != CUBLAS_STATUS_SUCCESS) {
    char what[160];
    snprintf(what, sizeof(what), "cublasLtMatmul(%s)", a->name);
    return gc_cublas_fail((int)st, what, __FILE__, __LINE__);
  }
  return 0;
}
