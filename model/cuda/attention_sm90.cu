/* attention_sm90.cu - causal flash attention for Hopper (sm_90a): the
 * matrix products on the warpgroup tensor-core instructions (wgmma), head
 * size 64, bf16/fp16, T a multiple of 128. Compiled for sm_90a only
 * (model/cuda/CMakeLists.txt); attention.cu picks these kernels on
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
 * tiles (cp.async into a ring of NS buffers) with an online softmax.
 * Backward, two kernels and no atomics: dK/dV per 64-key warpgroup walking
 * the query tiles (S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q),
 * and dQ per 64-query warpgroup walking the key tiles (S, dP recomputed,
 * dQ += dS K), on a second stream beside dK/dV. Recomputing S and dP costs
 * two products more than one kernel with atomics, and saves the fp32 dQ
 * buffer, its zeroing, the atomics and the conversion pass.
 * The *_pipe kernels (the defaults) overlap a warpgroup's own work: the
 * next tile's scores go to the tensor cores with this tile's products, and
 * their softmax is computed while those run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "attention_sm90.cuh"

/* ---- forward ------------------------------------------------------------ */
template <typename T, int NWG, int NS>
__global__ void __launch_bounds__(NWG * 128, 2)
    fa90_fwd(T *__restrict__ out, float *__restrict__ lse, const T *__restrict__ qkv, int Tn,
             int NH, float sl2) {
#ifdef GC_SM90A
  constexpr int NT = NWG * 128, BM = NWG * 64;
  extern __shared__ unsigned char smem[];
  const uint32_t sQ = align1k(smem), sK = sQ + NWG * TILE, sV = sK + NS * TILE;
  const int h = blockIdx.x, b = blockIdx.y;
  const int qb = gridDim.z - 1 - blockIdx.z; /* heaviest blocks first */
  const int C = NH * HD;
  const size_t rs = 3 * (size_t)C * sizeof(T);
  const T *qbase = qkv + (size_t)b * Tn * 3 * C + h * HD;
  const T *kbase = qbase + C, *vbase = qbase + 2 * C;
  const int tid = threadIdx.x, wg = tid >> 7;
  const int q0 = qb * BM, qw = q0 + wg * 64;

  const int nj = (q0 + BM) / 64;
  load_rows<NT>(sQ, qbase + (size_t)q0 * 3 * C, rs, BM, tid); /* in tile 0's group */
#pragma unroll
  for (int j = 0; j < NS - 1; j++)
    kv_issue<NT, NS>(sK, sV, kbase, vbase, rs, C, j, nj, tid);
  float o[32], s[32];
#pragma unroll
  for (int i = 0; i < 32; i++)
    o[i] = s[i] = 0.f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
  const uint32_t qt = sQ + wg * TILE;
  for (int j = 0; j < nj; j++) {
    const int buf = j % NS;
    stage_ready<NS>();
    kv_issue<NT, NS>(sK, sV, kbase, vbase, rs, C, j + NS - 1, nj, tid);
    const int k0 = j * 64;
    if (k0 <= qw) { /* warpgroup-uniform: the tile holds keys this group sees */
      const uint32_t kt = sK + buf * TILE, vt = sV + buf * TILE;
      wg_fence();
      mma_tile_ss<T>(s, qt, kt);
      wg_commit();
      wg_wait0();
      pin(s);
      float corr[2];
      softmax_tile(s, mrow, lrow, corr, k0 == qw, sl2);
      rescale(o, corr);
      uint32_t pa[4][4];
      to_a<T>(pa, s);
      wg_fence();
      mma_tile_rs<T>(o, pa, vt);
      wg_commit();
      wg_wait0();
      pin(o);
      pin(pa);
    }
  }
  fwd_store<T>(out + ((size_t)b * Tn + qw) * C + h * HD, lse + ((size_t)b * NH + h) * Tn + qw,
               o, mrow, lrow, C);
#endif
}

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
 * 8 times.) GPT_CUDA_DSUM=thread: that kernel, for comparisons. */
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

