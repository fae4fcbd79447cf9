/* layernorm_backward.cu - the LayerNorm backward with one warp a row,
 * against the product's (model/cuda/kernels.cu, ln_bwd_rows_kernel: a row
 * spread over ceil(C / 256) warps, the next row's loads issued early).
 *
 *   build/lab/cuda/layernorm_backward [N C]     (default 16384 768: gpt2-124m, B 16)
 *
 * Prints the relative error of every output of the warp-per-row kernel
 * against the product's (bf16), then the median time of each. Measured on
 * the H200 at C = 768, N = 16384: ~70 us a call for this kernel, ~52 for
 * the product's (model/cuda/kernels.cu, above ln_bwd_rows_kernel). */
#include <stdlib.h>

#include "kernels.cuh"
#include "lab.cuh"

/* Warps stride over rows; each lane keeps its channels' dw and db partial
 * sums (and, when dsum is given, the column sums of the dinp it writes) in
 * registers; the block adds them in shared memory, laid out [k][vector] so
 * that a warp's lanes hit distinct banks, then once into the fp32 gradient.
 * dsum turns the residual gradient this kernel writes into the bias
 * gradient of the projection that fed that residual: no extra pass.
 * (Measured on the H200: prefetching the next row, or adding the column
 * sums in shared memory per row, was slower than this.) */
template <typename T, int NI>
__global__ void __launch_bounds__(256)
    ln_bwd_kernel(T *dinp, float *dw, float *db, float *dsum, const T *dout, float scale,
                  const T *inp, const T *w, const float *mean, const float *rstd, int N,
                  int C, int accumulate) {
  extern __shared__ float sh[]; /* [3][8][C/8] */
  const int nv = C >> 3;
  const int nsh = dsum ? 3 * C : 2 * C;
  for (int i = threadIdx.x; i < nsh; i += blockDim.x)
    sh[i] = 0.f;
  __syncthreads();
  const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
  float dwa[NI][8], dba[NI][8], dsa[NI][8];
#pragma unroll
  for (int i = 0; i < NI; i++)
#pragma unroll
    for (int k = 0; k < 8; k++)
      dwa[i][k] = dba[i][k] = dsa[i][k] = 0.f;
  for (int row = blockIdx.x * wpb + (threadIdx.x >> 5); row < N; row += gridDim.x * wpb) {
    const float mu = mean[row], rs = rstd[row];
    gc_pack8<T> dp[NI], xp[NI], old[NI];
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int i = 0; i < NI; i++) {
      const int v = lane + 32 * i;
      if (v < nv) {
        dp[i] = gc_load8_cs(dout + (size_t)row * C + v * 8);
        xp[i] = gc_load8(inp + (size_t)row * C + v * 8);
        if (accumulate)
          old[i] = gc_load8(dinp + (size_t)row * C + v * 8);
      }
    }
#pragma unroll
    for (int i = 0; i < NI; i++) {
      const int v = lane + 32 * i;
      if (v < nv) {
        gc_pack8<T> wp = gc_load8(w + v * 8);
#pragma unroll
        for (int k = 0; k < 8; k++) {
          const float dy = gc_tof(dp[i].v[k]) * scale;
          const float xh = (gc_tof(xp[i].v[k]) - mu) * rs;
          const float dn = dy * gc_tof(wp.v[k]);
          s1 += dn;
          s2 += dn * xh;
          dba[i][k] += dy;
          dwa[i][k] += dy * xh;
        }
      }
    }
    s1 = gc_warp_sum(s1) / C;
    s2 = gc_warp_sum(s2) / C;
#pragma unroll
    for (int i = 0; i < NI; i++) {
      const int v = lane + 32 * i;
      if (v < nv) {
        gc_pack8<T> wp = gc_load8(w + v * 8), o;
#pragma unroll
        for (int k = 0; k < 8; k++) {
          const float dy = gc_tof(dp[i].v[k]) * scale;
          const float xh = (gc_tof(xp[i].v[k]) - mu) * rs;
          float dx = (dy * gc_tof(wp.v[k]) - s1 - xh * s2) * rs;
          if (accumulate)
            dx += gc_tof(old[i].v[k]);
          o.v[k] = gc_from<T>(dx);
          dsa[i][k] += gc_tof(o.v[k]);
        }
        gc_store8(dinp + (size_t)row * C + v * 8, o);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < NI; i++) {
    const int v = lane + 32 * i;
    if (v < nv)
#pragma unroll
      for (int k = 0; k < 8; k++) {
        atomicAdd(&sh[k * nv + v], dwa[i][k]);
        atomicAdd(&sh[C + k * nv + v], dba[i][k]);
        if (dsum)
          atomicAdd(&sh[2 * C + k * nv + v], dsa[i][k]);
      }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const int j = (c & 7) * nv + (c >> 3);
    atomicAdd(&dw[c], sh[j]);
    atomicAdd(&db[c], sh[C + j]);
    if (dsum)
      atomicAdd(&dsum[c], sh[2 * C + j]);
  }
}

/* ln_bwd_kernel<T, NI> for C <= 256 * NI; as many blocks as fit at once:
 * each adds its partial sums only once. */
template <typename T, int NI>
static void ln_bwd_warp(T *dinp, float *dw, float *db, float *dsum, const T *dout, float scale,
                        const T *inp, const T *w, const float *mean, const float *rstd, int N,
                        int C, int accumulate, int sm_count, cudaStream_t s) {
  const size_t sh = 3 * (size_t)C * sizeof(float);
  int per_sm = 1;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ln_bwd_kernel<T, NI>, 256, sh));
  const int grid = std::min(gc_cdiv(N, 8), sm_count * std::max(per_sm, 1));
  ln_bwd_kernel<T, NI><<<grid, 256, sh, s>>>(dinp, dw, db, dsum, dout, scale, inp, w, mean,
                                             rstd, N, C, accumulate);
  CK(cudaGetLastError());
}

