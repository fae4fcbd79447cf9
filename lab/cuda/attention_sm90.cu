/* attention_sm90.cu - the wgmma attention kernels the product was measured
 * against (model/cuda/attention_sm90.cu runs the *_pipe ones), on the same
 * inputs as the product's:
 *   forward: blocks of 128 queries (two warpgroups) or 64, without the
 *     overlap of a warpgroup's own products, copy rings of 2, 3 or 4 tiles;
 *   backward: dK/dV without the overlap in blocks of 128 or 64 keys, dQ in
 *     blocks of 128 or 64 queries, rings of 2, 3 or 4; dQ after dK/dV on one
 *     stream; D = rowsum(dO * O) with a thread per (token, head).
 *
 *   build/lab/cuda/attention_sm90 [B T NH]   (default 16 1024 12: gpt2-124m; head size 64)
 *
 * Needs compute capability 9.0 and a build for sm_90 (exit 77 otherwise).
 * Prints each variant's relative error against the product's outputs
 * (bf16), then the median time of each. What these showed on the H200, and
 * why the product keeps the pipe kernels with 2 tiles: README.md. */
#include <stdlib.h>

#include "attention_sm90.cuh"
#include "lab_attention.cuh"

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

/* ---- backward: dK, dV without the overlap -------------------------------- */
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

/* ---- the variants' launchers ---------------------------------------------- */
template <typename T, int NS>
static int fwd_ring(int nwg, T *out, float *lse, const T *qkv, int B, int Tn, int NH, float sl2,
                    cudaStream_t s) {
  if (nwg == 1)
    return launch90<fa90_fwd<T, 1, NS>>("fa90_fwd", dim3(NH, B, Tn / 64), 128,
                                        fwd90_smem<1, NS>(), s, out, lse, qkv, Tn, NH, sl2);
  return launch90<fa90_fwd<T, 2, NS>>("fa90_fwd", dim3(NH, B, Tn / 128), 256,
                                      fwd90_smem<2, NS>(), s, out, lse, qkv, Tn, NH, sl2);
}

template <typename T>
static int lab_fwd(int nwg, int stages, T *out, float *lse, const T *qkv, int B, int Tn, int NH,
                   float sl2, cudaStream_t s) {
  switch (stages) {
  case 2: return fwd_ring<T, 2>(nwg, out, lse, qkv, B, Tn, NH, sl2, s);
  case 4: return fwd_ring<T, 4>(nwg, out, lse, qkv, B, Tn, NH, sl2, s);
  default: return fwd_ring<T, 3>(nwg, out, lse, qkv, B, Tn, NH, sl2, s);
  }
}

/* kv_nwg 0: the product's fa90_dkv_pipe; serial: dQ on the caller's stream. */
struct bwd_variant {
  const char *name;
  int kv_nwg, q_nwg, serial, dsum_thread;
};

/* The arguments every backward kernel takes. */
template <typename T> struct bwd_args {
  T *dqkv;
  float *D;
  const T *dout, *qkv, *out;
  const float *lse;
  int B, Tn, NH;
  float sl2, scale;
};

template <typename T, int NS>
static int bwd_ring(const bwd_variant &v, const bwd_args<T> &a, cudaStream_t s, cudaStream_t sq) {
  const dim3 g64(a.NH, a.B, a.Tn / 64), g128(a.NH, a.B, a.Tn / 128);
  if (v.kv_nwg == 0)
    GC_TRY(launch90<fa90_dkv_pipe<T>>("fa90_dkv_pipe", g64, 128, DKV_PIPE_SMEM, s, a.dqkv, a.qkv,
                                      a.dout, a.lse, a.D, a.Tn, a.NH, a.sl2, a.scale));
  else if (v.kv_nwg == 1)
    GC_TRY(launch90<fa90_dkv<T, 1, NS>>("fa90_dkv", g64, 128, dkv90_smem<1, NS>(), s, a.dqkv,
                                        a.qkv, a.dout, a.lse, a.D, a.Tn, a.NH, a.sl2, a.scale));
  else
    GC_TRY(launch90<fa90_dkv<T, 2, NS>>("fa90_dkv", g128, 256, dkv90_smem<2, NS>(), s, a.dqkv,
                                        a.qkv, a.dout, a.lse, a.D, a.Tn, a.NH, a.sl2, a.scale));
  if (v.q_nwg == 1)
    return launch90<fa90_dq<T, 1, NS>>("fa90_dq", g64, 128, dq90_smem<1, NS>(), sq, a.dqkv,
                                       a.qkv, a.dout, a.lse, a.D, a.Tn, a.NH, a.sl2, a.scale);
  return launch90<fa90_dq<T, 2, NS>>("fa90_dq", g128, 256, dq90_smem<2, NS>(), sq, a.dqkv, a.qkv,
                                     a.dout, a.lse, a.D, a.Tn, a.NH, a.sl2, a.scale);
}

