/* attention_sm90.cuh - the wgmma attention kernels of attention_sm90.cu
 * (forward and dK/dV overlapping their own products, D, dQ as a template
 * over its warpgroups and ring depth) and what the variants they were
 * measured against (lab/cuda/attention_sm90.cu) share with them: the
 * swizzled tiles, the wgmma products, the online softmax, the copy rings,
 * the launch helper. Compile for sm_90a only. Internal to model/cuda/ and
 * lab/cuda/. */
#ifndef GPT_CUDA_ATTENTION_SM90_CUH
#define GPT_CUDA_ATTENTION_SM90_CUH

#include <math.h>

#include "kernels.cuh"
#include "ptx.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GC_SM90A 1
#endif

namespace {
constexpr int HD = 64;
constexpr int TILE = 64 * 128; /* bytes of one 64 x 64 tile */

/* byte offset of 16-byte chunk c of row r in a swizzled tile */
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}
/* cp.async wrote through the generic proxy; wgmma reads through the async
 * one. Each thread fences its own completed copies before the barrier. */
__device__ __forceinline__ void fence_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* rows x 64 elements from global (row stride rs elements) into tiles of 64
 * rows, NT threads */
template <int NT>
__device__ __forceinline__ void load_rows(uint32_t s, const void *g0, size_t rs_bytes, int rows,
                                          int tid) {
  const char *g = (const char *)g0;
  for (int i = tid; i < rows * 8; i += NT) {
    const int r = i >> 3, c = i & 7;
    cp_async16(s + (uint32_t)(r >> 6) * TILE + swz(r & 63, c), g + (size_t)r * rs_bytes + c * 16);
  }
}

/* Matrix descriptors, 128-byte swizzle (layout type 1 in bits 62-63), 8-row
 * core groups 1024 bytes apart (stride byte offset). K-major: the leading
 * offset is unused (a k16 step stays inside the 128-byte row: +32 bytes).
 * MN-major: the leading offset would step between 64-element column panels,
 * which a 64-wide tile does not have; a k16 step is 16 rows: +2048 bytes. */
__device__ __forceinline__ uint64_t desc_k(uint32_t a) {
  return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         ((uint64_t)1 << 62);
}
__device__ __forceinline__ uint64_t desc_mn(uint32_t a) {
  return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(8192 >> 4) << 16) |
         ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
/* Pins accumulators between the asynchronous product and its wait: without
 * it the compiler may move reads of d before the wait. */
__device__ __forceinline__ void pin(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; i++)
    asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void pin(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
      asm volatile("" : "+r"(a[i][j])::"memory");
}

#define GC_D32                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "   \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define GC_D32_OUT(d)                                                                       \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
      "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),             \
      "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),          \
      "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),          \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

/* d (+)= A B, m64n64k16, fp32 accumulators; acc = 0 overwrites d.
 * SS: A and B from shared memory, both K-major. */
template <typename T>
__device__ __forceinline__ void mma_ss(float (&d)[32], uint64_t a, uint64_t b, int acc) {
#ifdef GC_SM90A
  if constexpr (std::is_same<T, bf16>::value)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " GC_D32
                 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : GC_D32_OUT(d)
                 : "l"(a), "l"(b), "r"(acc));
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " GC_D32
                 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : GC_D32_OUT(d)
                 : "l"(a), "l"(b), "r"(acc));
#endif
}
/* RS: A from registers (the mma.sync m16n8k16 A layout, per warp 16 rows),
 * B from shared memory, MN-major (transposed). Always accumulates. */
template <typename T>
__device__ __forceinline__ void mma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
#ifdef GC_SM90A
  if constexpr (std::is_same<T, bf16>::value)
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " GC_D32
                 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : GC_D32_OUT(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  else
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " GC_D32
                 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : GC_D32_OUT(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}

/* A 64 x 64 x 64 product, four k16 steps: SS reads A and B from K-major
 * tiles at a and b, RS takes A from the fragments f and B from the MN-major
 * tile at b. */
template <typename T>
__device__ __forceinline__ void mma_tile_ss(float (&d)[32], uint32_t a, uint32_t b) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    mma_ss<T>(d, desc_k(a + 32 * kk), desc_k(b + 32 * kk), kk);
}
template <typename T>
__device__ __forceinline__ void mma_tile_rs(float (&d)[32], const uint32_t (&f)[4][4],
                                            uint32_t b) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++)
    mma_rs<T>(d, f[kk], desc_mn(b + 2048 * kk));
}

