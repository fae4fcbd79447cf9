/* attention_sm90.cu - causal flash attention for Hopper (sm_90a): the
 * matrix products on the warpgroup tensor-core instructions (wgmma), head
 * size 64, bf16/fp16, T a multiple of 128. Compiled for sm_90a only
 * (runtime/cuda/CMakeLists.txt); attention.cu picks these kernels on
 * compute capability 9.0 and keeps its mma.sync kernels for other GPUs.
 *
 * Shared memory tiles are 64 rows of 64 elements (128 bytes), 16-byte
 * chunks swizzled as the tensor cores' 128-byte mode expects (chunk c of
 * row r stored at c ^ (r % 8)), each tile 1024-byte aligned. One such tile
 * serves as a K-major operand (the head dimension is the reduction: Q K^T)
 * and as an MN-major one (the head dimension is the output: P V). Every
 * product is 64 x 64 per warpgroup (m64n64k16 x 4), A from shared memory
 * or, for P and dS, straight from the registers the scores are in: the
 * accumulator layout of one product is the A-fragment layout of the next.
 *
 * Forward: a block of NWG warpgroups takes 64 * NWG queries, walks 64-key
 * tiles (cp.async, double buffered) with an online softmax.
 * Backward, two kernels and no atomics: dK/dV per 64-key warpgroup walking
 * the query tiles (S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q),
 * and dQ per 64-query warpgroup walking the key tiles (S, dP recomputed,
 * dQ += dS K). Recomputing S and dP costs two products more than one
 * kernel with atomics, and saves the fp32 dQ buffer, its zeroing, the
 * atomics and the conversion pass. */
#include <math.h>

#include <type_traits>

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

/* Key/value tile j of nj (64 rows each, 3C elements apart, rs bytes) ready
 * in buffer j & 1: the copies of tile j + 1 go out first, then tile j's are
 * waited for and made visible to the tensor cores of every warpgroup. */
template <int NT, typename T>
__device__ __forceinline__ void kv_ready(uint32_t sK, uint32_t sV, const T *kbase,
                                         const T *vbase, size_t rs, int C, int j, int nj,
                                         int tid) {
  if (j + 1 < nj) {
    const int nb = ((j + 1) & 1) * TILE;
    load_rows<NT>(sK + nb, kbase + (size_t)(j + 1) * 64 * 3 * C, rs, 64, tid);
    load_rows<NT>(sV + nb, vbase + (size_t)(j + 1) * 64 * 3 * C, rs, 64, tid);
    cp_commit();
    cp_wait<1>();
  } else {
    cp_wait<0>();
  }
  fence_async();
  __syncthreads();
}
} // namespace

