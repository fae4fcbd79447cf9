/* attention.cuh - the device code of attention.cu (the mma.sync kernels of
 * the tensor-core path, the generic kernels, backward's pre and post
 * passes) and their launchers, templates over the tile shape: the product
 * instantiates one shape (attention.cu), lab/cuda/attention_mma.cu the
 * others it was compared with. Internal to model/cuda/ and lab/cuda/. */
#ifndef GPT_CUDA_ATTENTION_CUH
#define GPT_CUDA_ATTENTION_CUH

#include <math.h>

#include <type_traits>

#include "kernels.cuh"
#include "ptx.cuh"

/* ---- PTX helpers (and ptx.cuh) ----------------------------------------- */
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], const void *p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(smem_u32(p)));
}
/* c += a (16x16, row) * b (16x8, col), fp32 accumulators. */
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same<T, bf16>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
/* Two C fragments (16x8 each, consecutive columns) as one A fragment (16x16). */
template <typename T>
__device__ __forceinline__ void c2a(uint32_t (&a)[4], const float (&c0)[4],
                                    const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

namespace {
constexpr int HD = 64;  /* head size of the fast path */
constexpr int LD = 72;  /* padded shared row (elements) */
constexpr int BBQ = 64; /* backward: queries per tile */
/* Forward: FBR queries per block (16 per warp), FBC keys per tile. */
template <int FBR, int FBC> constexpr size_t fwd_smem() {
  return (size_t)(FBR + 4 * FBC) * LD * 2;
}
/* Backward: BBK keys per block (16 per warp). */
template <int BBK> constexpr size_t bwd_smem() {
  return (size_t)(2 * BBK + 4 * BBQ) * LD * 2 + (size_t)BBQ * (BBK + 8) * 2 + 4 * BBQ * 4;
}
} // namespace

/* ---- forward, tensor cores --------------------------------------------- */
template <typename T, int FBR, int FBC>
__global__ void __launch_bounds__(FBR * 2)
    fa_fwd_kernel(T *__restrict__ out, float *__restrict__ lse,
                  const T *__restrict__ qkv, int Tn, int NH, float scale_log2) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int NT = FBR * 2; /* threads: FBR / 16 warps */
  constexpr int NS = FBC / 8; /* score n-tiles per warp */
  extern __shared__ __align__(16) unsigned char smem[];
  T *sQ = reinterpret_cast<T *>(smem);
  T *sK = sQ + FBR * LD;
  T *sV = sK + 2 * FBC * LD;
  const int h = blockIdx.x, b = blockIdx.y;
  const int qb = gridDim.z - 1 - blockIdx.z; /* heaviest blocks first */
  const int C = NH * HD;
  const size_t rs = 3 * (size_t)C;
  const T *qbase = qkv + (size_t)b * Tn * rs + h * HD;
  const T *kbase = qbase + C, *vbase = qbase + 2 * C;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int q0 = qb * FBR, wq0 = q0 + warp * 16;

  for (int i = tid; i < FBR * 8; i += NT) {
    int r = i >> 3, c = (i & 7) * 8;
    cp_async16(&sQ[r * LD + c], qbase + (size_t)(q0 + r) * rs + c);
  }
  auto load_kv = [&](int j, int buf) {
    for (int i = tid; i < FBC * 8; i += NT) {
      int r = i >> 3, c = (i & 7) * 8;
      size_t go = (size_t)(j * FBC + r) * rs + c;
      cp_async16(&sK[(buf * FBC + r) * LD + c], kbase + go);
      cp_async16(&sV[(buf * FBC + r) * LD + c], vbase + go);
    }
  };
  load_kv(0, 0);
  cp_commit();

  const int nj = (q0 + FBR - 1) / FBC + 1;
  float o[8][4];
#pragma unroll
  for (int i = 0; i < 8; i++)
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
  uint32_t qf[4][4];

  for (int j = 0; j < nj; j++) {
    if (j + 1 < nj) {
      load_kv(j + 1, (j + 1) & 1);
      cp_commit();
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int ks = 0; ks < 4; ks++)
        ldsm4(qf[ks], &sQ[(warp * 16 + (lane & 15)) * LD + ks * 16 + (lane >> 4) * 8]);
    }
    const int k0 = j * FBC;
    if (k0 <= wq0 + 15) { /* warp-uniform: some key of the tile is visible */
      const T *Kt = sK + (j & 1) * FBC * LD;
      const T *Vt = sV + (j & 1) * FBC * LD;
      float s[NS][4];
#pragma unroll
      for (int i = 0; i < NS; i++)
        s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < 4; ks++) {
#pragma unroll
        for (int np = 0; np < NS / 2; np++) {
          uint32_t bb[4];
          ldsm4(bb, &Kt[(np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + ks * 16 +
                        ((lane >> 3) & 1) * 8]);
          mma16816<T>(s[2 * np], qf[ks], bb[0], bb[1]);
          mma16816<T>(s[2 * np + 1], qf[ks], bb[2], bb[3]);
        }
      }
      const bool diag = k0 + FBC - 1 > wq0;
#pragma unroll
      for (int nt = 0; nt < NS; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float v = s[nt][e] * scale_log2;
          if (diag) {
            int row = wq0 + g + (e >> 1) * 8, key = k0 + nt * 8 + 2 * t4 + (e & 1);
            if (key > row)
              v = -INFINITY;
          }
          s[nt][e] = v;
        }
#pragma unroll
      for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NS; nt++)
          mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        /* Tile 0 holds key 0, visible to every query: mnew is finite. */
        float mnew = fmaxf(mrow[r], mx);
        float corr = exp2f(mrow[r] - mnew);
        mrow[r] = mnew;
        lrow[r] *= corr;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
          o[nt][2 * r] *= corr;
          o[nt][2 * r + 1] *= corr;
        }
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
          float p0 = exp2f(s[nt][2 * r] - mnew), p1 = exp2f(s[nt][2 * r + 1] - mnew);
          s[nt][2 * r] = p0;
          s[nt][2 * r + 1] = p1;
          lrow[r] += p0 + p1;
        }
      }