typedef void (*ln_bwd_fn)(bf16 *, float *, float *, float *, const bf16 *, float, const bf16 *,
                          const bf16 *, const float *, const float *, int, int, int, int,
                          cudaStream_t);
static const ln_bwd_fn warp_kernels[] = {ln_bwd_warp<bf16, 1>, ln_bwd_warp<bf16, 2>,
                                         ln_bwd_warp<bf16, 3>, ln_bwd_warp<bf16, 4>,
                                         ln_bwd_warp<bf16, 5>, ln_bwd_warp<bf16, 6>,
                                         ln_bwd_warp<bf16, 7>, ln_bwd_warp<bf16, 8>};

int main(int argc, char **argv) {
  const int N = argc > 2 ? atoi(argv[1]) : 16384, C = argc > 2 ? atoi(argv[2]) : 768;
  lab_cc();
  if (N < 1 || C < 8 || C % 8 != 0 || C > 2048) {
    fprintf(stderr, "usage: layernorm_backward [N C]: N >= 1 rows, C a multiple of 8 up to "
                    "2048 channels\n");
    return 2;
  }
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  rng r(20261202);
  const size_t NC = (size_t)N * C;
  bf16 *inp = upload<bf16>(r.normals(NC, 1.0)), *dout = upload<bf16>(r.normals(NC, 1.0));
  bf16 *w = upload<bf16>(r.normals(C, 1.0)), *b = upload<bf16>(r.normals(C, 1.0));
  bf16 *res0 = upload<bf16>(r.normals(NC, 1.0)), *out = poisoned<bf16>(NC);
  bf16 *dinp[2] = {poisoned<bf16>(NC), poisoned<bf16>(NC)};
  float *mean = poisoned<float>(N), *rstd = poisoned<float>(N), *acc[2];
  for (int k = 0; k < 2; k++) {
    acc[k] = poisoned<float>(3 * (size_t)C); /* dw, db, dsum */
    CK(cudaMemsetAsync(acc[k], 0, 3 * (size_t)C * sizeof(float), s));
    CK(cudaMemcpyAsync(dinp[k], res0, NC * sizeof(bf16), cudaMemcpyDeviceToDevice, s));
  }
  OK(gc_layernorm_fwd<bf16>(out, mean, rstd, inp, w, b, N, C, s));
  const int ni = gc_cdiv(C / 8, 32);
  auto product = [&](int k) {
    return gc_layernorm_bwd<bf16>(dinp[k], acc[k], acc[k] + C, acc[k] + 2 * C, dout, 0.5f, inp,
                                  w, mean, rstd, N, C, 1, p.multiProcessorCount, s);
  };
  auto warp = [&](int k) {
    warp_kernels[ni - 1](dinp[k], acc[k], acc[k] + C, acc[k] + 2 * C, dout, 0.5f, inp, w, mean,
                         rstd, N, C, 1, p.multiProcessorCount, s);
    return 0;
  };
  OK(product(0));
  OK(warp(1));
  CK(cudaStreamSynchronize(s));
  printf("LayerNorm backward, N %d C %d, bf16, accumulating into the residual gradient\n", N, C);
  check("warp a row: dinp", download(dinp[1], NC), download(dinp[0], NC), 1e-2);
  check("warp a row: dw, db, dsum", download(acc[1], 3 * (size_t)C),
        download(acc[0], 3 * (size_t)C), 1e-4);
  printf("product (rows kernel): %.1f us\n", 1e3 * lab_median_ms(s, 50, [&] { return product(0); }));
  printf("warp a row:            %.1f us\n", 1e3 * lab_median_ms(s, 50, [&] { return warp(1); }));
  return g_failures ? 1 : 0;
}