/* ---- forward ------------------------------------------------------------ */
template <typename T, int NWG>
__global__ void __launch_bounds__(NWG * 128, 2)
    fa90_fwd(T *__restrict__ out, float *__restrict__ lse, const T *__restrict__ qkv, int Tn,
             int NH, float sl2) {
#ifdef GC_SM90A
  constexpr int NT = NWG * 128, BM = NWG * 64;
  extern __shared__ unsigned char smem[];
  const uint32_t sQ = align1k(smem), sK = sQ + NWG * TILE, sV = sK + 2 * TILE;
  const int h = blockIdx.x, b = blockIdx.y;
  const int qb = gridDim.z - 1 - blockIdx.z; /* heaviest blocks first */
  const int C = NH * HD;
  const size_t rs = 3 * (size_t)C * sizeof(T);
  const T *qbase = qkv + (size_t)b * Tn * 3 * C + h * HD;
  const T *kbase = qbase + C, *vbase = qbase + 2 * C;
  const int tid = threadIdx.x, wg = tid >> 7, wi = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int q0 = qb * BM, qw = q0 + wg * 64;

  load_rows<NT>(sQ, qbase + (size_t)q0 * 3 * C, rs, BM, tid);
  load_rows<NT>(sK, kbase, rs, 64, tid);
  load_rows<NT>(sV, vbase, rs, 64, tid);
  cp_commit();

  const int nj = (q0 + BM) / 64;
  float o[32], s[32];
#pragma unroll
  for (int i = 0; i < 32; i++)
    o[i] = s[i] = 0.f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
  const uint32_t qt = sQ + wg * TILE;
  for (int j = 0; j < nj; j++) {
    const int buf = j & 1;
    kv_ready<NT>(sK, sV, kbase, vbase, rs, C, j, nj, tid);
    const int k0 = j * 64;
    if (k0 <= qw) { /* warpgroup-uniform: the tile holds keys this group sees */
      const uint32_t kt = sK + buf * TILE, vt = sV + buf * TILE;
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        mma_ss<T>(s, desc_k(qt + 32 * kk), desc_k(kt + 32 * kk), kk);
      wg_commit();
      wg_wait0();
      pin(s);
      const bool diag = k0 == qw;
#pragma unroll
      for (int i = 0; i < 32; i++) {
        float v = s[i] * sl2;
        if (diag) {
          const int row = wi * 16 + g + ((i >> 1) & 1) * 8, key = (i >> 2) * 8 + 2 * t4 + (i & 1);
          if (key > row)
            v = -INFINITY;
        }
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
        /* Tile 0 holds key 0, visible to every query: mnew is finite. */
        const float mnew = fmaxf(mrow[r], mx);
        const float corr = ex2(mrow[r] - mnew);
        mrow[r] = mnew;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < 8; n++) {
          const float p0 = ex2(s[4 * n + 2 * r] - mnew), p1 = ex2(s[4 * n + 2 * r + 1] - mnew);
          s[4 * n + 2 * r] = p0;
          s[4 * n + 2 * r + 1] = p1;
          sum += p0 + p1;
          o[4 * n + 2 * r] *= corr;
          o[4 * n + 2 * r + 1] *= corr;
        }
        lrow[r] = lrow[r] * corr + sum;
      }
      uint32_t pa[4][4];
      to_a<T>(pa, s);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        mma_rs<T>(o, pa[kk], desc_mn(vt + 2048 * kk));
      wg_commit();
      wg_wait0();
      pin(o);
      pin(pa);
    }
    __syncthreads(); /* buffer buf is refilled in the next iteration */
  }
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float l = lrow[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[r] = 1.f / l;
    if (t4 == 0)
      lse[((size_t)b * NH + h) * Tn + qw + wi * 16 + g + 8 * r] = mrow[r] + log2f(l);
  }
  store_acc<T>(out + ((size_t)b * Tn + qw) * C + h * HD, C, o, inv[0], inv[1]);
#endif
}

/* ---- backward: D = rowsum(dO * O), one thread per (token, head) ---------- */
template <typename T>
__global__ void fa90_dsum(float *__restrict__ Dsum, const T *__restrict__ dout,
                          const T *__restrict__ out, int B, int Tn, int NH) {
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long)B * Tn * NH)
    return;
  const int h = (int)(i % NH);
  const long n = i / NH;
  const T *a = dout + (size_t)i * HD, *o = out + (size_t)i * HD;
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < HD; c += 8) {
    gc_pack8<T> x = gc_load8_cs(a + c), y = gc_load8_cs(o + c);
#pragma unroll
    for (int k = 0; k < 8; k++)
      s += gc_tof(x.v[k]) * gc_tof(y.v[k]);
  }
  const int b = (int)(n / Tn), t = (int)(n % Tn);
  Dsum[((size_t)b * NH + h) * Tn + t] = s;
}