/* Accumulator d (element 4n + e: row g + 8 (e >> 1), column 8n + 2 t + (e & 1))
 * as the A fragments of the next product, k16 step kk = columns 16kk.. */
template <typename T>
__device__ __forceinline__ void to_a(uint32_t (&a)[4][4], const float (&d)[32]) {
#pragma unroll
  for (int kk = 0; kk < 4; kk++) {
    a[kk][0] = pack2<T>(d[8 * kk + 0], d[8 * kk + 1]);
    a[kk][1] = pack2<T>(d[8 * kk + 2], d[8 * kk + 3]);
    a[kk][2] = pack2<T>(d[8 * kk + 4], d[8 * kk + 5]);
    a[kk][3] = pack2<T>(d[8 * kk + 6], d[8 * kk + 7]);
  }
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t align1k(void *p) { return (smem_u32(p) + 1023u) & ~1023u; }

/* A warpgroup's 64 x 64 accumulator into 64 rows of global memory (p: the
 * group's first row, rs elements apart), rows g scaled by s0, g + 8 by s1. */
template <typename T>
__device__ __forceinline__ void store_acc(T *p, size_t rs, const float (&d)[32], float s0,
                                          float s1) {
  const int lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const float sc = r ? s1 : s0;
    T *q = p + (size_t)(wi * 16 + (lane >> 2) + 8 * r) * rs + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < 8; n++)
      *reinterpret_cast<uint32_t *>(q + n * 8) =
          pack2<T>(d[4 * n + 2 * r] * sc, d[4 * n + 2 * r + 1] * sc);
  }
}

/* One key tile of the online softmax on a warpgroup's raw scores s (rows
 * g and g + 8 of each warp's 16): scaled to log2 units, keys past the query
 * masked on the diagonal tile, the running max m and sum l updated, s
 * turned into probabilities; corr: the factor the output accumulated so far
 * takes. The first tile holds key 0, visible to every query, so the max is
 * finite from then on. */
__device__ __forceinline__ void softmax_tile(float (&s)[32], float (&m)[2], float (&l)[2],
                                             float (&corr)[2], bool diag, float sl2) {
  const int lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int i = 0; i < 32; i++) {
    float v = s[i] * sl2;
    if (diag && (i >> 2) * 8 + 2 * t4 + (i & 1) > wi * 16 + g + ((i >> 1) & 1) * 8)
      v = -INFINITY;
    s[i] = v;
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < 8; n++)
      mx = fmaxf(mx, fmaxf(s[4 * n + 2 * r], s[4 * n + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(m[r], mx);
    corr[r] = ex2(m[r] - mnew);
    m[r] = mnew;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < 8; n++) {
      const float p0 = ex2(s[4 * n + 2 * r] - mnew), p1 = ex2(s[4 * n + 2 * r + 1] - mnew);
      s[4 * n + 2 * r] = p0;
      s[4 * n + 2 * r + 1] = p1;
      sum += p0 + p1;
    }
    l[r] = l[r] * corr[r] + sum;
  }
}
__device__ __forceinline__ void rescale(float (&o)[32], const float (&corr)[2]) {
#pragma unroll
  for (int i = 0; i < 32; i++)
    o[i] *= corr[(i >> 1) & 1];
}
/* the forward's end: O / l into out (rows of C), the log2-sum-exp into lse */
template <typename T>
__device__ __forceinline__ void fwd_store(T *out, float *lse, const float (&o)[32],
                                          const float (&m)[2], const float (&l)[2], int C) {
  const int lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3;
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float t = l[r];
    t += __shfl_xor_sync(0xffffffffu, t, 1);
    t += __shfl_xor_sync(0xffffffffu, t, 2);
    inv[r] = 1.f / t;
    if ((lane & 3) == 0)
      lse[wi * 16 + (lane >> 2) + 8 * r] = m[r] + log2f(t);
  }
  store_acc<T>(out, C, o, inv[0], inv[1]);
}

