/* kernels.cu - the memory-bound kernels of the CUDA backend: embeddings,
 * LayerNorm (forward; backward fused with the residual gradient), the
 * softmax cross-entropy of the classifier, GELU and bias-gradient fallbacks,
 * AdamW over the flat parameter array, the gradient norm. Rows of C
 * channels are read 8 elements (16 bytes) at a time, one warp per row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "kernels.cuh"

/* ---- embeddings ------------------------------------------------------- */
template <typename T>
__global__ void encoder_fwd_kernel(T *out, const int *tok, const T *wte, const T *wpe,
                                   long N, int Tn, int C) {
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  const int nv = C / 8;
  if (i >= N * nv)
    return;
  const long n = i / nv;
  const int c = (int)(i % nv) * 8, t = (int)(n % Tn);
  gc_pack8<T> a = gc_load8(wte + (size_t)tok[n] * C + c);
  gc_pack8<T> b = gc_load8(wpe + (size_t)t * C + c), o;
#pragma unroll
  for (int k = 0; k < 8; k++)
    o.v[k] = gc_from<T>(gc_tof(a.v[k]) + gc_tof(b.v[k]));
  gc_store8(out + (size_t)n * C + c, o);
}

/* One thread per (t, 8 channels): walks the batch, scatters into dwte with
 * atomics (tokens repeat) and owns dwpe[t] outright. */
template <typename T>
__global__ void encoder_bwd_kernel(float *dwte, float *dwpe, const T *dout,
                                   const int *tok, int B, int Tn, int C) {
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  const int nv = C / 8;
  if (i >= (long)Tn * nv)
    return;
  const int t = (int)(i / nv), c = (int)(i % nv) * 8;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int b = 0; b < B; b++) {
    const long n = (long)b * Tn + t;
    gc_pack8<T> d = gc_load8(dout + (size_t)n * C + c);
    float *dst = dwte + (size_t)tok[n] * C + c;
    float f[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
      f[k] = gc_tof(d.v[k]);
      acc[k] += f[k];
    }
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4 *>(dst), make_float4(f[0], f[1], f[2], f[3]));
    atomicAdd(reinterpret_cast<float4 *>(dst + 4), make_float4(f[4], f[5], f[6], f[7]));
#else
#pragma unroll
    for (int k = 0; k < 8; k++)
      atomicAdd(dst + k, f[k]);
#endif
  }
  float *p = dwpe + (size_t)t * C + c;
#pragma unroll
  for (int k = 0; k < 8; k++)
    p[k] += acc[k];
}

template <typename T>
int gc_encoder_fwd(T *out, const int *tok, const T *wte, const T *wpe, int B, int Tn,
                   int C, cudaStream_t s) {
  long n = (long)B * Tn * (C / 8);
  encoder_fwd_kernel<T><<<gc_cdiv(n, 256), 256, 0, s>>>(out, tok, wte, wpe, (long)B * Tn,
                                                        Tn, C);
  GC_LAUNCH("encoder_fwd_kernel");
  return 0;
}

template <typename T>
int gc_encoder_bwd(float *dwte, float *dwpe, const T *dout, const int *tok, int B,
                   int Tn, int C, cudaStream_t s) {
  long n = (long)Tn * (C / 8);
  encoder_bwd_kernel<T><<<gc_cdiv(n, 128), 128, 0, s>>>(dwte, dwpe, dout, tok, B, Tn, C);
  GC_LAUNCH("encoder_bwd_kernel");
  return 0;
}

/* ---- LayerNorm --------------------------------------------------------- */
/* NI: 8-element vectors per lane (C <= 256 * NI), in registers. */
template <typename T, int NI>
__global__ void ln_fwd_kernel(T *out, float *mean, float *rstd, const T *inp,
                              const T *w, const T *b, int N, int C) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= N)
    return;
  const int nv = C >> 3;
  const T *x = inp + (size_t)row * C;
  float xv[NI][8];
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < NI; i++) {
    const int v = lane + 32 * i;
    if (v < nv) {
      gc_pack8<T> p = gc_load8(x + v * 8);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        xv[i][k] = gc_tof(p.v[k]);
        sum += xv[i][k];
      }
    } else {
#pragma unroll
      for (int k = 0; k < 8; k++)
        xv[i][k] = 0.f;
    }
  }
  const float mu = gc_warp_sum(sum) / C;
  float var = 0.f;
#pragma unroll
  for (int i = 0; i < NI; i++)
    if (lane + 32 * i < nv)
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float d = xv[i][k] - mu;
        var += d * d;
      }
  const float rs = rsqrtf(gc_warp_sum(var) / C + 1e-5f);
