/* cpu_gemm.c - C += A·B for the CPU backend: macro-tiles of C spread over
 * the pool, A and B packed into panels (zero-padded at the edges), and one
 * register-blocked micro-kernel for every element, edges included, so each
 * element's arithmetic is the same whatever the tiling or thread count:
 * c + a0·b0 + a1·b1 + ... in k order (fused multiply-adds on AVX2+FMA). */
#include <string.h>

#include "cpu_int.h"

typedef float v8 __attribute__((vector_size(32)));

typedef void (*gemm_kern_fn)(int kc, const float *ap, const float *bp,
                             float *c, size_t ldc);

/* The micro-kernel: an MR x NR tile of C (row stride ldc) plus the product
 * of kc columns of packed A (kc x MR) and kc rows of packed B (kc x NR):
 * 12 accumulators, two B vectors and one broadcast fill AVX2's 16
 * registers. Inlined into one function per instruction set below. */
#define KERN_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
static inline __attribute__((always_inline)) void
kern_body(int kc, const float *ap, const float *bp, float *c, size_t ldc) {
#define DECL(r) v8 c##r##a, c##r##b;
  KERN_ROWS(DECL)
#undef DECL
#define LOAD(r)                                                                \
  memcpy(&c##r##a, c + r * ldc, 32);                                           \
  memcpy(&c##r##b, c + r * ldc + 8, 32);
  KERN_ROWS(LOAD)
#undef LOAD
  for (int k = 0; k < kc; k++) {
    v8 b0, b1;
    memcpy(&b0, bp, 32);
    memcpy(&b1, bp + 8, 32);
#define FMA(r)                                                                 \
  c##r##a += ap[r] * b0;                                                       \
  c##r##b += ap[r] * b1;
    KERN_ROWS(FMA)
#undef FMA
    ap += GEMM_MR;
    bp += GEMM_NR;
  }
#define STORE(r)                                                               \
  memcpy(c + r * ldc, &c##r##a, 32);                                           \
  memcpy(c + r * ldc + 8, &c##r##b, 32);
  KERN_ROWS(STORE)
#undef STORE
}

static void kern_generic(int kc, const float *ap, const float *bp, float *c,
                         size_t ldc) {
  kern_body(kc, ap, bp, c, ldc);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) static void
kern_avx2(int kc, const float *ap, const float *bp, float *c, size_t ldc) {
  kern_body(kc, ap, bp, c, ldc);
}
#endif

static gemm_kern_fn pick_kernel(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return kern_avx2;
#endif
  return kern_generic;
}

typedef struct gemm_s {
  int M, N, K, mc; /* mc: rows per task, a multiple of MR */
  int j0, nc, k0, kc; /* the current block of B */
  const float *a, *b;
  size_t a_rs, a_cs, b_rs, b_cs, ldc;
  float *c, *bp;
  gemm_kern_fn kern;
  cpu_pool_t *pool;
} gemm_t;

/* Pack rows i0 .. i0+mc-1, columns k0 .. k0+kc-1 of A into MR-row panels:
 * ap[panel][k][MR], rows past M zero. The loop order follows A's unit
 * stride. */
static void pack_a(const gemm_t *g, float *ap, int i0, int mc, int k0,
                   int kc) {
  for (int pi = 0; pi < mc; pi += GEMM_MR) {
    float *dst = ap + (size_t)pi * kc;
    int h = g->M - (i0 + pi);
    if (h > GEMM_MR)
      h = GEMM_MR;
    if (h < GEMM_MR)
      memset(dst, 0, (size_t)kc * GEMM_MR * sizeof(float));
    if (g->a_cs == 1) {
      for (int ii = 0; ii < h; ii++) {
        const float *src = g->a + (size_t)(i0 + pi + ii) * g->a_rs + (size_t)k0;
        for (int k = 0; k < kc; k++)
          dst[k * GEMM_MR + ii] = src[k];
      }
    } else {
      for (int k = 0; k < kc; k++) {
        const float *src = g->a + (size_t)(i0 + pi) * g->a_rs +
                           (size_t)(k0 + k) * g->a_cs;
        for (int ii = 0; ii < h; ii++)
          dst[k * GEMM_MR + ii] = src[(size_t)ii * g->a_rs];
      }
    }
  }
}

/* Pack NR-column panels [lo, hi) of the current block of B (rows k0 ..
 * k0+kc-1, columns j0 .. j0+nc-1): bp[panel][k][NR], columns past N zero.
 * The panels are shared by every thread. */
static void pack_b_task(void *ctx, size_t lo, size_t hi, int tid) {
  const gemm_t *g = ctx;
  for (size_t panel = lo; panel < hi; panel++) {
    int pj = (int)panel * GEMM_NR, j = g->j0 + pj, kc = g->kc;
    float *dst = g->bp + (size_t)pj * kc;
    int w = g->N - j < GEMM_NR ? g->N - j : GEMM_NR;
    if (w < GEMM_NR)
      memset(dst, 0, (size_t)kc * GEMM_NR * sizeof(float));
    if (g->b_cs == 1) {
      for (int k = 0; k < kc; k++) {
        const float *src = g->b + (size_t)(g->k0 + k) * g->b_rs + (size_t)j;
        for (int jj = 0; jj < w; jj++)
          dst[k * GEMM_NR + jj] = src[jj];
      }
    } else {
      for (int jj = 0; jj < w; jj++) {
        const float *src = g->b + (size_t)g->k0 * g->b_rs + (size_t)(j + jj) * g->b_cs;
        for (int k = 0; k < kc; k++)
          dst[k * GEMM_NR + jj] = src[(size_t)k * g->b_rs];
      }
    }
  }
}

/* Rows [lo, hi) of C (a multiple of mc apart) times the packed block of B:
 * pack that slice of A, then every micro-tile. */
static void rows_task(void *ctx, size_t lo, size_t hi, int tid) {
  const gemm_t *g = ctx;
  float *ap = cpu__pool_scratch(g->pool, tid);
  int kc = g->kc, ncp = (g->nc + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
  for (int i0 = (int)lo; i0 < (int)hi; i0 += g->mc) {
    int mc = (int)hi - i0 < g->mc ? (int)hi - i0 : g->mc;
    int mcp = (mc + GEMM_MR - 1) / GEMM_MR * GEMM_MR;
    pack_a(g, ap, i0, mcp, g->k0, kc);
    for (int pj = 0; pj < ncp; pj += GEMM_NR) {
      const float *b = g->bp + (size_t)pj * kc;
      int w = g->nc - pj < GEMM_NR ? g->nc - pj : GEMM_NR;
      for (int pi = 0; pi < mcp; pi += GEMM_MR) {
        const float *a = ap + (size_t)pi * kc;
        float *c = g->c + (size_t)(i0 + pi) * g->ldc + (size_t)(g->j0 + pj);
        int h = mc - pi < GEMM_MR ? mc - pi : GEMM_MR;
        if (h == GEMM_MR && w == GEMM_NR) {
          g->kern(kc, a, b, c, g->ldc);
          continue;
        }
        /* an edge: the same kernel on a padded copy */
        float t[GEMM_MR * GEMM_NR] = {0};
        for (int r = 0; r < h; r++)
          memcpy(t + r * GEMM_NR, c + (size_t)r * g->ldc, (size_t)w * sizeof(float));
        g->kern(kc, a, b, t, GEMM_NR);
        for (int r = 0; r < h; r++)
          memcpy(c + (size_t)r * g->ldc, t + r * GEMM_NR, (size_t)w * sizeof(float));
      }
    }
  }
}

static void gemm_setup(gemm_t *g, cpu_pool_t *p, int M, int N, int K,
                       const float *a, size_t a_rs, size_t a_cs,
                       const float *b, size_t b_rs, size_t b_cs, float *c,
                       size_t ldc) {
  memset(g, 0, sizeof(*g));
  g->M = M;
  g->N = N;
  g->K = K;
  g->a = a;
  g->a_rs = a_rs;
  g->a_cs = a_cs;
  g->b = b;
  g->b_rs = b_rs;
  g->b_cs = b_cs;
  g->c = c;
  g->ldc = ldc;
  g->kern = pick_kernel();
  g->pool = p;
}

/* GotoBLAS's loop order: blocks of NC columns and KC depths of B are packed
 * once, shared; threads take slices of rows, each packing its slice of A.
 * Blocking never changes an element's arithmetic, so the slice height may
 * follow the thread count (enough slices for every thread). */
void cpu_gemm(cpu_pool_t *p, int M, int N, int K, const float *a, size_t a_rs,
              size_t a_cs, const float *b, size_t b_rs, size_t b_cs, float *c,
              size_t ldc) {
  gemm_t g;
  int per;
  if (M <= 0 || N <= 0 || K <= 0)
    return;
  gemm_setup(&g, p, M, N, K, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc);
  g.bp = cpu__pool_shared(p);
  per = (M + 2 * cpu_pool_threads(p) - 1) / (2 * cpu_pool_threads(p));
  g.mc = (per + GEMM_MR - 1) / GEMM_MR * GEMM_MR;
  if (g.mc > GEMM_MC)
    g.mc = GEMM_MC;
  for (g.j0 = 0; g.j0 < N; g.j0 += GEMM_NC) {
    g.nc = N - g.j0 < GEMM_NC ? N - g.j0 : GEMM_NC;
    for (g.k0 = 0; g.k0 < K; g.k0 += GEMM_KC) {
      g.kc = K - g.k0 < GEMM_KC ? K - g.k0 : GEMM_KC;
      cpu_parallel(p, (size_t)(g.nc + GEMM_NR - 1) / GEMM_NR, 4, pack_b_task, &g);
      cpu_parallel(p, (size_t)M, (size_t)g.mc, rows_task, &g);
    }
  }
}

void cpu__gemm_serial(cpu_pool_t *p, int tid, float *bp, int nc_max, int M,
                      int N, int K, const float *a, size_t a_rs, size_t a_cs,
                      const float *b, size_t b_rs, size_t b_cs, float *c,
                      size_t ldc) {
  gemm_t g;
  if (M <= 0 || N <= 0 || K <= 0)
    return;
  gemm_setup(&g, p, M, N, K, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc);
  g.bp = bp;
  g.mc = GEMM_MC;
  for (g.j0 = 0; g.j0 < N; g.j0 += nc_max) {
    g.nc = N - g.j0 < nc_max ? N - g.j0 : nc_max;
    for (g.k0 = 0; g.k0 < K; g.k0 += GEMM_KC) {
      g.kc = K - g.k0 < GEMM_KC ? K - g.k0 : GEMM_KC;
      pack_b_task(&g, 0, (size_t)(g.nc + GEMM_NR - 1) / GEMM_NR, tid);
      rows_task(&g, 0, (size_t)M, tid);
    }
  }
}