/* The tiles stream through a ring of NS buffers, NS - 1 tiles ahead of the
 * one in use, one commit group each (empty past the end, so that the count
 * stays regular). stage_ready: the oldest tile's copies done and visible to
 * every warpgroup's tensor cores, and every thread past the previous tile,
 * whose buffer the caller refills next. */
template <int NS> __device__ __forceinline__ void stage_ready() {
  cp_wait<NS - 2>();
  fence_async();
  __syncthreads();
}
/* key/value tile j (64 rows, 3C elements apart, rs bytes) into buffer
 * j % NS when j < nj; commits a group either way */
template <int NT, int NS, typename T>
__device__ __forceinline__ void kv_issue(uint32_t sK, uint32_t sV, const T *kbase,
                                         const T *vbase, size_t rs, int C, int j, int nj,
                                         int tid) {
  if (j < nj) {
    const uint32_t nb = (uint32_t)(j % NS) * TILE;
    load_rows<NT>(sK + nb, kbase + (size_t)j * 64 * 3 * C, rs, 64, tid);
    load_rows<NT>(sV + nb, vbase + (size_t)j * 64 * 3 * C, rs, 64, tid);
  }
  cp_commit();
}
} // namespace

/* ---- forward, one warpgroup overlapping its own products ------------------
 * 64 queries a block. The next tile's S = Q K^T is issued before this
 * tile's O += P V, and its softmax computed while P V runs: the tensor
 * cores get both products back to back and the softmax hides behind them
 * (FlashAttention-3's intra-warpgroup overlap). Two P fragments alternate,
 * since the one in flight must stay intact; three K/V buffers, since V of
 * the tile in use is read until the next iteration. */
template <typename T>
__global__ void __launch_bounds__(128, 3)
    fa90_fwd_pipe(T *__restrict__ out, float *__restrict__ lse, const T *__restrict__ qkv,
                  int Tn, int NH, float sl2) {
#ifdef GC_SM90A
  constexpr int NT = 128, NS = 3;
  extern __shared__ unsigned char smem[];
  const uint32_t sQ = align1k(smem), sK = sQ + TILE, sV = sK + NS * TILE;
  const int h = blockIdx.x, b = blockIdx.y;
  const int qb = gridDim.z - 1 - blockIdx.z; /* heaviest blocks first */
  const int C = NH * HD;
  const size_t rs = 3 * (size_t)C * sizeof(T);
  const T *qbase = qkv + (size_t)b * Tn * 3 * C + h * HD;
  const T *kbase = qbase + C, *vbase = qbase + 2 * C;
  const int tid = threadIdx.x;
  const int q0 = qb * 64, nj = qb + 1; /* the last tile is the diagonal one */

  load_rows<NT>(sQ, qbase + (size_t)q0 * 3 * C, rs, 64, tid); /* in tile 0's group */
  kv_issue<NT, NS>(sK, sV, kbase, vbase, rs, C, 0, nj, tid);
  kv_issue<NT, NS>(sK, sV, kbase, vbase, rs, C, 1, nj, tid);
  cp_wait<1>();
  fence_async();
  __syncthreads();
  float o[32], s[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, corr[2];
#pragma unroll
  for (int i = 0; i < 32; i++)
    o[i] = s[i] = 0.f;
  wg_fence();
  mma_tile_ss<T>(s, sQ, sK);
  wg_commit();
  wg_wait0();
  pin(s);
  softmax_tile(s, m, l, corr, nj == 1, sl2);
  uint32_t pa[4][4], pb[4][4];
  to_a<T>(pa, s);
  /* tile j < nj - 1: P_j in pc (in flight during the step), P_{j+1} into pn.
   * Both product groups are committed unconditionally: ptxas serializes the
   * products (C7514) when it cannot tell which group a wait retires. */
  auto step = [&](int j, uint32_t(&pc)[4][4], uint32_t(&pn)[4][4]) {
    cp_wait<0>(); /* tile j + 1 ready; every thread past tile j - 1, refilled now */
    fence_async();
    __syncthreads();
    kv_issue<NT, NS>(sK, sV, kbase, vbase, rs, C, j + 2, nj, tid);
    const uint32_t kt = sK + (uint32_t)((j + 1) % NS) * TILE;
    const uint32_t vt = sV + (uint32_t)(j % NS) * TILE;
    wg_fence();
    mma_tile_ss<T>(s, sQ, kt);
    wg_commit();
    mma_tile_rs<T>(o, pc, vt);
    wg_commit();
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); /* S_{j+1} done */
    pin(s);
    softmax_tile(s, m, l, corr, j + 1 == nj - 1, sl2);
    to_a<T>(pn, s);
    wg_wait0(); /* P_j V_j done */
    pin(o);
    pin(pc);
    rescale(o, corr);
  };
  /* the last tile: P V only */
  auto last = [&](int j, uint32_t(&pc)[4][4]) {
    const uint32_t vt = sV + (uint32_t)(j % NS) * TILE;
    wg_fence();
    mma_tile_rs<T>(o, pc, vt);
    wg_commit();
    wg_wait0();
    pin(o);
    pin(pc);
  };
  int j = 0;
  for (; j + 2 < nj; j += 2) {
    step(j, pa, pb);
    step(j + 1, pb, pa);
  }
  if (j + 1 < nj) {
    step(j, pa, pb);
    last(j + 1, pb);
  } else {
    last(j, pa);
  }
  fwd_store<T>(out + ((size_t)b * Tn + q0) * C + h * HD, lse + ((size_t)b * NH + h) * Tn + q0, o,
               m, l, C);
#endif
}