#pragma unroll
  for (int i = 0; i < NI; i++) {
    const int v = lane + 32 * i;
    if (v < nv) {
      gc_pack8<T> wp = gc_load8(w + v * 8), bp = gc_load8(b + v * 8), o;
#pragma unroll
      for (int k = 0; k < 8; k++)
        o.v[k] = gc_from<T>((xv[i][k] - mu) * rs * gc_tof(wp.v[k]) + gc_tof(bp.v[k]));
      gc_store8(out + (size_t)row * C + v * 8, o);
    }
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

/* LayerNorm backward. Each lane keeps its channels' dw and db partial
 * sums (and, when dsum is given, the column sums of the dinp it writes) in
 * registers; the block adds them in shared memory, laid out [k][vector] so
 * that a warp's lanes hit distinct banks, then once into the fp32 gradient.
 * dsum turns the residual gradient this kernel writes into the bias
 * gradient of the projection that fed that residual: no extra pass.
 * A row is spread over tw = ceil(C / 256) warps, one
 * 16-byte vector of 8 channels per lane, so that a lane's column sums are
 * 24 registers whatever C is (a warp a row keeps 24 per 256 channels:
 * 206 registers at C = 768, one block of 8 warps per SM, latency-bound at
 * ~1.4 TB/s; lab/cuda/layernorm_backward.cu). A block holds S rows at once (S * tw warps, at most 24); the
 * warps of a row meet at a named barrier (id 1 + slot) to add their halves
 * of the two row sums; the next row's loads are issued before this row's
 * arithmetic (into registers: 80 of them, a few bytes spill in bf16).
 * (Measured on the H200 at C = 768, N = 16384: ~52 us a call against ~70
 * for the warp-per-row kernel; copying two rows ahead into a shared-memory ring
 * with cp.async instead measured the same as this, and was removed.) */
__device__ __forceinline__ void named_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
constexpr int LNB_WARPS = 24;
/* One row of the rows kernel: the two row sums (across the tw warps of
 * the row through red and a named barrier), dinp written, the column sums
 * accumulated. */
template <typename T>
__device__ __forceinline__ void ln_bwd_row(T *dinp, long row, int C, int nv, int v, bool has,
                                           int tw, int slot, int warp, int lane, int par,
                                           float scale, float mu, float rs,
                                           const gc_pack8<T> &dp, const gc_pack8<T> &xp,
                                           const gc_pack8<T> &op, int accumulate,
                                           const float *w_sh, float2 (*red)[LNB_WARPS],
                                           float (&adw)[8], float (&adb)[8], float (&ads)[8]) {
  float s1 = 0.f, s2 = 0.f;
  if (has)
#pragma unroll
    for (int k2 = 0; k2 < 8; k2++) {
      const float dy = gc_tof(dp.v[k2]) * scale, xh = (gc_tof(xp.v[k2]) - mu) * rs;
      const float dn = dy * w_sh[k2 * nv + v];
      s1 += dn;
      s2 += dn * xh;
      adb[k2] += dy;
      adw[k2] += dy * xh;
    }
  s1 = gc_warp_sum(s1);
  s2 = gc_warp_sum(s2);
  if (tw > 1) {
    if (lane == 0)
      red[par][warp] = make_float2(s1, s2);
    named_sync(1 + slot, tw * 32);
    s1 = s2 = 0.f;
    for (int i = 0; i < tw; i++) {
      const float2 t = red[par][slot * tw + i];
      s1 += t.x;
      s2 += t.y;
    }
  }
  s1 /= C;
  s2 /= C;
  if (has) {
    gc_pack8<T> o;
#pragma unroll
    for (int k2 = 0; k2 < 8; k2++) {
      const float dy = gc_tof(dp.v[k2]) * scale, xh = (gc_tof(xp.v[k2]) - mu) * rs;
      float dx = (dy * w_sh[k2 * nv + v] - s1 - xh * s2) * rs;
      if (accumulate)
        dx += gc_tof(op.v[k2]);
      o.v[k2] = gc_from<T>(dx);
      ads[k2] += gc_tof(o.v[k2]);
    }
    gc_store8(dinp + (size_t)row * C + v * 8, o);
  }
}
/* The block's column sums: in shared memory, then once into the gradient. */
__device__ __forceinline__ void ln_bwd_flush(float *dw, float *db, float *dsum, int C, int nv,
                                             int v, bool has, float *acc_sh,
                                             const float (&adw)[8], const float (&adb)[8],
                                             const float (&ads)[8]) {
  if (has)
#pragma unroll
    for (int k = 0; k < 8; k++) {
      atomicAdd(&acc_sh[k * nv + v], adw[k]);
      atomicAdd(&acc_sh[C + k * nv + v], adb[k]);
      if (dsum)
        atomicAdd(&acc_sh[2 * C + k * nv + v], ads[k]);
    }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int j = (c & 7) * nv + (c >> 3);
    atomicAdd(&dw[c], acc_sh[j]);
    atomicAdd(&db[c], acc_sh[C + j]);
    if (dsum)
      atomicAdd(&dsum[c], acc_sh[2 * C + j]);
  }
}

template <typename T>
__global__ void __launch_bounds__(LNB_WARPS * 32, 1)
    ln_bwd_rows_kernel(T *dinp, float *dw, float *db, float *dsum, const T *dout, float scale,
                       const T *inp, const T *w, const float *mean, const float *rstd, int N,
                       int C, int accumulate, int tw, int S) {
  __shared__ float acc_sh[3 * 2048], w_sh[2048];
  __shared__ float2 red[2][LNB_WARPS];
  const int nv = C >> 3, nsh = dsum ? 3 * C : 2 * C;
  for (int i = threadIdx.x; i < nsh; i += blockDim.x)
    acc_sh[i] = 0.f;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    w_sh[(c & 7) * nv + (c >> 3)] = gc_tof(w[c]);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slot = warp / tw, wr = warp - slot * tw, v = wr * 32 + lane;
  const bool has = v < nv;
  float adw[8], adb[8], ads[8];
#pragma unroll
  for (int k = 0; k < 8; k++)
    adw[k] = adb[k] = ads[k] = 0.f;
  const long stride = (long)gridDim.x * S;
  long row = (long)blockIdx.x * S + slot;
  gc_pack8<T> dpn, xpn;
  float mun = 0.f, rsn = 0.f;
  auto fetch = [&](long r) {
    if (r < N) {
      mun = mean[r];
      rsn = rstd[r];
      if (has) {
        dpn = gc_load8_cs(dout + (size_t)r * C + v * 8);
        xpn = gc_load8_cs(inp + (size_t)r * C + v * 8);
      }
    }
  };
  fetch(row);
  for (int par = 0; row < N; row += stride, par ^= 1) {
    const gc_pack8<T> dp = dpn, xp = xpn;
    const float mu = mun, rs = rsn;
    /* the residual gradient is needed last: not prefetched (registers) */
    gc_pack8<T> op;
    if (has && accumulate)
      op = gc_load8_cs(dinp + (size_t)row * C + v * 8);
    fetch(row + stride);
    ln_bwd_row<T>(dinp, row, C, nv, v, has, tw, slot, warp, lane, par, scale, mu, rs, dp, xp, op,
                  accumulate, w_sh, red, adw, adb, ads);
  }
  ln_bwd_flush(dw, db, dsum, C, nv, v, has, acc_sh, adw, adb, ads);
}