template <typename T>
__global__ void fa90_dsum_thread(float *__restrict__ Dsum, const T *__restrict__ dout,
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

template <typename T, int NWG, int NS>
__global__ void __launch_bounds__(NWG * 128, 1)
    fa90_dkv(T *__restrict__ dqkv, const T *__restrict__ qkv, const T *__restrict__ dout,
             const float *__restrict__ lse, const float *__restrict__ Dsum, int Tn, int NH,
             float sl2, float scale) {
#ifdef GC_SM90A
  constexpr int NT = NWG * 128, BN = NWG * 64;
  extern __shared__ unsigned char smem[];
  const uint32_t sK = align1k(smem), sV = sK + NWG * TILE, sQ = sV + NWG * TILE;
  const uint32_t sO = sQ + NS * TILE;  /* dO, [NS] */
  const uint32_t sLD = sO + NS * TILE; /* L[NS][64], D[NS][64] */
  const float *fLD = reinterpret_cast<const float *>(smem + (sLD - smem_u32(smem)));
  const int h = blockIdx.x, b = blockIdx.y, kb = blockIdx.z; /* most query tiles first */
  const int C = NH * HD;
  const size_t rs = 3 * (size_t)C * sizeof(T);
  const T *qbase = qkv + (size_t)b * Tn * 3 * C + h * HD;
  const T *kbase = qbase + C, *vbase = qbase + 2 * C;
  const T *obase = dout + (size_t)b * Tn * C + h * HD;
  const float *lbase = lse + ((size_t)b * NH + h) * Tn;
  const float *dbase = Dsum + ((size_t)b * NH + h) * Tn;
  const int tid = threadIdx.x, wg = tid >> 7;
  const int k0 = kb * BN, kw = k0 + wg * 64;

  const int i0 = k0 / 64, nq = Tn / 64;
  auto issue_q = [&](int i) {
    q_issue<NT, NS>(sQ, sO, sLD, qbase, obase, lbase, dbase, C, i, i0, nq, tid);
  };
  load_rows<NT>(sK, kbase + (size_t)k0 * 3 * C, rs, BN, tid); /* in the first group */
  load_rows<NT>(sV, vbase + (size_t)k0 * 3 * C, rs, BN, tid);
#pragma unroll
  for (int i = 0; i < NS - 1; i++)
    issue_q(i0 + i);

  float dk[32], dv[32], st[32], dp[32];
#pragma unroll
  for (int i = 0; i < 32; i++)
    dk[i] = dv[i] = st[i] = dp[i] = 0.f;
  const uint32_t kt = sK + wg * TILE, vt = sV + wg * TILE;
  for (int i = i0; i < nq; i++) {
    const int buf = (i - i0) % NS;
    stage_ready<NS>();
    issue_q(i + NS - 1);
    const int q0 = i * 64;
    if (q0 + 63 >= kw) { /* warpgroup-uniform: some query of the tile sees the group's keys */
      const uint32_t qt = sQ + buf * TILE, ot = sO + buf * TILE;
      wg_fence();
      mma_tile_ss<T>(st, kt, qt);
      mma_tile_ss<T>(dp, vt, ot);
      wg_commit();
      wg_wait0();
      pin(st);
      pin(dp);
      dkv_tile(st, dp, fLD + buf * 64, fLD + NS * 64 + buf * 64, q0 == kw, sl2);
      uint32_t pa[4][4], sa[4][4];
      to_a<T>(pa, st);
      to_a<T>(sa, dp);
      wg_fence();
      mma_tile_rs<T>(dv, pa, ot);
      mma_tile_rs<T>(dk, sa, qt);
      wg_commit();
      wg_wait0();
      pin(dv);
      pin(dk);
      pin(pa);
      pin(sa);
    }
  }
  T *kp = dqkv + ((size_t)b * Tn + kw) * 3 * C + C + h * HD;
  store_acc<T>(kp, 3 * (size_t)C, dk, scale, scale);
  store_acc<T>(kp + C, 3 * (size_t)C, dv, 1.f, 1.f);
#endif
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

/* ---- launchers ------------------------------------------------------------ */
template <typename T, int NS>
static int fwd90(int nwg, T *out, float *lse, const T *qkv, int B, int Tn, int NH, float sl2,
                 cudaStream_t s) {
  if (nwg == 1)
    return launch90<fa90_fwd<T, 1, NS>>("fa90_fwd", dim3(NH, B, Tn / 64), 128,
                                        fwd90_smem<1, NS>(), s, out, lse, qkv, Tn, NH, sl2);
  return launch90<fa90_fwd<T, 2, NS>>("fa90_fwd", dim3(NH, B, Tn / 128), 256,
                                      fwd90_smem<2, NS>(), s, out, lse, qkv, Tn, NH, sl2);
}

template <typename T>
int gc_attention90_fwd(int nwg, int stages, T *out, float *lse, const T *qkv, int B, int Tn,
                       int NH, float sl2, cudaStream_t s) {
  if (nwg == 0)
    return launch90<fa90_fwd_pipe<T>>("fa90_fwd_pipe", dim3(NH, B, Tn / 64), 128,
                                      (1 + 2 * 3) * TILE + 1024, s, out, lse, qkv, Tn, NH, sl2);
  switch (stages) {
  case 2: return fwd90<T, 2>(nwg, out, lse, qkv, B, Tn, NH, sl2, s);
  case 4: return fwd90<T, 4>(nwg, out, lse, qkv, B, Tn, NH, sl2, s);
  default: return fwd90<T, 3>(nwg, out, lse, qkv, B, Tn, NH, sl2, s);
  }
}

template <typename T, int NS>
static int bwd90(int kv_nwg, int q_nwg, T *dqkv, const float *D, const T *dout, const T *qkv,
                 const float *lse, int B, int Tn, int NH, float sl2, float scale,
                 cudaStream_t s, cudaStream_t sq) {
  if (kv_nwg == 0)
    GC_TRY(launch90<fa90_dkv_pipe<T>>("fa90_dkv_pipe", dim3(NH, B, Tn / 64), 128,
                                      (2 + 2 * 3) * TILE + 1024 + 3 * 512, s, dqkv, qkv, dout,
                                      lse, D, Tn, NH, sl2, scale));
  else if (kv_nwg == 1)
    GC_TRY(launch90<fa90_dkv<T, 1, NS>>("fa90_dkv", dim3(NH, B, Tn / 64), 128,
                                        dkv90_smem<1, NS>(), s, dqkv, qkv, dout, lse, D, Tn,
                                        NH, sl2, scale));
  else
    GC_TRY(launch90<fa90_dkv<T, 2, NS>>("fa90_dkv", dim3(NH, B, Tn / 128), 256,
                                        dkv90_smem<2, NS>(), s, dqkv, qkv, dout, lse, D, Tn,
                                        NH, sl2, scale));
  if (q_nwg == 1)
    return launch90<fa90_dq<T, 1, NS>>("fa90_dq", dim3(NH, B, Tn / 64), 128,
                                       dq90_smem<1, NS>(), sq, dqkv, qkv, dout, lse, D, Tn, NH,
                                       sl2, scale);
  return launch90<fa90_dq<T, 2, NS>>("fa90_dq", dim3(NH, B, Tn / 128), 256, dq90_smem<2, NS>(),
                                     sq, dqkv, qkv, dout, lse, D, Tn, NH, sl2, scale);
}

/* dQ beside dK/dV: the two kernels are independent once D is there, and on
 * a second stream each fills the other's last, partly empty wave. One
 * stream and two events per process, made on first use on the device then
 * current (the backend uses one device a process); GPT_CUDA_ATTN_SERIAL=1
 * keeps both kernels on the caller's stream. */
struct side_stream {
  cudaStream_t st;
  cudaEvent_t fork, join;
};
static side_stream *side(void) {
  static side_stream sd;
  static int state = -1; /* -1 unknown, 0 none, 1 made */
  if (state < 0) {
    const char *e = getenv("GPT_CUDA_ATTN_SERIAL");
    state = 0;
    if (!(e && !strcmp(e, "1")) &&
        cudaStreamCreateWithFlags(&sd.st, cudaStreamNonBlocking) == cudaSuccess &&
        cudaEventCreateWithFlags(&sd.fork, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventCreateWithFlags(&sd.join, cudaEventDisableTiming) == cudaSuccess)
      state = 1;
    else
      (void)cudaGetLastError(); /* serial then */
  }
  return state ? &sd : nullptr;
}

template <typename T>
int gc_attention90_bwd(int kv_nwg, int q_nwg, int stages, T *dqkv, float *Dsum,
                       const T *dout, const T *qkv, const T *out, const float *lse, int B,
                       int Tn, int NH, float sl2, float scale, cudaStream_t s) {
  const long n = (long)B * Tn * NH;
  static const int dsum_thread = getenv("GPT_CUDA_DSUM") && !strcmp(getenv("GPT_CUDA_DSUM"),
                                                                    "thread");
  if (dsum_thread) {
    fa90_dsum_thread<T><<<gc_cdiv(n, 256), 256, 0, s>>>(Dsum, dout, out, B, Tn, NH);
  } else {
    const long tokens = (long)B * Tn; /* a warp each, 8 a block */
    fa90_dsum<T><<<gc_cdiv(tokens, 8), 256, 0, s>>>(Dsum, dout, out, B, Tn, NH);
  }
  GC_LAUNCH("fa90_dsum");
  side_stream *sd = side();
  cudaStream_t sq = s;
  if (sd) {
    GC_CUDA(cudaEventRecord(sd->fork, s));
    GC_CUDA(cudaStreamWaitEvent(sd->st, sd->fork, 0));
    sq = sd->st;
  }
  int rc;
  switch (stages) {
  case 2:
    rc = bwd90<T, 2>(kv_nwg, q_nwg, dqkv, Dsum, dout, qkv, lse, B, Tn, NH, sl2, scale, s, sq);
    break;
  case 4:
    rc = bwd90<T, 4>(kv_nwg, q_nwg, dqkv, Dsum, dout, qkv, lse, B, Tn, NH, sl2, scale, s, sq);
    break;
  default:
    rc = bwd90<T, 3>(kv_nwg, q_nwg, dqkv, Dsum, dout, qkv, lse, B, Tn, NH, sl2, scale, s, sq);
  }
  if (sd) { /* the caller's stream waits for dQ, whatever happened */
    GC_CUDA(cudaEventRecord(sd->join, sd->st));
    GC_CUDA(cudaStreamWaitEvent(s, sd->join, 0));
  }
  return rc;
}

#define GC_INST90(T)                                                                        \
  template int gc_attention90_fwd<T>(int, int, T *, float *, const T *, int, int, int, float, \
                                     cudaStream_t);                                             \
  template int gc_attention90_bwd<T>(int, int, int, T *, float *, const T *, const T *,          \
                                     const T *, const float *, int, int, int, float, float,      \
                                     cudaStream_t);
GC_INST90(bf16)
GC_INST90(f16)