/* ---- backward: D = rowsum(dO * O), one warp per token ------------------- */
/* A warp reads the token's row of all heads in 512-byte sweeps (each lane 16
 * bytes, lanes in order: every load is whole cache lines); the 8 lanes of
 * one head's 64 channels add their sums with three shuffles. (One thread a
 * (token, head) reading 128 bytes alone touched 32 lines a load, each line
 * 8 times: lab/cuda/attention_sm90.cu.) */
template <typename T>
__global__ void fa90_dsum(float *__restrict__ Dsum, const T *__restrict__ dout,
                          const T *__restrict__ out, int B, int Tn, int NH) {
  const long n = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (n >= (long)B * Tn)
    return; /* the whole warp */
  const int C = NH * HD, b = (int)(n / Tn), t = (int)(n % Tn);
  const T *a = dout + (size_t)n * C, *o = out + (size_t)n * C;
  for (int c0 = 0; c0 < C; c0 += 256) {
    const int c = c0 + lane * 8;
    float s = 0.f;
    if (c < C) {
      gc_pack8<T> x = gc_load8_cs(a + c), y = gc_load8_cs(o + c);
#pragma unroll
      for (int k = 0; k < 8; k++)
        s += gc_tof(x.v[k]) * gc_tof(y.v[k]);
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    s += __shfl_xor_sync(0xffffffffu, s, 4);
    if ((lane & 7) == 0 && c < C)
      Dsum[((size_t)b * NH + c / HD) * Tn + t] = s;
  }
}

/* ---- backward: dK, dV ---------------------------------------------------- */
/* P^T and dS^T of one query tile from S^T (st) and dP^T (dp), in place:
 * rows are the warpgroup's keys, columns the tile's 64 queries, whose L and
 * D are in shared memory; diag masks the queries before each key. */
__device__ __forceinline__ void dkv_tile(float (&st)[32], float (&dp)[32], const float *Ls,
                                         const float *Ds, bool diag, float sl2) {
  const int lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int n = 0; n < 8; n++) {
    const int qc = n * 8 + 2 * t4;
    const float2 L2 = *reinterpret_cast<const float2 *>(Ls + qc);
    const float2 D2 = *reinterpret_cast<const float2 *>(Ds + qc);
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int idx = 4 * n + e;
      float p = ex2(st[idx] * sl2 - ((e & 1) ? L2.y : L2.x));
      if (diag && wi * 16 + g + (e >> 1) * 8 > qc + (e & 1))
        p = 0.f;
      st[idx] = p;                                       /* P^T */
      dp[idx] = p * (dp[idx] - ((e & 1) ? D2.y : D2.x)); /* dS^T */
    }
  }
}
/* query tile i (Q, dO, and its L and D) into buffer (i - i0) % NS of the
 * rings at sQ, sO, sLD (L[NS][64] then D[NS][64]), when i < nq; one commit
 * group either way */