static int ln_check(int C) {
  if (C % 8 != 0 || C > 2048)
    return gc_fail(-EINVAL, "layernorm",
                   "channels must be a multiple of 8 and at most 2048", __FILE__,
                   __LINE__);
  return 0;
}

#define LN_DISPATCH(NIV, CALL)                                                  \
  switch (NIV) {                                                                \
  case 1: CALL(1); break;                                                       \
  case 2: CALL(2); break;                                                       \
  case 3: CALL(3); break;                                                       \
  case 4: CALL(4); break;                                                       \
  case 5: CALL(5); break;                                                       \
  case 6: CALL(6); break;                                                       \
  case 7: CALL(7); break;                                                       \
  default: CALL(8); break;                                                      \
  }

template <typename T>
int gc_layernorm_fwd(T *out, float *mean, float *rstd, const T *inp, const T *w,
                     const T *b, int N, int C, cudaStream_t s) {
  GC_TRY(ln_check(C));
  const int ni = gc_cdiv(C / 8, 32);
#define LNF(NI)                                                                 \
  ln_fwd_kernel<T, NI><<<gc_cdiv(N, 8), 256, 0, s>>>(out, mean, rstd, inp, w, b, N, C)
  LN_DISPATCH(ni, LNF)
#undef LNF
  GC_LAUNCH("ln_fwd_kernel");
  return 0;
}

template <typename T>
int gc_layernorm_bwd(T *dinp, float *dw, float *db, float *dsum, const T *dout,
                     float dout_scale, const T *inp, const T *w, const float *mean,
                     const float *rstd, int N, int C, int accumulate, int sm_count,
                     cudaStream_t s) {
  GC_TRY(ln_check(C));
  const int tw = gc_cdiv(C / 8, 32), S = LNB_WARPS / tw;
  static int per_sm = 0;
  if (!per_sm) {
    GC_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ln_bwd_rows_kernel<T>,
                                                          LNB_WARPS * 32, 0));
    per_sm = max(per_sm, 1);
  }
  const int grid = min(gc_cdiv(N, S), sm_count * per_sm);
  ln_bwd_rows_kernel<T><<<grid, S * tw * 32, 0, s>>>(dinp, dw, db, dsum, dout, dout_scale,
                                                      inp, w, mean, rstd, N, C, accumulate,
                                                      tw, S);
  GC_LAUNCH("ln_bwd_rows_kernel");
  return 0;
}

/* ---- classifier: softmax cross-entropy, gradient in place --------------- */
constexpr int CE_THREADS = 1024;

__device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2) {
  if (m2 == -INFINITY)
    return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  const float mx = fmaxf(m, m2);
  s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
  m = mx;
}

/* One block per row. Pass 1 reads the row for the running max and sum of
 * exponentials; pass 2 reads it again (from L2: a 1024-thread block per row
 * keeps few rows in flight) and writes softmax - onehot over it. */
template <typename T>
__global__ void __launch_bounds__(CE_THREADS)
    ce_kernel(T *logits, float *losses, const int *targets, int V, int Vp) {
  __shared__ float shm[32], shs[32];
  __shared__ float sh_lse;
  const int row = blockIdx.x;
  T *x = logits + (size_t)row * Vp;
  const int tgt = targets[row];
  const float xt = gc_tof(x[tgt]);
  const int nv = Vp / 8;
  float m = -INFINITY, s = 0.f;
  for (int v = threadIdx.x; v < nv; v += CE_THREADS) {
    gc_pack8<T> p = gc_load8(x + v * 8);
    float f[8], pm = -INFINITY;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      f[k] = v * 8 + k < V ? gc_tof(p.v[k]) : -INFINITY;
      pm = fmaxf(pm, f[k]);
    }
    if (pm == -INFINITY)
      continue;
    float ps = 0.f;
#pragma unroll
    for (int k = 0; k < 8; k++)
      ps += __expf(f[k] - pm);
    ms_merge(m, s, pm, ps);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    ms_merge(m, s, m2, s2);
  }
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    shm[w] = m;
    shs[w] = s;
  }
  __syncthreads();
  if (w == 0) {
    m = lane < CE_THREADS / 32 ? shm[lane] : -INFINITY;
    s = lane < CE_THREADS / 32 ? shs[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      ms_merge(m, s, m2, s2);
    }
    if (lane == 0) {
      sh_lse = m + logf(s);
      losses[row] = sh_lse - xt;
    }
  }
  __syncthreads();
  const float lse = sh_lse;
  for (int v = threadIdx.x; v < nv; v += CE_THREADS) {
    gc_pack8<T> p = gc_load8(x + v * 8), o;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int idx = v * 8 + k;
      float gr = 0.f;
      if (idx < V)
        gr = __expf(gc_tof(p.v[k]) - lse) - (idx == tgt ? 1.f : 0.f);
      o.v[k] = gc_from<T>(gr);
    }
    gc_store8(x + v * 8, o);
  }
}

