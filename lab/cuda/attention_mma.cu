/* attention_mma.cu - the mma.sync attention kernels' other tile shapes
 * (model/cuda/attention.cuh is templated over them; the product runs 128
 * queries x 64 keys a block forward and 128 keys backward where the wgmma
 * kernels are not available) against the product's shapes, same inputs:
 * forward 128x128 and 64x64, backward 64 keys a block.
 *
 *   build/lab/cuda/attention_mma [B T NH]   (default 16 1024 12: gpt2-124m; head size 64)
 *
 * Needs compute capability 8.0 or newer (exit 77 otherwise). Prints each
 * shape's relative error against the product's mma.sync outputs (bf16),
 * then the median time of each. README.md has what they showed. */
#include <stdlib.h>

#include "attention.cuh"
#include "lab_attention.cuh"

/* The backward of the fast path with BBK keys a block: D and the fp32 dQ
 * zeroed, the kernel (dQ by atomics), dQ scaled into dqkv. */
template <typename T, int BBK>
static int mma_bwd(T *dqkv, float *scratch, const T *dout, const T *qkv, const T *out,
                   const float *lse, int B, int Tn, int NH, cudaStream_t s) {
  const float sl2 = softmax_scale_log2(HD), scale = (float)(1.0 / sqrt((double)HD));
  float *Dsum = scratch, *dq = scratch + ((size_t)B * NH * Tn + 63) / 64 * 64;
  const long rows = (long)B * Tn * NH, n = (long)B * Tn, C = (long)NH * HD;
  attn_bwd_pre<T><<<gc_cdiv(rows, 8), 256, 0, s>>>(Dsum, dq, nullptr, nullptr, dout, out, B,
                                                   Tn, NH, HD);
  GC_TRY(launch_bwd<T, BBK>(dqkv, dq, dout, qkv, lse, Dsum, B, Tn, NH, sl2, scale, s));
  attn_bwd_post<T><<<gc_cdiv(n * C / 8, 256), 256, 0, s>>>(dqkv, dq, nullptr, nullptr, scale,
                                                           scale, n, (int)C);
  CK(cudaGetLastError());
  return 0;
}

int main(int argc, char **argv) {
  const int cc = lab_cc();
  if (cc < 80) {
    printf("SKIP: the mma.sync kernels need compute capability 8.0 (this GPU: %d)\n", cc);
    return 77;
  }
  gc_attention_init(cc);
  gc_attention_variant(0, 0); /* the product's mma.sync kernels, also on sm_90 */
  lab_attn a;
  if (lab_attn_open(&a, argc, argv, "attention_mma") != 0)
    return 2;
  const float sl2 = softmax_scale_log2(HD);
  lab_attn_fwd(&a, "fwd 128 queries x 128 keys a block", [&] {
    return launch_fwd<bf16, 128, 128>(a.out1, a.lse1, a.qkv, a.B, a.Tn, a.NH, sl2, a.s);
  });
  lab_attn_fwd(&a, "fwd 64 queries x 64 keys a block", [&] {
    return launch_fwd<bf16, 64, 64>(a.out1, a.lse1, a.qkv, a.B, a.Tn, a.NH, sl2, a.s);
  });
  lab_attn_bwd(&a, "bwd 64 keys a block", [&] {
    return mma_bwd<bf16, 64>(a.dqkv1, a.scratch, a.dy, a.qkv, a.out0, a.lse0, a.B, a.Tn, a.NH,
                             a.s);
  });
  return g_failures ? 1 : 0;
}