template <int NT, int NS, typename T>
__device__ __forceinline__ void q_issue(uint32_t sQ, uint32_t sO, uint32_t sLD, const T *qbase,
                                        const T *obase, const float *lbase, const float *dbase,
                                        int C, int i, int i0, int nq, int tid) {
  if (i < nq) {
    const uint32_t buf = (uint32_t)((i - i0) % NS);
    load_rows<NT>(sQ + buf * TILE, qbase + (size_t)i * 64 * 3 * C, 3 * (size_t)C * sizeof(T),
                  64, tid);
    load_rows<NT>(sO + buf * TILE, obase + (size_t)i * 64 * C, (size_t)C * sizeof(T), 64, tid);
    if (tid < 16)
      cp_async16(sLD + buf * 256 + tid * 16, lbase + i * 64 + tid * 4);
    else if (tid < 32)
      cp_async16(sLD + NS * 256 + buf * 256 + (tid - 16) * 16, dbase + i * 64 + (tid - 16) * 4);
  }
  cp_commit();
}

/* dK, dV with one warpgroup (64 keys) overlapping its own products, as
 * fa90_fwd_pipe: the next query tile's S^T and dP^T run on the tensor cores
 * with this tile's dV and dK products, and its P^T and dS^T are computed
 * meanwhile; the fragments in flight alternate, three query buffers. */