/* The row once from memory: a block copies its row into shared memory
 * (cp.async, every 16-byte piece in flight at once), then takes the max,
 * the sum of exponentials and the gradient from there, and writes the
 * gradient over the row. ce_kernel above reads the row twice and walks it
 * in dependent steps (one load in flight per thread): ~200 us for 2624 rows
 * of gpt2's 50304 on the H200, where reading and writing them once takes
 * ~135. Two blocks a multiprocessor (a bf16 row is 100 KB), so that one
 * block's copy overlaps the other's arithmetic. */
constexpr int CES_THREADS = 512;
__device__ __forceinline__ float ce_block_reduce(float v, float *sh, bool is_max) {
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  v = is_max ? gc_warp_max(v) : gc_warp_sum(v);
  __syncthreads(); /* sh may still be read from the previous reduction */
  if (lane == 0)
    sh[w] = v;
  __syncthreads();
  v = lane < CES_THREADS / 32 ? sh[lane] : (is_max ? -INFINITY : 0.f);
  return is_max ? gc_warp_max(v) : gc_warp_sum(v);
}
__device__ __forceinline__ float ce_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
/* the largest of 8 elements: packed pairs for 16-bit types */
__device__ __forceinline__ float ce_vmax(const gc_pack8<float> &p) {
  float m = p.v[0];
#pragma unroll
  for (int k = 1; k < 8; k++)
    m = fmaxf(m, p.v[k]);
  return m;
}
template <typename T, typename T2>
__device__ __forceinline__ float ce_vmax2(const gc_pack8<T> &p) {
  const T2 *q = reinterpret_cast<const T2 *>(&p);
  const T2 a = __hmax2(__hmax2(q[0], q[1]), __hmax2(q[2], q[3]));
  return fmaxf(gc_tof(a.x), gc_tof(a.y));
}
__device__ __forceinline__ float ce_vmax(const gc_pack8<bf16> &p) {
  return ce_vmax2<bf16, __nv_bfloat162>(p);
}
__device__ __forceinline__ float ce_vmax(const gc_pack8<f16> &p) {
  return ce_vmax2<f16, __half2>(p);
}
template <typename T>
__global__ void __launch_bounds__(CES_THREADS, 2)
    ce_smem_kernel(T *logits, float *losses, const int *targets, int V, int Vp) {
  extern __shared__ __align__(16) unsigned char ce_row[];
  __shared__ float sh[32];
  const T *rs = reinterpret_cast<const T *>(ce_row);
  const int row = blockIdx.x;
  T *x = logits + (size_t)row * Vp;
  const int nc = Vp * (int)sizeof(T) / 16; /* 16-byte pieces */
  for (int i = threadIdx.x; i < nc; i += CES_THREADS)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(ce_row + i * 16)),
                 "l"(reinterpret_cast<const char *>(x) + i * 16));
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  __syncthreads();
  /* Few instructions an element (the kernel is bound by issue, not by
   * memory, once the row is in shared memory): whole vectors skip the
   * vocabulary bound (only the last, partial one checks it), the max runs
   * on packed pairs, exp2 is the bare MUFU instruction, and the target's -1
   * is applied once. */
  const int nfull = V / 8, nv = Vp / 8;
  float m = -INFINITY;
  for (int v = threadIdx.x; v < nfull; v += CES_THREADS)
    m = fmaxf(m, ce_vmax(gc_load8(rs + v * 8)));
  for (int i = nfull * 8 + threadIdx.x; i < V; i += CES_THREADS)
    m = fmaxf(m, gc_tof(rs[i]));
  m = ce_block_reduce(m, sh, true);
  const float L2E = 1.4426950408889634f, ml = m * L2E;
  float sum = 0.f;
  for (int v = threadIdx.x; v < nfull; v += CES_THREADS) {
    const gc_pack8<T> p = gc_load8(rs + v * 8);
#pragma unroll
    for (int k = 0; k < 8; k++)
      sum += ce_ex2(fmaf(gc_tof(p.v[k]), L2E, -ml));
  }
  for (int i = nfull * 8 + threadIdx.x; i < V; i += CES_THREADS)
    sum += ce_ex2(fmaf(gc_tof(rs[i]), L2E, -ml));
  sum = ce_block_reduce(sum, sh, false);
  const float lse = m + logf(sum), ll = lse * L2E;
  const int tgt = targets[row];
  if (threadIdx.x == 0)
    losses[row] = lse - gc_tof(rs[tgt]);
  for (int v = threadIdx.x; v < nv; v += CES_THREADS) {
    const gc_pack8<T> p = gc_load8(rs + v * 8);
    gc_pack8<T> o;
    if (v < nfull) {
#pragma unroll
      for (int k = 0; k < 8; k++)
        o.v[k] = gc_from<T>(ce_ex2(fmaf(gc_tof(p.v[k]), L2E, -ll)));
    } else {
#pragma unroll
      for (int k = 0; k < 8; k++)
        o.v[k] = gc_from<T>(v * 8 + k < V ? ce_ex2(fmaf(gc_tof(p.v[k]), L2E, -ll)) : 0.f);
    }
    gc_store8(x + v * 8, o);
  }
  /* the target's -1, over what the same thread stored above */
  if (threadIdx.x == (tgt >> 3) % CES_THREADS)
    x[tgt] = gc_from<T>(ce_ex2(fmaf(gc_tof(rs[tgt]), L2E, -ll)) - 1.f);
}