#pragma unroll
      for (int kk = 0; kk < NS / 2; kk++) {
        uint32_t a[4];
        c2a<T>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int dp = 0; dp < 4; dp++) {
          uint32_t bb[4];
          ldsm4t(bb, &Vt[(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 +
                         (lane >> 4) * 8]);
          mma16816<T>(o[2 * dp], a, bb[0], bb[1]);
          mma16816<T>(o[2 * dp + 1], a, bb[2], bb[3]);
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float l = lrow[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    float inv = 1.f / l;
    int row = wq0 + g + 8 * r;
    T *op = out + ((size_t)b * Tn + row) * C + h * HD + 2 * t4;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
      *reinterpret_cast<uint32_t *>(op + nt * 8) =
          pack2<T>(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
    if (t4 == 0)
      lse[((size_t)b * NH + h) * Tn + row] = mrow[r] + log2f(l);
  }
#endif
}

/* ---- backward, tensor cores -------------------------------------------- */
template <typename T, int BBK>
__global__ void __launch_bounds__(BBK * 2)
    fa_bwd_kernel(T *__restrict__ dqkv, float *__restrict__ dq_acc,
                  const T *__restrict__ qkv, const T *__restrict__ dout,
                  const float *__restrict__ lse, const float *__restrict__ Dsum,
                  int Tn, int NH, float scale_log2, float scale) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int NT = BBK * 2;        /* threads: BBK / 16 warps */
  constexpr int LDS = BBK + 8;       /* dS row stride */
  constexpr int DQC = 64 / (BBK / 64); /* dQ columns per warp */
  extern __shared__ __align__(16) unsigned char smem[];
  T *sK = reinterpret_cast<T *>(smem);
  T *sV = sK + BBK * LD;
  T *sQ = sV + BBK * LD;       /* [2][BBQ][LD] */
  T *sdO = sQ + 2 * BBQ * LD;  /* [2][BBQ][LD] */
  T *sdS = sdO + 2 * BBQ * LD; /* [BBQ][LDS]: dS, query-major */
  float *sL = reinterpret_cast<float *>(sdS + BBQ * LDS); /* [2][BBQ] */
  float *sD = sL + 2 * BBQ;                               /* [2][BBQ] */
  const int h = blockIdx.x, b = blockIdx.y;
  const int kb = gridDim.z - 1 - blockIdx.z; /* most query tiles first */
  const int C = NH * HD;
  const size_t rs = 3 * (size_t)C;
  const T *qbase = qkv + (size_t)b * Tn * rs + h * HD;
  const T *kbase = qbase + C, *vbase = qbase + 2 * C;
  const T *dobase = dout + (size_t)b * Tn * C + h * HD;
  const float *lbase = lse + ((size_t)b * NH + h) * Tn;
  const float *dbase = Dsum + ((size_t)b * NH + h) * Tn;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int k0 = kb * BBK, wk0 = k0 + warp * 16;

  for (int i = tid; i < BBK * 8; i += NT) {
    int r = i >> 3, c = (i & 7) * 8;
    size_t go = (size_t)(k0 + r) * rs + c;
    cp_async16(&sK[r * LD + c], kbase + go);
    cp_async16(&sV[r * LD + c], vbase + go);
  }
  auto load_q = [&](int i, int buf) {
    const int q0 = i * BBQ;
    for (int x = tid; x < BBQ * 8; x += NT) {
      int r = x >> 3, c = (x & 7) * 8;
      cp_async16(&sQ[(buf * BBQ + r) * LD + c], qbase + (size_t)(q0 + r) * rs + c);
      cp_async16(&sdO[(buf * BBQ + r) * LD + c], dobase + (size_t)(q0 + r) * C + c);
    }
    if (tid < BBQ / 4)
      cp_async16(&sL[buf * BBQ + tid * 4], lbase + q0 + tid * 4);
    else if (tid < BBQ / 2)
      cp_async16(&sD[buf * BBQ + (tid - BBQ / 4) * 4], dbase + q0 + (tid - BBQ / 4) * 4);
  };
  const int i0 = k0 / BBQ, nq = Tn / BBQ;
  load_q(i0, 0);
  cp_commit();
  cp_wait<0>();
  __syncthreads();

  uint32_t kf[4][4], vf[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ks++) {
    ldsm4(kf[ks], &sK[(warp * 16 + (lane & 15)) * LD + ks * 16 + (lane >> 4) * 8]);
    ldsm4(vf[ks], &sV[(warp * 16 + (lane & 15)) * LD + ks * 16 + (lane >> 4) * 8]);
  }
  float dk[8][4], dv[8][4];
#pragma unroll
  for (int i = 0; i < 8; i++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      dk[i][e] = dv[i][e] = 0.f;

  for (int i = i0; i < nq; i++) {
    const int buf = (i - i0) & 1;
    if (i + 1 < nq) {
      /* The other buffer was last read in the previous iteration, which
       * ended with a barrier. */
      load_q(i + 1, buf ^ 1);
      cp_commit();
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    __syncthreads();
    const int q0 = i * BBQ;
    const T *Qs = sQ + buf * BBQ * LD, *dOs = sdO + buf * BBQ * LD;
    const float *Ls = sL + buf * BBQ, *Ds = sD + buf * BBQ;
    if (q0 + BBQ - 1 >= wk0) { /* warp-uniform: some query sees some key */
      float s[8][4], dp[8][4];
#pragma unroll
      for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          s[n][e] = dp[n][e] = 0.f;
      /* S^T = K Q^T and dP^T = V dO^T: 16 keys x 64 queries per warp. */
#pragma unroll
      for (int ks = 0; ks < 4; ks++) {
#pragma unroll
        for (int np = 0; np < 4; np++) {
          const int off = (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + ks * 16 +
                          ((lane >> 3) & 1) * 8;
          uint32_t bq[4], bo[4];
          ldsm4(bq, &Qs[off]);
          ldsm4(bo, &dOs[off]);
          mma16816<T>(s[2 * np], kf[ks], bq[0], bq[1]);
          mma16816<T>(s[2 * np + 1], kf[ks], bq[2], bq[3]);
          mma16816<T>(dp[2 * np], vf[ks], bo[0], bo[1]);
          mma16816<T>(dp[2 * np + 1], vf[ks], bo[2], bo[3]);
        }
      }
      const bool diag = wk0 + 15 > q0;
#pragma unroll
      for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int ql = nt * 8 + 2 * t4 + (e & 1);
          float p = exp2f(s[nt][e] * scale_log2 - Ls[ql]);
          if (diag && wk0 + g + (e >> 1) * 8 > q0 + ql)
            p = 0.f;
          s[nt][e] = p;
          dp[nt][e] = p * (dp[nt][e] - Ds[ql]); /* dS^T */
        }
      /* dV += P^T dO and dK += dS^T Q (queries are the k dimension). */
#pragma unroll
      for (int kk = 0; kk < 4; kk++) {
        uint32_t ap[4], as[4];
        c2a<T>(ap, s[2 * kk], s[2 * kk + 1]);
        c2a<T>(as, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
        for (int np = 0; np < 4; np++) {
          const int off = (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + np * 16 +
                          (lane >> 4) * 8;
          uint32_t bo[4], bq[4];
          ldsm4t(bo, &dOs[off]);
          ldsm4t(bq, &Qs[off]);
          mma16816<T>(dv[2 * np], ap, bo[0], bo[1]);
          mma16816<T>(dv[2 * np + 1], ap, bo[2], bo[3]);
          mma16816<T>(dk[2 * np], as, bq[0], bq[1]);
          mma16816<T>(dk[2 * np + 1], as, bq[2], bq[3]);
        }
      }
      /* dS, query-major, for dQ = dS K across the block's 128 keys. */
#pragma unroll
      for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          sdS[(nt * 8 + 2 * t4 + (e & 1)) * LDS + warp * 16 + g + (e >> 1) * 8] =
              gc_from<T>(dp[nt][e]);
    } else {
      for (int x = lane; x < BBQ * 16; x += 32)
        sdS[(x >> 4) * LDS + warp * 16 + (x & 15)] = gc_from<T>(0.f);
    }
    __syncthreads();
    {
      /* dQ tile (64 x 64): warp takes 16 queries x DQC dims, k = BBK keys. */
      const int qr = (warp & 3) * 16, dc = (warp >> 2) * DQC;
      float acc[DQC / 8][4];
#pragma unroll
      for (int n = 0; n < DQC / 8; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < BBK / 16; kk++) {
        uint32_t a[4];
        ldsm4(a, &sdS[(qr + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8]);
#pragma unroll
        for (int np = 0; np < DQC / 16; np++) {
          uint32_t bk[4];
          ldsm4t(bk, &sK[(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dc +
                         np * 16 + (lane >> 4) * 8]);
          mma16816<T>(acc[2 * np], a, bk[0], bk[1]);
          mma16816<T>(acc[2 * np + 1], a, bk[2], bk[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < DQC / 8; nt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
          const int q = q0 + qr + g + 8 * r;
          float *p = dq_acc + ((size_t)b * Tn + q) * C + h * HD + dc + nt * 8 + 2 * t4;
#if __CUDA_ARCH__ >= 900
          atomicAdd(reinterpret_cast<float2 *>(p),
                    make_float2(acc[nt][2 * r], acc[nt][2 * r + 1]));
#else
          atomicAdd(p, acc[nt][2 * r]);
          atomicAdd(p + 1, acc[nt][2 * r + 1]);
#endif
        }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int key = wk0 + g + 8 * r;
    T *kp = dqkv + ((size_t)b * Tn + key) * rs + C + h * HD + 2 * t4;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
      *reinterpret_cast<uint32_t *>(kp + nt * 8) =
          pack2<T>(dk[nt][2 * r] * scale, dk[nt][2 * r + 1] * scale);
      *reinterpret_cast<uint32_t *>(kp + C + nt * 8) =
          pack2<T>(dv[nt][2 * r], dv[nt][2 * r + 1]);
    }
  }
#endif
}

/* ---- generic kernels (any head size up to 256, any T, fp32 too) -------- */
constexpr int GMAXD = 8; /* 8 x 32 lanes = 256 dims */

/* The (query, head, batch row) of this warp, 4 warps a block; false past
 * the end. */
__device__ __forceinline__ bool generic_query(int B, int Tn, int NH, int *q, int *h, int *b) {
  const long gw = (long)blockIdx.x * 4 + (threadIdx.x >> 5);
  if (gw >= (long)B * NH * Tn)
    return false;
  *q = (int)(gw % Tn), *h = (int)((gw / Tn) % NH), *b = (int)(gw / ((long)Tn * NH));
  return true;
}

template <typename T>
__global__ void attn_fwd_generic(T *out, float *lse, const T *qkv, int B, int Tn,
                                 int NH, int hd, float scale_log2) {
  __shared__ float sq[4][256];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int q, h, b;
  if (!generic_query(B, Tn, NH, &q, &h, &b))
    return;
  const int C = NH * hd;
  const size_t rs = 3 * (size_t)C;
  const T *base = qkv + (size_t)b * Tn * rs + h * hd;
  for (int d = lane; d < hd; d += 32)
    sq[w][d] = gc_tof(base[(size_t)q * rs + d]);
  __syncwarp();
  float acc[GMAXD];
#pragma unroll
  for (int i = 0; i < GMAXD; i++)
    acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int k0 = 0; k0 <= q; k0 += 32) {
    const int key = k0 + lane;
    float s = -INFINITY;
    if (key <= q) {
      const T *kp = base + (size_t)key * rs + C;
      float dot = 0.f;
      for (int d = 0; d < hd; d++)
        dot += sq[w][d] * gc_tof(kp[d]);
      s = dot * scale_log2;
    }
    const float mnew = fmaxf(m, gc_warp_max(s));
    const float corr = exp2f(m - mnew);
    const float p = key <= q ? exp2f(s - mnew) : 0.f;
    l = l * corr + gc_warp_sum(p);
    m = mnew;
#pragma unroll
    for (int i = 0; i < GMAXD; i++)
      acc[i] *= corr;
    const int nk = min(32, q - k0 + 1);
    for (int jj = 0; jj < nk; jj++) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const T *vp = base + (size_t)(k0 + jj) * rs + 2 * C;
#pragma unroll
      for (int i = 0; i < GMAXD; i++) {
        const int d = lane + 32 * i;
        if (d < hd)
          acc[i] += pj * gc_tof(vp[d]);
      }
    }
  }
  T *op = out + ((size_t)b * Tn + q) * C + h * hd;
#pragma unroll
  for (int i = 0; i < GMAXD; i++) {
    const int d = lane + 32 * i;
    if (d < hd)
      op[d] = gc_from<T>(acc[i] / l);
  }
  if (lane == 0)
    lse[((size_t)b * NH + h) * Tn + q] = m + log2f(l);
}

template <typename T>
__global__ void attn_bwd_generic(float *dq, float *dk, float *dv, const T *qkv,
                                 const T *dout, const float *lse, const float *Dsum,
                                 int B, int Tn, int NH, int hd, float scale_log2) {
  __shared__ float sq[4][256], sdo[4][256];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int q, h, b;
  if (!generic_query(B, Tn, NH, &q, &h, &b))
    return;
  const int C = NH * hd;
  const size_t rs = 3 * (size_t)C;
  const T *base = qkv + (size_t)b * Tn * rs + h * hd;
  const size_t orow = ((size_t)b * Tn + q) * C + h * hd;
  for (int d = lane; d < hd; d += 32) {
    sq[w][d] = gc_tof(base[(size_t)q * rs + d]);
    sdo[w][d] = gc_tof(dout[orow + d]);
  }
  __syncwarp();
  const float L = lse[((size_t)b * NH + h) * Tn + q];
  const float D = Dsum[((size_t)b * NH + h) * Tn + q];
  float acc[GMAXD];
#pragma unroll
  for (int i = 0; i < GMAXD; i++)
    acc[i] = 0.f;
  for (int k0 = 0; k0 <= q; k0 += 32) {
    const int key = k0 + lane;
    float p = 0.f, ds = 0.f;
    if (key <= q) {
      const T *kp = base + (size_t)key * rs + C, *vp = kp + C;
      float s = 0.f, dpv = 0.f;
      for (int d = 0; d < hd; d++) {
        s += sq[w][d] * gc_tof(kp[d]);
        dpv += sdo[w][d] * gc_tof(vp[d]);
      }
      p = exp2f(s * scale_log2 - L);
      ds = p * (dpv - D);
    }
    const int nk = min(32, q - k0 + 1);
    for (int jj = 0; jj < nk; jj++) {
      const float pj = __shfl_sync(0xffffffffu, p, jj);
      const float dsj = __shfl_sync(0xffffffffu, ds, jj);
      const T *kp = base + (size_t)(k0 + jj) * rs + C;
      const size_t krow = ((size_t)b * Tn + k0 + jj) * C + h * hd;
#pragma unroll
      for (int i = 0; i < GMAXD; i++) {
        const int d = lane + 32 * i;
        if (d < hd) {
          acc[i] += dsj * gc_tof(kp[d]);
          atomicAdd(&dk[krow + d], dsj * sq[w][d]);
          atomicAdd(&dv[krow + d], pj * sdo[w][d]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < GMAXD; i++) {
    const int d = lane + 32 * i;
    if (d < hd)
      dq[orow + d] = acc[i];
  }
}

/* D[b,h,t] = sum over d of dO * O (one warp per row and head); zeroes the
 * fp32 accumulators the backward kernels add into. */
template <typename T>
__global__ void attn_bwd_pre(float *Dsum, float *zero0, float *zero1, float *zero2,
                             const T *dout, const T *out, int B, int Tn, int NH, int hd) {
  const int lane = threadIdx.x & 31;
  const long gw = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (gw >= (long)B * Tn * NH)
    return;
  const int h = (int)(gw % NH);
  const long bt = gw / NH;
  const size_t row = (size_t)bt * NH * hd + (size_t)h * hd;
  float s = 0.f;
  for (int d = lane; d < hd; d += 32) {
    s += gc_tof(dout[row + d]) * gc_tof(out[row + d]);
    if (zero0)
      zero0[row + d] = 0.f;
    if (zero1)
      zero1[row + d] = 0.f;
    if (zero2)
      zero2[row + d] = 0.f;
  }
  s = gc_warp_sum(s);
  if (lane == 0) {
    const int b = (int)(bt / Tn), t = (int)(bt % Tn);
    Dsum[((size_t)b * NH + h) * Tn + t] = s;
  }
}

/* dqkv parts (q, k, v) from fp32 accumulators [N][C], times their scales;
 * a NULL source leaves its part as the main kernel wrote it. */
template <typename T>
__global__ void attn_bwd_post(T *dqkv, const float *dq, const float *dk,
                              const float *dv, float sq, float sk, long N, int C) {
  const long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 8;
  if (i >= N * C)
    return;
  const long n = i / C;
  const int c = (int)(i % C);
  T *row = dqkv + (size_t)n * 3 * C + c;
  const float *src[3] = {dq, dk, dv};
  const float sc[3] = {sq, sk, 1.f};
#pragma unroll
  for (int p = 0; p < 3; p++) {
    if (!src[p])
      continue;
    gc_pack8<T> o;
#pragma unroll
    for (int k = 0; k < 8; k++)
      o.v[k] = gc_from<T>(src[p][i + k] * sc[p]);
    gc_store8(row + (size_t)p * C, o);
  }
}

template <typename T, int FBR, int FBC>
static int launch_fwd(T *out, float *lse, const T *qkv, int B, int Tn, int NH, float sl2,
                      cudaStream_t s) {
  static bool attr_set = false;
  if (!attr_set) {
    GC_CUDA(cudaFuncSetAttribute(fa_fwd_kernel<T, FBR, FBC>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)fwd_smem<FBR, FBC>()));
    attr_set = true;
  }
  dim3 grid(NH, B, Tn / FBR);
  fa_fwd_kernel<T, FBR, FBC><<<grid, FBR * 2, fwd_smem<FBR, FBC>(), s>>>(out, lse, qkv, Tn, NH,
                                                                       sl2);
  GC_LAUNCH("fa_fwd_kernel");
  return 0;
}

template <typename T, int BBK>
static int launch_bwd(T *dqkv, float *dq, const T *dout, const T *qkv, const float *lse,
                      const float *Dsum, int B, int Tn, int NH, float sl2, float scale,
                      cudaStream_t s) {
  static bool attr_set = false;
  if (!attr_set) {
    GC_CUDA(cudaFuncSetAttribute(fa_bwd_kernel<T, BBK>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)bwd_smem<BBK>()));
    attr_set = true;
  }
  dim3 grid(NH, B, Tn / BBK);
  fa_bwd_kernel<T, BBK><<<grid, BBK * 2, bwd_smem<BBK>(), s>>>(dqkv, dq, qkv, dout, lse, Dsum,
                                                              Tn, NH, sl2, scale);
  GC_LAUNCH("fa_bwd_kernel");
  return 0;
}

static float softmax_scale_log2(int hd) {
  return (float)(1.0 / sqrt((double)hd) * 1.4426950408889634);
}

#endif /* GPT_CUDA_ATTENTION_CUH */