template <typename T>
__global__ void __launch_bounds__(128, 2)
    fa90_dkv_pipe(T *__restrict__ dqkv, const T *__restrict__ qkv, const T *__restrict__ dout,
                  const float *__restrict__ lse, const float *__restrict__ Dsum, int Tn, int NH,
                  float sl2, float scale) {
#ifdef GC_SM90A
  constexpr int NT = 128, NS = 3;
  extern __shared__ unsigned char smem[];
  const uint32_t sK = align1k(smem), sV = sK + TILE, sQ = sV + TILE;
  const uint32_t sO = sQ + NS * TILE, sLD = sO + NS * TILE;
  const float *fLD = reinterpret_cast<const float *>(smem + (sLD - smem_u32(smem)));
  const int h = blockIdx.x, b = blockIdx.y, kb = blockIdx.z; /* most query tiles first */
  const int C = NH * HD;
  const size_t rs = 3 * (size_t)C * sizeof(T);
  const T *qbase = qkv + (size_t)b * Tn * 3 * C + h * HD;
  const T *obase = dout + (size_t)b * Tn * C + h * HD;
  const float *lbase = lse + ((size_t)b * NH + h) * Tn;
  const float *dbase = Dsum + ((size_t)b * NH + h) * Tn;
  const int tid = threadIdx.x, k0 = kb * 64, i0 = kb, nq = Tn / 64;

  load_rows<NT>(sK, qbase + C + (size_t)k0 * 3 * C, rs, 64, tid); /* in the first group */
  load_rows<NT>(sV, qbase + 2 * C + (size_t)k0 * 3 * C, rs, 64, tid);
  q_issue<NT, NS>(sQ, sO, sLD, qbase, obase, lbase, dbase, C, i0, i0, nq, tid);
  q_issue<NT, NS>(sQ, sO, sLD, qbase, obase, lbase, dbase, C, i0 + 1, i0, nq, tid);
  cp_wait<1>();
  fence_async();
  __syncthreads();
  float dk[32], dv[32], st[32], dp[32];
#pragma unroll
  for (int i = 0; i < 32; i++)
    dk[i] = dv[i] = st[i] = dp[i] = 0.f;
  /* S^T and dP^T of the query tile in buffer buf, issued (one group) */
  auto scores = [&](int buf) {
    const uint32_t qt = sQ + (uint32_t)buf * TILE, ot = sO + (uint32_t)buf * TILE;
    mma_tile_ss<T>(st, sK, qt);
    mma_tile_ss<T>(dp, sV, ot);
    wg_commit();
  };
  wg_fence();
  scores(0);
  wg_wait0();
  pin(st);
  pin(dp);
  dkv_tile(st, dp, fLD, fLD + NS * 64, true, sl2); /* tile i0: the diagonal */
  uint32_t pa[4][4], sa[4][4], pb[4][4], sb[4][4];
  to_a<T>(pa, st);
  to_a<T>(sa, dp);
  /* dV += P^T dO and dK += dS^T Q of the tile in buffer buf, issued (one group) */
  auto grads = [&](int buf, const uint32_t(&cp)[4][4], const uint32_t(&cs)[4][4]) {
    const uint32_t qt = sQ + (uint32_t)buf * TILE, ot = sO + (uint32_t)buf * TILE;
    mma_tile_rs<T>(dv, cp, ot);
    mma_tile_rs<T>(dk, cs, qt);
    wg_commit();
  };
  /* query tile i < nq - 1: its P^T, dS^T in cp, cs (in flight), the next
   * tile's into np, ns; both groups always committed (see fa90_fwd_pipe) */
  auto step = [&](int i, uint32_t(&cp)[4][4], uint32_t(&cs)[4][4], uint32_t(&np)[4][4],
                  uint32_t(&ns)[4][4]) {
    const int buf = (i - i0) % NS, nbuf = (i + 1 - i0) % NS;
    cp_wait<0>(); /* tile i + 1 ready; every thread past tile i - 1, refilled now */
    fence_async();
    __syncthreads();
    q_issue<NT, NS>(sQ, sO, sLD, qbase, obase, lbase, dbase, C, i + 2, i0, nq, tid);
    wg_fence();
    scores(nbuf);
    grads(buf, cp, cs);
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); /* the scores */
    pin(st);
    pin(dp);
    dkv_tile(st, dp, fLD + nbuf * 64, fLD + NS * 64 + nbuf * 64, false, sl2);
    to_a<T>(np, st);
    to_a<T>(ns, dp);
    wg_wait0();
    pin(dv);
    pin(dk);
    pin(cp);
    pin(cs);
  };
  auto last = [&](int i, uint32_t(&cp)[4][4], uint32_t(&cs)[4][4]) {
    wg_fence();
    grads((i - i0) % NS, cp, cs);
    wg_wait0();
    pin(dv);
    pin(dk);
    pin(cp);
    pin(cs);
  };
  int i = i0;
  for (; i + 2 < nq; i += 2) {
    step(i, pa, sa, pb, sb);
    step(i + 1, pb, sb, pa, sa);
  }
  if (i + 1 < nq) {
    step(i, pa, sa, pb, sb);
    last(i + 1, pb, sb);
  } else {
    last(i, pa, sa);
  }
  T *kp = dqkv + ((size_t)b * Tn + k0) * 3 * C + C + h * HD;
  store_acc<T>(kp, 3 * (size_t)C, dk, scale, scale);
  store_acc<T>(kp + C, 3 * (size_t)C, dv, 1.f, 1.f);
#endif
}