template <typename T>
int gc_crossentropy(T *logits, float *losses, const int *targets, int R, int V, int Vp,
                    cudaStream_t s) {
  /* rows too long for shared memory: the two-read kernel */
  const size_t row_bytes = (size_t)Vp * sizeof(T);
  static int max_smem = -1;
  if (max_smem < 0) {
    int dev = 0;
    GC_CUDA(cudaGetDevice(&dev));
    GC_CUDA(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    max_smem -= 1024; /* the kernel's static shared memory, rounded up */
  }
  if (row_bytes <= (size_t)max_smem) {
    static size_t attr = 0; /* the dynamic size allowed so far */
    if (row_bytes > attr) {
      GC_CUDA(cudaFuncSetAttribute(ce_smem_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)row_bytes));
      attr = row_bytes;
    }
    ce_smem_kernel<T><<<R, CES_THREADS, row_bytes, s>>>(logits, losses, targets, V, Vp);
    GC_LAUNCH("ce_smem_kernel");
    return 0;
  }
  ce_kernel<T><<<R, CE_THREADS, 0, s>>>(logits, losses, targets, V, Vp);
  GC_LAUNCH("ce_kernel");
  return 0;
}

/* ---- GELU and bias-gradient fallbacks ------------------------------------ */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

template <typename T> __global__ void gelu_fwd_kernel(T *out, const T *inp, size_t n) {
  const size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
  if (i >= n)
    return;
  gc_pack8<T> p = gc_load8(inp + i), o;
#pragma unroll
  for (int k = 0; k < 8; k++) {
    const float x = gc_tof(p.v[k]);
    o.v[k] = gc_from<T>(0.5f * x * (1.f + tanhf(GELU_K * (x + 0.044715f * x * x * x))));
  }
  gc_store8(out + i, o);
}

/* The end of a column-sum block: its 8 warps' partial sums of 8 columns a
 * lane meet in shared memory, then one atomic per column and block. */
__device__ __forceinline__ void colsum_meet(float *out, float (*sh)[256], const float *acc,
                                            int N) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
  for (int k = 0; k < 8; k++)
    sh[w][lane * 8 + k] = acc[k];
  __syncthreads();
  const int c = blockIdx.x * 256 + threadIdx.x;
  if (c < N) {
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++)
      t += sh[i][threadIdx.x];
    atomicAdd(&out[c], t);
  }
}

/* out[j] += sum over rows of x[i][j]: a block covers 256 columns (32 lanes x
 * 8, one 16-byte load each) and a slice of rows over its 8 warps; the warps
 * meet in shared memory, then one atomic per column and block. A warp issues
 * the loads of 4 of its rows before adding them (the same order of additions
 * as a row at a time): with one load in flight per lane the kernel waited on
 * memory (H200, in training under CUPTI: 18 % shorter a call at gpt2-124m and
 * 350m, 28 % at 774m; docs/benchmarks/2026-12-02-kernel-ab.md). */
template <typename T>
__global__ void __launch_bounds__(256)
    colsum_kernel(float *out, const T *x, int M, int N, int ld) {
  __shared__ float sh[8][256];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int col = blockIdx.x * 256 + lane * 8;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (col < N) {
    const int step = gridDim.y * 8;
    int r = blockIdx.y * 8 + w;
    for (; r + 3 * step < M; r += 4 * step) {
      gc_pack8<T> p[4];
#pragma unroll
      for (int u = 0; u < 4; u++)
        p[u] = gc_load8(x + (size_t)(r + u * step) * ld + col);
#pragma unroll
      for (int u = 0; u < 4; u++)
#pragma unroll
        for (int k = 0; k < 8; k++)
          acc[k] += gc_tof(p[u].v[k]);
    }
    for (; r < M; r += step) {
      gc_pack8<T> p = gc_load8(x + (size_t)r * ld + col);
#pragma unroll
      for (int k = 0; k < 8; k++)
        acc[k] += gc_tof(p.v[k]);
    }
  }
  colsum_meet(out, sh, acc, N);
}

/* d = d * gelu'(pre) in place (GELU's derivative in the tanh form) and out[j] += the
 * column sums of the d written (as colsum_kernel over it): one pass over
 * d and pre instead of two over d, for the MLP's first layer, whose bias
 * gradient is the column sum of its GELU'-scaled input gradient. Same
 * shape of work as colsum_kernel: 256 columns a block, 4 rows' loads in
 * flight a warp, the rows in the same order. */
