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
 * of kc columns of packed A (kc x MR) and kc rows of packed B (kc x NR).
 * Inlined into one function per instruction set below. */
static inline __attribute__((always_inline)) void
kern_body(int kc, const float *ap, const float *bp, float *c, size_t ldc) {
  v8 c0a, c0b, c1a, c1b, c2a, c2b, c3a, c3b;
  memcpy(&c0a, c + 0 * ldc, 32);
  memcpy(&c0b, c + 0 * ldc + 8, 32);
  memcpy(&c1a, c + 1 * ldc, 32);
  memcpy(&c1b, c + 1 * ldc + 8, 32);
  memcpy(&c2a, c + 2 * ldc, 32);
  memcpy(&c2b, c + 2 * ldc + 8, 32);
  memcpy(&c3a, c + 3 * ldc, 32);
  memcpy(&c3b, c + 3 * ldc + 8, 32);
  for (int k = 0; k < kc; k++) {
    v8 b0, b1;
    memcpy(&b0, bp, 32);
    memcpy(&b1, bp + 8, 32);
    c0a += ap[0] * b0;
    c0b += ap[0] * b1;
    c1a += ap[1] * b0;
    c1b += ap[1] * b1;
    c2a += ap[2] * b0;
    c2b += ap[2] * b1;
    c3a += ap[3] * b0;
    c3b += ap[3] * b1;
    ap += GEMM_MR;
    bp += GEMM_NR;
  }
  memcpy(c + 0 * ldc, &c0a, 32);
  memcpy(c + 0 * ldc + 8, &c0b, 32);
  memcpy(c + 1 * ldc, &c1a, 32);
  memcpy(c + 1 * ldc + 8, &c1b, 32);
  memcpy(c + 2 * ldc, &c2a, 32);
  memcpy(c + 2 * ldc + 8, &c2b, 32);
  memcpy(c + 3 * ldc, &c3a, 32);
  memcpy(c + 3 * ldc + 8, &c3b, 32);
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
  int M, N, K, tiles_n;
  const float *a, *b;
  size_t a_rs, a_cs, b_rs, b_cs, ldc;
  float *c;
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

/* Pack rows k0 .. k0+kc-1, columns j0 .. j0+nc-1 of B into NR-column
 * panels: bp[panel][k][NR], columns past N zero. */
static void pack_b(const gemm_t *g, float *bp, int j0, int nc, int k0,
                   int kc) {
  for (int pj = 0; pj < nc; pj += GEMM_NR) {
    float *dst = bp + (size_t)pj * kc;
    int w = g->N - (j0 + pj);
    if (w > GEMM_NR)
      w = GEMM_NR;
    if (g->b_cs == 1) {
      for (int k = 0; k < kc; k++) {
        const float *src = g->b + (size_t)(k0 + k) * g->b_rs + (size_t)(j0 + pj);
        int jj = 0;
        for (; jj < w; jj++)
          dst[k * GEMM_NR + jj] = src[jj];
        for (; jj < GEMM_NR; jj++)
          dst[k * GEMM_NR + jj] = 0.0f;
      }
    } else {
      for (int jj = 0; jj < GEMM_NR; jj++) {
        if (jj >= w) {
          for (int k = 0; k < kc; k++)
            dst[k * GEMM_NR + jj] = 0.0f;
          continue;
        }
        const float *src = g->b + (size_t)k0 * g->b_rs + (size_t)(j0 + pj + jj) * g->b_cs;
        for (int k = 0; k < kc; k++)
          dst[k * GEMM_NR + jj] = src[(size_t)k * g->b_rs];
      }
    }
  }
}

/* One macro-tile of C. */
static void gemm_tile(const gemm_t *g, int tile, int tid) {
  float *ap = cpu__pool_scratch(g->pool, tid);
  float *bp = ap + GEMM_MC * GEMM_KC;
  int i0 = (tile / g->tiles_n) * GEMM_MC, j0 = (tile % g->tiles_n) * GEMM_NC;
  int mc = g->M - i0 < GEMM_MC ? g->M - i0 : GEMM_MC;
  int nc = g->N - j0 < GEMM_NC ? g->N - j0 : GEMM_NC;
  int mcp = (mc + GEMM_MR - 1) / GEMM_MR * GEMM_MR;
  int ncp = (nc + GEMM_NR - 1) / GEMM_NR * GEMM_NR;
  for (int k0 = 0; k0 < g->K; k0 += GEMM_KC) {
    int kc = g->K - k0 < GEMM_KC ? g->K - k0 : GEMM_KC;
    pack_a(g, ap, i0, mcp, k0, kc);
    pack_b(g, bp, j0, ncp, k0, kc);
    for (int pi = 0; pi < mcp; pi += GEMM_MR) {
      for (int pj = 0; pj < ncp; pj += GEMM_NR) {
        const float *a = ap + (size_t)pi * kc, *b = bp + (size_t)pj * kc;
        float *c = g->c + (size_t)(i0 + pi) * g->ldc + (size_t)(j0 + pj);
        int h = mc - pi < GEMM_MR ? mc - pi : GEMM_MR;
        int w = nc - pj < GEMM_NR ? nc - pj : GEMM_NR;
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

static void gemm_task(void *ctx, size_t lo, size_t hi, int tid) {
  const gemm_t *g = ctx;
  for (size_t t = lo; t < hi; t++)
    gemm_tile(g, (int)t, tid);
}

void cpu_gemm(cpu_pool_t *p, int M, int N, int K, const float *a, size_t a_rs,
              size_t a_cs, const float *b, size_t b_rs, size_t b_cs, float *c,
              size_t ldc) {
  gemm_t g;
  int tiles_m;
  if (M <= 0 || N <= 0 || K <= 0)
    return;
  g.M = M;
  g.N = N;
  g.K = K;
  g.a = a;
  g.a_rs = a_rs;
  g.a_cs = a_cs;
  g.b = b;
  g.b_rs = b_rs;
  g.b_cs = b_cs;
  g.c = c;
  g.ldc = ldc;
  g.kern = pick_kernel();
  g.pool = p;
  tiles_m = (M + GEMM_MC - 1) / GEMM_MC;
  g.tiles_n = (N + GEMM_NC - 1) / GEMM_NC;
  cpu_parallel(p, (size_t)tiles_m * (size_t)g.tiles_n, 1, gemm_task, &g);
}