/* ---- backward: dQ --------------------------------------------------------- */
template <typename T, int NWG, int NS>
__global__ void __launch_bounds__(NWG * 128, 2)
    fa90_dq(T *__restrict__ dqkv, const T *__restrict__ qkv, const T *__restrict__ dout,
            const float *__restrict__ lse, const float *__restrict__ Dsum, int Tn, int NH,
            float sl2, float scale) {
#ifdef GC_SM90A
  constexpr int NT = NWG * 128, BM = NWG * 64;
  extern __shared__ unsigned char smem[];
  const uint32_t sQ = align1k(smem), sO = sQ + NWG * TILE, sK = sO + NWG * TILE;
  const uint32_t sV = sK + NS * TILE;
  const int h = blockIdx.x, b = blockIdx.y;
  const int qb = gridDim.z - 1 - blockIdx.z; /* heaviest blocks first */
  const int C = NH * HD;
  const size_t rs = 3 * (size_t)C * sizeof(T), ors = (size_t)C * sizeof(T);
  const T *qbase = qkv + (size_t)b * Tn * 3 * C + h * HD;
  const T *kbase = qbase + C, *vbase = qbase + 2 * C;
  const T *obase = dout + (size_t)b * Tn * C + h * HD;
  const int tid = threadIdx.x, wg = tid >> 7, wi = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int q0 = qb * BM, qw = q0 + wg * 64;

  const int nj = (q0 + BM) / 64;
  load_rows<NT>(sQ, qbase + (size_t)q0 * 3 * C, rs, BM, tid); /* in tile 0's group */
  load_rows<NT>(sO, obase + (size_t)q0 * C, ors, BM, tid);
#pragma unroll
  for (int j = 0; j < NS - 1; j++)
    kv_issue<NT, NS>(sK, sV, kbase, vbase, rs, C, j, nj, tid);
  float Lr[2], Dr[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const size_t at = ((size_t)b * NH + h) * Tn + qw + wi * 16 + g + 8 * r;
    Lr[r] = lse[at];
    Dr[r] = Dsum[at];
  }

  float dq[32], s[32], dp[32];
#pragma unroll
  for (int i = 0; i < 32; i++)
    dq[i] = s[i] = dp[i] = 0.f;
  const uint32_t qt = sQ + wg * TILE, ot = sO + wg * TILE;
  for (int j = 0; j < nj; j++) {
    const int buf = j % NS;
    stage_ready<NS>();
    kv_issue<NT, NS>(sK, sV, kbase, vbase, rs, C, j + NS - 1, nj, tid);
    const int k0 = j * 64;
    if (k0 <= qw) {
      const uint32_t kt = sK + buf * TILE, vt = sV + buf * TILE;
      wg_fence();
      mma_tile_ss<T>(s, qt, kt);
      mma_tile_ss<T>(dp, ot, vt);
      wg_commit();
      wg_wait0();
      pin(s);
      pin(dp);
      const bool diag = k0 == qw;
#pragma unroll
      for (int i = 0; i < 32; i++) {
        const int r = (i >> 1) & 1;
        float p = ex2(s[i] * sl2 - Lr[r]);
        if (diag && (i >> 2) * 8 + 2 * t4 + (i & 1) > wi * 16 + g + 8 * r)
          p = 0.f;
        dp[i] = p * (dp[i] - Dr[r]); /* dS */
      }
      uint32_t sa[4][4];
      to_a<T>(sa, dp);
      wg_fence();
      mma_tile_rs<T>(dq, sa, kt);
      wg_commit();
      wg_wait0();
      pin(dq);
      pin(sa);
    }
  }
  store_acc<T>(dqkv + ((size_t)b * Tn + qw) * 3 * C + h * HD, 3 * (size_t)C, dq, scale, scale);
#endif
}

/* ---- launchers ------------------------------------------------------------ */
/* shared memory of the *_pipe kernels: three K/V (Q/dO) buffers */
constexpr int FWD_PIPE_SMEM = (1 + 2 * 3) * TILE + 1024;
constexpr int DKV_PIPE_SMEM = (2 + 2 * 3) * TILE + 1024 + 3 * 512;
template <int NWG, int NS> constexpr int fwd90_smem() { return (NWG + 2 * NS) * TILE + 1024; }
template <int NWG, int NS> constexpr int dkv90_smem() {
  return (2 * NWG + 2 * NS) * TILE + 1024 + NS * 512;
}
template <int NWG, int NS> constexpr int dq90_smem() {
  return (2 * NWG + 2 * NS) * TILE + 1024;
}

/* One launch of kernel K; its shared-memory limit raised on first use. */
template <auto K, typename... A>
static int launch90(const char *name, dim3 grid, int threads, int smem, cudaStream_t s,
                    A... args) {
  static bool raised = false;
  if (!raised) {
    GC_CUDA(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    raised = true;
  }
  K<<<grid, threads, smem, s>>>(args...);
  GC_LAUNCH(name);
  return 0;
}

#endif /* GPT_CUDA_ATTENTION_SM90_CUH */