template <typename T>
__global__ void __launch_bounds__(256)
    dgelu_colsum_kernel(float *out, T *d, const T *pre, int M, int N) {
  __shared__ float sh[8][256];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int col = blockIdx.x * 256 + lane * 8;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  auto one = [&](gc_pack8<T> g, gc_pack8<T> p, size_t at) {
    gc_pack8<T> o;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const float x = gc_tof(p.v[k]);
      const float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
      const float dg = 0.5f * (1.f + th) +
                       0.5f * x * (1.f - th * th) * GELU_K * (1.f + 3.f * 0.044715f * x * x);
      o.v[k] = gc_from<T>(gc_tof(g.v[k]) * dg);
      acc[k] += gc_tof(o.v[k]);
    }
    gc_store8(d + at, o);
  };
  if (col < N) {
    const int step = gridDim.y * 8;
    int r = blockIdx.y * 8 + w;
    for (; r + 3 * step < M; r += 4 * step) {
      gc_pack8<T> g[4], p[4];
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const size_t at = (size_t)(r + u * step) * N + col;
        g[u] = gc_load8(d + at);
        p[u] = gc_load8(pre + at);
      }
#pragma unroll
      for (int u = 0; u < 4; u++)
        one(g[u], p[u], (size_t)(r + u * step) * N + col);
    }
    for (; r < M; r += step) {
      const size_t at = (size_t)r * N + col;
      one(gc_load8(d + at), gc_load8(pre + at), at);
    }
  }
  colsum_meet(out, sh, acc, N);
}

template <typename T>
int gc_dgelu_colsum(float *out, T *d, const T *pre, int M, int N, int sm_count,
                    cudaStream_t s) {
  const int gx = gc_cdiv(N, 256);
  const int gy = max(1, min(gc_cdiv(M, 64), 4 * sm_count / gx));
  dgelu_colsum_kernel<T><<<dim3(gx, gy), 256, 0, s>>>(out, d, pre, M, N);
  GC_LAUNCH("dgelu_colsum_kernel");
  return 0;
}

template <typename T> int gc_gelu_fwd(T *out, const T *inp, size_t n, cudaStream_t s) {
  gelu_fwd_kernel<T><<<gc_cdiv((long)(n / 8), 256), 256, 0, s>>>(out, inp, n);
  GC_LAUNCH("gelu_fwd_kernel");
  return 0;
}
template <typename T>
int gc_colsum_ld(float *out, const T *x, int M, int N, int ld, int sm_count, cudaStream_t s) {
  const int gx = gc_cdiv(N, 256);
  const int gy = max(1, min(gc_cdiv(M, 64), 4 * sm_count / gx));
  colsum_kernel<T><<<dim3(gx, gy), 256, 0, s>>>(out, x, M, N, ld);
  GC_LAUNCH("colsum_kernel");
  return 0;
}
template <typename T>
int gc_colsum(float *out, const T *x, int M, int N, int sm_count, cudaStream_t s) {
  return gc_colsum_ld<T>(out, x, M, N, N, sm_count, s);
}

/* The value bias's gradient through the attention projection (gpt_cuda.cu's
 * backward says why): dvb[c] += sum over o of g[o] W[o][c], then db[o] +=
 * g[o] and g[o] = 0, for W [C][C] (rows o: the projection's outputs). A
 * block owns 64 columns: each of its 8 warps sums every 8th row (a lane two
 * columns, 128 bytes of a row a warp), then the warps' sums meet in shared
 * memory in a fixed order, so the result does not depend on timing (no
 * atomics on dvb: a run repeats bit for bit). Every block copies g first;
 * the last block to finish (counted in *done, which it resets) adds it into
 * db and clears it. */
template <typename T>
__global__ void __launch_bounds__(256)
    vbias_kernel(float *dvb, float *db, float *g, const T *W, int C, unsigned *done) {
  extern __shared__ float gs[];
  __shared__ float part[8][64];
  __shared__ int last;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (int o = threadIdx.x; o < C; o += blockDim.x)
    gs[o] = g[o];
  __syncthreads();
  const int c = blockIdx.x * 64 + lane * 2; /* C even: c + 1 < C too */
  float a0 = 0.f, a1 = 0.f;
  if (c < C) {
#pragma unroll 4
    for (int o = w; o < C; o += 8) {
      const T *p = W + (size_t)o * C + c;
      a0 += gs[o] * gc_tof(p[0]);
      a1 += gs[o] * gc_tof(p[1]);
    }
  }
  part[w][lane * 2] = a0;
  part[w][lane * 2 + 1] = a1;
  __syncthreads();
  if (threadIdx.x < 64 && blockIdx.x * 64 + (int)threadIdx.x < C) {
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++)
      t += part[i][threadIdx.x];
    dvb[blockIdx.x * 64 + threadIdx.x] += t;
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    last = atomicAdd(done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (last) {
    for (int o = threadIdx.x; o < C; o += blockDim.x) {
      db[o] += gs[o];
      g[o] = 0.f;
    }
    if (threadIdx.x == 0)
      *done = 0;
  }
}

template <typename T>
int gc_vbias(float *dvb, float *db, float *g, const T *W, int C, unsigned *done,
             cudaStream_t s) {
  if (C % 2 || C > 8192)
    return gc_fail(-EINVAL, "gc_vbias", "C must be even and at most 8192", __FILE__, __LINE__);
  vbias_kernel<T><<<gc_cdiv(C, 64), 256, C * sizeof(float), s>>>(dvb, db, g, W, C, done);
  GC_LAUNCH("vbias_kernel");
  return 0;
}

/* ---- small vector operations ----------------------------------------------*/
__global__ void axpy_kernel(float *dst, const float *src, float a, size_t n, int add) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    dst[i] = add ? dst[i] + a * src[i] : a * src[i];
}
int gc_axpy(float *dst, const float *src, float scale, size_t n, int add, cudaStream_t s) {
  axpy_kernel<<<gc_cdiv((long)n, 256), 256, 0, s>>>(dst, src, scale, n, add);
  GC_LAUNCH("axpy_kernel");
  return 0;
}