/* ---- backward: dK, dV ---------------------------------------------------- */
template <typename T, int NWG>
__global__ void __launch_bounds__(NWG * 128, 1)
    fa90_dkv(T *__restrict__ dqkv, const T *__restrict__ qkv, const T *__restrict__ dout,
             const float *__restrict__ lse, const float *__restrict__ Dsum, int Tn, int NH,
             float sl2, float scale) {
#ifdef GC_SM90A
  constexpr int NT = NWG * 128, BN = NWG * 64;
  extern __shared__ unsigned char smem[];
  const uint32_t sK = align1k(smem), sV = sK + NWG * TILE, sQ = sV + NWG * TILE;
  const uint32_t sO = sQ + 2 * TILE;  /* dO, [2] */
  const uint32_t sLD = sO + 2 * TILE; /* L[2][64], D[2][64] */
  const float *fLD = reinterpret_cast<const float *>(smem + (sLD - smem_u32(smem)));
  const int h = blockIdx.x, b = blockIdx.y, kb = blockIdx.z; /* most query tiles first */
  const int C = NH * HD;
  const size_t rs = 3 * (size_t)C * sizeof(T), ors = (size_t)C * sizeof(T);
  const T *qbase = qkv + (size_t)b * Tn * 3 * C + h * HD;
  const T *kbase = qbase + C, *vbase = qbase + 2 * C;
  const T *obase = dout + (size_t)b * Tn * C + h * HD;
  const float *lbase = lse + ((size_t)b * NH + h) * Tn;
  const float *dbase = Dsum + ((size_t)b * NH + h) * Tn;
  const int tid = threadIdx.x, wg = tid >> 7, wi = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int k0 = kb * BN, kw = k0 + wg * 64;

  auto load_q = [&](int i, int buf) {
    load_rows<NT>(sQ + buf * TILE, qbase + (size_t)i * 64 * 3 * C, rs, 64, tid);
    load_rows<NT>(sO + buf * TILE, obase + (size_t)i * 64 * C, ors, 64, tid);
    if (tid < 16)
      cp_async16(sLD + buf * 256 + tid * 16, lbase + i * 64 + tid * 4);
    else if (tid < 32)
      cp_async16(sLD + 512 + buf * 256 + (tid - 16) * 16, dbase + i * 64 + (tid - 16) * 4);
  };
  load_rows<NT>(sK, kbase + (size_t)k0 * 3 * C, rs, BN, tid);
  load_rows<NT>(sV, vbase + (size_t)k0 * 3 * C, rs, BN, tid);
  const int i0 = k0 / 64, nq = Tn / 64;
  load_q(i0, 0);
  cp_commit();

  float dk[32], dv[32], st[32], dp[32];
#pragma unroll
  for (int i = 0; i < 32; i++)
    dk[i] = dv[i] = st[i] = dp[i] = 0.f;
  const uint32_t kt = sK + wg * TILE, vt = sV + wg * TILE;
  for (int i = i0; i < nq; i++) {
    const int buf = (i - i0) & 1;
    if (i + 1 < nq) {
      load_q(i + 1, buf ^ 1);
      cp_commit();
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    fence_async();
    __syncthreads();
    const int q0 = i * 64;
    if (q0 + 63 >= kw) { /* warpgroup-uniform: some query of the tile sees the group's keys */
      const uint32_t qt = sQ + buf * TILE, ot = sO + buf * TILE;
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        mma_ss<T>(st, desc_k(kt + 32 * kk), desc_k(qt + 32 * kk), kk);
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        mma_ss<T>(dp, desc_k(vt + 32 * kk), desc_k(ot + 32 * kk), kk);
      wg_commit();
      wg_wait0();
      pin(st);
      pin(dp);
      const float *Ls = fLD + buf * 64, *Ds = fLD + 128 + buf * 64;
      const bool diag = q0 == kw;
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
      uint32_t pa[4][4], sa[4][4];
      to_a<T>(pa, st);
      to_a<T>(sa, dp);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        mma_rs<T>(dv, pa[kk], desc_mn(ot + 2048 * kk));
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        mma_rs<T>(dk, sa[kk], desc_mn(qt + 2048 * kk));
      wg_commit();
      wg_wait0();
      pin(dv);
      pin(dk);
      pin(pa);
      pin(sa);
    }
    __syncthreads();
  }
  T *kp = dqkv + ((size_t)b * Tn + kw) * 3 * C + C + h * HD;
  store_acc<T>(kp, 3 * (size_t)C, dk, scale, scale);
  store_acc<T>(kp + C, 3 * (size_t)C, dv, 1.f, 1.f);
#endif
}

/* ---- backward: dQ --------------------------------------------------------- */
template <typename T, int NWG>
__global__ void __launch_bounds__(NWG * 128, 2)
    fa90_dq(T *__restrict__ dqkv, const T *__restrict__ qkv, const T *__restrict__ dout,
            const float *__restrict__ lse, const float *__restrict__ Dsum, int Tn, int NH,
            float sl2, float scale) {
#ifdef GC_SM90A
  constexpr int NT = NWG * 128, BM = NWG * 64;
  extern __shared__ unsigned char smem[];
  const uint32_t sQ = align1k(smem), sO = sQ + NWG * TILE, sK = sO + NWG * TILE;
  const uint32_t sV = sK + 2 * TILE;
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

  load_rows<NT>(sQ, qbase + (size_t)q0 * 3 * C, rs, BM, tid);
  load_rows<NT>(sO, obase + (size_t)q0 * C, ors, BM, tid);
  load_rows<NT>(sK, kbase, rs, 64, tid);
  load_rows<NT>(sV, vbase, rs, 64, tid);
  cp_commit();
  float Lr[2], Dr[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const size_t at = ((size_t)b * NH + h) * Tn + qw + wi * 16 + g + 8 * r;
    Lr[r] = lse[at];
    Dr[r] = Dsum[at];
  }

  const int nj = (q0 + BM) / 64;
  float dq[32], s[32], dp[32];
#pragma unroll
  for (int i = 0; i < 32; i++)
    dq[i] = s[i] = dp[i] = 0.f;
  const uint32_t qt = sQ + wg * TILE, ot = sO + wg * TILE;
  for (int j = 0; j < nj; j++) {
    const int buf = j & 1;
    kv_ready<NT>(sK, sV, kbase, vbase, rs, C, j, nj, tid);
    const int k0 = j * 64;
    if (k0 <= qw) {
      const uint32_t kt = sK + buf * TILE, vt = sV + buf * TILE;
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        mma_ss<T>(s, desc_k(qt + 32 * kk), desc_k(kt + 32 * kk), kk);
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        mma_ss<T>(dp, desc_k(ot + 32 * kk), desc_k(vt + 32 * kk), kk);
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
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
        mma_rs<T>(dq, sa[kk], desc_mn(kt + 2048 * kk));
      wg_commit();
      wg_wait0();
      pin(dq);
      pin(sa);
    }
    __syncthreads();
  }
  store_acc<T>(dqkv + ((size_t)b * Tn + qw) * 3 * C + h * HD, 3 * (size_t)C, dq, scale, scale);
#endif
}

/* ---- launchers ------------------------------------------------------------ */
template <int NWG> constexpr int fwd90_smem() { return (NWG + 4) * TILE + 1024; }
template <int NWG> constexpr int dkv90_smem() { return (2 * NWG + 4) * TILE + 1024 + 1024; }
template <int NWG> constexpr int dq90_smem() { return (2 * NWG + 4) * TILE + 1024; }

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

template <typename T>
int gc_attention90_fwd(int nwg, T *out, float *lse, const T *qkv, int B, int Tn, int NH,
                       float sl2, cudaStream_t s) {
  if (nwg == 1)
    return launch90<fa90_fwd<T, 1>>("fa90_fwd", dim3(NH, B, Tn / 64), 128, fwd90_smem<1>(), s,
                                    out, lse, qkv, Tn, NH, sl2);
  return launch90<fa90_fwd<T, 2>>("fa90_fwd", dim3(NH, B, Tn / 128), 256, fwd90_smem<2>(), s,
                                  out, lse, qkv, Tn, NH, sl2);
}

template <typename T>
int gc_attention90_bwd(int kv_nwg, int q_nwg, T *dqkv, float *Dsum, const T *dout,
                       const T *qkv, const T *out, const float *lse, int B, int Tn, int NH,
                       float sl2, float scale, cudaStream_t s) {
  const long n = (long)B * Tn * NH;
  fa90_dsum<T><<<gc_cdiv(n, 256), 256, 0, s>>>(Dsum, dout, out, B, Tn, NH);
  GC_LAUNCH("fa90_dsum");
  const float *cD = Dsum;
  if (kv_nwg == 1)
    GC_TRY(launch90<fa90_dkv<T, 1>>("fa90_dkv", dim3(NH, B, Tn / 64), 128, dkv90_smem<1>(), s,
                                    dqkv, qkv, dout, lse, cD, Tn, NH, sl2, scale));
  else
    GC_TRY(launch90<fa90_dkv<T, 2>>("fa90_dkv", dim3(NH, B, Tn / 128), 256, dkv90_smem<2>(), s,
                                    dqkv, qkv, dout, lse, cD, Tn, NH, sl2, scale));
  if (q_nwg == 1)
    GC_TRY(launch90<fa90_dq<T, 1>>("fa90_dq", dim3(NH, B, Tn / 64), 128, dq90_smem<1>(), s,
                                   dqkv, qkv, dout, lse, cD, Tn, NH, sl2, scale));
  else
    GC_TRY(launch90<fa90_dq<T, 2>>("fa90_dq", dim3(NH, B, Tn / 128), 256, dq90_smem<2>(), s,
                                   dqkv, qkv, dout, lse, cD, Tn, NH, sl2, scale));
  return 0;
}

#define GC_INST90(T)                                                                        \
  template int gc_attention90_fwd<T>(int, T *, float *, const T *, int, int, int, float,     \
                                     cudaStream_t);                                          \
  template int gc_attention90_bwd<T>(int, int, T *, float *, const T *, const T *, const T *, \
                                     const float *, int, int, int, float, float, cudaStream_t);
GC_INST90(bf16)
GC_INST90(f16)