/* D, then dK/dV on s and dQ on side (or s), joined back into s. */
template <typename T>
static int lab_bwd(const bwd_variant &v, int stages, const bwd_args<T> &a, cudaStream_t s,
                   cudaStream_t side, cudaEvent_t fork, cudaEvent_t join) {
  const long tokens = (long)a.B * a.Tn, n = tokens * a.NH;
  if (v.dsum_thread)
    fa90_dsum_thread<T><<<gc_cdiv(n, 256), 256, 0, s>>>(a.D, a.dout, a.out, a.B, a.Tn, a.NH);
  else
    fa90_dsum<T><<<gc_cdiv(tokens, 8), 256, 0, s>>>(a.D, a.dout, a.out, a.B, a.Tn, a.NH);
  CK(cudaGetLastError());
  cudaStream_t sq = v.serial ? s : side;
  if (!v.serial) {
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(side, fork, 0));
  }
  int rc;
  switch (stages) {
  case 2: rc = bwd_ring<T, 2>(v, a, s, sq); break;
  case 4: rc = bwd_ring<T, 4>(v, a, s, sq); break;
  default: rc = bwd_ring<T, 3>(v, a, s, sq);
  }
  if (!v.serial) {
    CK(cudaEventRecord(join, side));
    CK(cudaStreamWaitEvent(s, join, 0));
  }
  return rc;
}

int main(int argc, char **argv) {
  const int cc = lab_cc();
  gc_attention_init(cc);
  int nf = 0, nb = 0;
  if (cc != 90 || !gc_attention_variants(&nf, &nb)) {
    printf("SKIP: the wgmma kernels need compute capability 9.0 and a build for sm_90 "
           "(this GPU: %d)\n", cc);
    return 77;
  }
  lab_attn a;
  if (lab_attn_open(&a, argc, argv, "attention_sm90") != 0)
    return 2;
  cudaStream_t side;
  cudaEvent_t fork, join;
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  const float scale = (float)(1.0 / sqrt((double)HD)), sl2 = (float)(scale * 1.4426950408889634);
  char what[96];
  for (int nwg = 1; nwg <= 2; nwg++)
    for (int st = 2; st <= 4; st++) {
      snprintf(what, sizeof(what), "fwd wgmma, %d queries a block, %d stages", 64 * nwg, st);
      lab_attn_fwd(&a, what, [&] {
        return lab_fwd<bf16>(nwg, st, a.out1, a.lse1, a.qkv, a.B, a.Tn, a.NH, sl2, a.s);
      });
    }
  static const bwd_variant bv[] = {
      {"wgmma: dK/dV 128, dQ 128", 2, 2, 0, 0}, {"wgmma-kv64: dK/dV 64, dQ 128", 1, 2, 0, 0},
      {"wgmma64: dK/dV 64, dQ 64", 1, 1, 0, 0}, {"pipe dK/dV, dQ 128", 0, 2, 0, 0},
      {"pipe, dQ after dK/dV on one stream", 0, 2, 1, 0},
      {"pipe, D a thread per (token, head)", 0, 2, 0, 1}};
  const bwd_args<bf16> ba = {a.dqkv1, a.scratch, a.dy, a.qkv, a.out0, a.lse0,
                             a.B,      a.Tn,      a.NH, sl2,   scale};
  for (const bwd_variant &v : bv)
    for (int st = 2; st <= 4; st++) {
      if ((v.serial || v.dsum_thread) && st != 2)
        continue; /* those two against the product's ring only */
      snprintf(what, sizeof(what), "bwd %s, %d stages", v.name, st);
      lab_attn_bwd(&a, what, [&] { return lab_bwd<bf16>(v, st, ba, a.s, side, fork, join); });
    }
  return g_failures ? 1 : 0;
}