/* One block a chunk: g[start, start + len) = 0. */
__global__ void zero_chunks_kernel(float *g, const gc_chunk_t *chunks) {
  const gc_chunk_t ck = chunks[blockIdx.x];
  for (unsigned j = threadIdx.x; j < ck.len; j += blockDim.x)
    g[ck.start + j] = 0.f;
}
int gc_zero_chunks(float *g, const gc_chunk_t *chunks, int nchunks, cudaStream_t s) {
  if (nchunks == 0)
    return 0;
  zero_chunks_kernel<<<nchunks, 256, 0, s>>>(g, chunks);
  GC_LAUNCH("zero_chunks_kernel");
  return 0;
}

template <typename T> __global__ void convert_kernel(T *dst, const float *src, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    dst[i] = gc_from<T>(src[i]);
}
template <typename T> int gc_convert(T *dst, const float *src, size_t n, cudaStream_t s) {
  convert_kernel<T><<<gc_cdiv((long)n, 256), 256, 0, s>>>(dst, src, n);
  GC_LAUNCH("convert_kernel");
  return 0;
}

/* ---- AdamW ------------------------------------------------------------------
 * One block per chunk of one tensor (the chunk carries the tensor's weight
 * decay), float4 at a time; the low-precision copy the kernels read is
 * written in the same pass. */
template <typename T>
__global__ void adamw_kernel(float *p, float *m, float *v, const float *g, T *plow,
                             const gc_chunk_t *chunks, float lr, float b1, float b2,
                             float eps, float gscale, float bc1, float bc2, float decay,
                             size_t lo, size_t hi, size_t moff) {
  const gc_chunk_t ck = chunks[blockIdx.x];
  const float wd = ck.wd * decay;
  for (unsigned j = threadIdx.x * 4; j < ck.len; j += blockDim.x * 4) {
    const size_t i = ck.start + j;
    if (i + 4 <= lo || i >= hi)
      continue; /* outside the shard */
    float4 gp = *reinterpret_cast<const float4 *>(g + i);
    float4 pp = *reinterpret_cast<float4 *>(p + i);
    float4 mp = *reinterpret_cast<float4 *>(m + (i - moff));
    float4 vp = *reinterpret_cast<float4 *>(v + (i - moff));
    float *gf = &gp.x, *pf = &pp.x, *mf = &mp.x, *vf = &vp.x;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      if (i + k < lo || i + k >= hi)
        continue;
      const float gr = gf[k] * gscale;
      mf[k] = b1 * mf[k] + (1.f - b1) * gr;
      vf[k] = b2 * vf[k] + (1.f - b2) * gr * gr;
      const float mh = mf[k] / bc1, vh = vf[k] / bc2;
      pf[k] -= lr * (mh / (sqrtf(vh) + eps) + wd * pf[k]);
    }
    *reinterpret_cast<float4 *>(p + i) = pp;
    *reinterpret_cast<float4 *>(m + (i - moff)) = mp;
    *reinterpret_cast<float4 *>(v + (i - moff)) = vp;
    if (plow) {
#pragma unroll
      for (int k = 0; k < 4; k++)
        if (i + k >= lo && i + k < hi)
          plow[i + k] = gc_from<T>(pf[k]);
    }
  }
}

template <typename T>
int gc_adamw_range(float *p, float *m, float *v, const float *g, T *plow,
                   const gc_chunk_t *chunks, int nchunks, float lr, float b1,
                   float b2, float eps, float gscale, float bc1, float bc2,
                   float weight_decay, size_t lo, size_t hi, size_t moff,
                   cudaStream_t s) {
  if (nchunks == 0)
    return 0; /* an empty shard */
  adamw_kernel<T><<<nchunks, 256, 0, s>>>(p, m, v, g, plow, chunks, lr, b1, b2, eps, gscale,
                                          bc1, bc2, weight_decay, lo, hi, moff);
  GC_LAUNCH("adamw_kernel");
  return 0;
}

template <typename T>
int gc_adamw(float *p, float *m, float *v, const float *g, T *plow,
             const gc_chunk_t *chunks, int nchunks, float lr, float b1, float b2,
             float eps, float gscale, float bc1, float bc2, float weight_decay,
             cudaStream_t s) {
  return gc_adamw_range<T>(p, m, v, g, plow, chunks, nchunks, lr, b1, b2, eps, gscale, bc1,
                           bc2, weight_decay, 0, ~(size_t)0, 0, s);
}

int gc_check_image(int cc) {
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, axpy_kernel);
  if (e == cudaSuccess)
    return 0;
  (void)cudaGetLastError();
  char what[200];
  snprintf(what, sizeof(what),
           "this build has no GPU code for sm_%d (%s); rebuild with "
           "-DCMAKE_CUDA_ARCHITECTURES=%d (docs/cuda.md)",
           cc, cudaGetErrorString(e), cc);
  return gc_fail(-ENOEXEC, "cudaFuncGetAttributes", what, __FILE__, __LINE__);
}

/* ---- gradient norm: fixed partials, then one block sums them in double,
 * so the result does not depend on scheduling. */
__global__ void sumsq_kernel(float *partial, const float *g, size_t n) {
  __shared__ float sh[32];
  float acc = 0.f;
  const size_t n4 = n / 4;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
       i += (size_t)gridDim.x * blockDim.x) {
    float4 x = reinterpret_cast<const float4 *>(g)[i];
    acc += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
  }
  if (blockIdx.x == 0)
    for (size_t i = n4 * 4 + threadIdx.x; i < n; i += blockDim.x)
      acc += g[i] * g[i];
  acc = gc_warp_sum(acc);
  if ((threadIdx.x & 31) == 0)
    sh[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.f;
    acc = gc_warp_sum(acc);
    if (threadIdx.x == 0)
      partial[blockIdx.x] = acc;
  }
}

__global__ void norm_final_kernel(float *out, const float *partial, int np, float scale) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < np; i += 32)
    acc += partial[i];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (threadIdx.x == 0)
    *out = (float)(sqrt(acc) * scale);
}

int gc_norm(float *out, float *partial, const float *g, size_t n, float scale,
            int sm_count, cudaStream_t s) {
  const int np = 2 * sm_count;
  sumsq_kernel<<<np, 512, 0, s>>>(partial, g, n);
  GC_LAUNCH("sumsq_kernel");
  norm_final_kernel<<<1, 32, 0, s>>>(out, partial, np, scale);
  GC_LAUNCH("norm_final_kernel");
  return 0;
}

/* ---- the gradient's sums of squares by blocks (ZeRO-1's norm) -----------
 * One thread block per norm block, doubles, a fixed order: a block's sum
 * is the same whichever launch computes it. Where the block starts on 16
 * bytes (the model's gradient: blocks are a multiple of 4 floats), thread t
 * reads float4 t, t + 512, ... two at a time into two accumulators, then
 * the block's last n % 4 floats; elsewhere one float at a time. Scalar
 * loads ran at ~2.4 TB/s at gpt2-774m (1.28 ms a step on the H200). */
__global__ void __launch_bounds__(512)
    sumsq_blocks_kernel(double *part, const float *g, size_t n, size_t block, size_t b0) {
  __shared__ double sh[32];
  const size_t start = (b0 + blockIdx.x) * block;
  const size_t end = start + block < n ? start + block : n;
  double acc = 0.0, acc2 = 0.0;
  size_t rest = start;
  if (((uintptr_t)(g + start) & 15) == 0) {
    const float4 *g4 = (const float4 *)(g + start);
    const size_t n4 = (end - start) / 4;
    size_t i = threadIdx.x;
    for (; i + blockDim.x < n4; i += 2 * (size_t)blockDim.x) {
      const float4 a = __ldg(g4 + i), b = __ldg(g4 + i + blockDim.x);
      acc += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z + (double)a.w * a.w;
      acc2 += (double)b.x * b.x + (double)b.y * b.y + (double)b.z * b.z + (double)b.w * b.w;
    }
    if (i < n4) {
      const float4 a = __ldg(g4 + i);
      acc += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z + (double)a.w * a.w;
    }
    rest = start + 4 * n4;
  }
  for (size_t i = rest + threadIdx.x; i < end; i += blockDim.x) {
    const double x = g[i];
    acc += x * x;
  }
  acc += acc2;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0)
    sh[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x == 0)
      part[blockIdx.x] = acc;
  }
}

int gc_sumsq_blocks(double *part, const float *g, size_t n, size_t block, size_t b0,
                    size_t nb, cudaStream_t s) {
  if (nb == 0)
    return 0;
  sumsq_blocks_kernel<<<(unsigned)nb, 512, 0, s>>>(part, g, n, block, b0);
  GC_LAUNCH("sumsq_blocks_kernel");
  return 0;
}

#define GC_INST(T)                                                                \
  template int gc_encoder_fwd<T>(T *, const int *, const T *, const T *, int, int, \
                                 int, cudaStream_t);                               \
  template int gc_encoder_bwd<T>(float *, float *, const T *, const int *, int,    \
                                 int, int, cudaStream_t);                          \
  template int gc_layernorm_fwd<T>(T *, float *, float *, const T *, const T *,    \
                                   const T *, int, int, cudaStream_t);             \
  template int gc_layernorm_bwd<T>(T *, float *, float *, float *, const T *,      \
                                   float, const T *, const T *, const float *,     \
                                   const float *, int, int, int, int,              \
                                   cudaStream_t);                                  \
  template int gc_crossentropy<T>(T *, float *, const int *, int, int, int,        \
                                  cudaStream_t);                                   \
  template int gc_gelu_fwd<T>(T *, const T *, size_t, cudaStream_t);               \
  template int gc_colsum<T>(float *, const T *, int, int, int, cudaStream_t);      \
  template int gc_colsum_ld<T>(float *, const T *, int, int, int, int, cudaStream_t); \
  template int gc_vbias<T>(float *, float *, float *, const T *, int, unsigned *,     \
                           cudaStream_t);                                            \
  template int gc_dgelu_colsum<T>(float *, T *, const T *, int, int, int, cudaStream_t); \
  template int gc_convert<T>(T *, const float *, size_t, cudaStream_t);            \
  template int gc_adamw<T>(float *, float *, float *, const float *, T *,          \
                           const gc_chunk_t *, int, float, float, float, float,    \
                           float, float, float, float, cudaStream_t);          \
  template int gc_adamw_range<T>(float *, float *, float *, const float *, T *,    \
                                 const gc_chunk_t *, int, float, float, float,     \
                                 float, float, float, float, float, size_t,        \
                                 size_t, size_t, cudaStream_t);
GC_INST(float)
GC_INST(bf16)
GC_INST(f16)
