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
 * Forward: a block of one warpgroup takes 64 queries, walks 64-key tiles
 * (cp.async into a ring of buffers) with an online softmax.
 * Backward, two kernels and no atomics: dK/dV per 64-key warpgroup walking
 * the query tiles (S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q),
 * and dQ per 64-query warpgroup (two a block) walking the key tiles (S, dP
 * recomputed, dQ += dS K), on a second stream beside dK/dV. Recomputing S
 * and dP costs two products more than one kernel with atomics, and saves
 * the fp32 dQ buffer, its zeroing, the atomics and the conversion pass.
 * The forward and dK/dV kernels (*_pipe) overlap a warpgroup's own work:
 * the next tile's scores go to the tensor cores with this tile's products,
 * and their softmax is computed while those run. The kernels without that
 * overlap, other block sizes and ring depths they were measured against
 * are in lab/cuda/attention_sm90.cu (README.md there). */
#include "attention_sm90.cuh"

/* ---- launchers ------------------------------------------------------------ */
template <typename T>
int gc_attention90_fwd(T *out, float *lse, const T *qkv, int B, int Tn, int NH, float sl2,
                       cudaStream_t s) {
  return launch90<fa90_fwd_pipe<T>>("fa90_fwd_pipe", dim3(NH, B, Tn / 64), 128,
                                    FWD_PIPE_SMEM, s, out, lse, qkv, Tn, NH, sl2);
}

/* The dQ kernel's copy ring: 2 tiles (3 and 4 measured no faster;
 * lab/cuda/attention_sm90.cu). */
constexpr int DQ_STAGES = 2;

/* dQ beside dK/dV: the two kernels are independent once D is there, and on
 * a second stream each fills the other's last, partly empty wave. One
 * stream and two events per process, made on first use on the device then
 * current (the backend uses one device a process); where they cannot be
 * made, both kernels run on the caller's stream. */
struct side_stream {
  cudaStream_t st;
  cudaEvent_t fork, join;
};
static side_stream *side(void) {
  static side_stream sd;
  static int state = -1; /* -1 unknown, 0 none, 1 made */
  if (state < 0) {
    state = 0;
    if (cudaStreamCreateWithFlags(&sd.st, cudaStreamNonBlocking) == cudaSuccess &&
        cudaEventCreateWithFlags(&sd.fork, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventCreateWithFlags(&sd.join, cudaEventDisableTiming) == cudaSuccess)
      state = 1;
    else
      (void)cudaGetLastError(); /* serial then */
  }
  return state ? &sd : nullptr;
}

template <typename T>
int gc_attention90_bwd(T *dqkv, float *Dsum, const T *dout, const T *qkv, const T *out,
                       const float *lse, int B, int Tn, int NH, float sl2, float scale,
                       cudaStream_t s) {
  const long tokens = (long)B * Tn; /* a warp each, 8 a block */
  fa90_dsum<T><<<gc_cdiv(tokens, 8), 256, 0, s>>>(Dsum, dout, out, B, Tn, NH);
  GC_LAUNCH("fa90_dsum");
  side_stream *sd = side();
  cudaStream_t sq = s;
  if (sd) {
    GC_CUDA(cudaEventRecord(sd->fork, s));
    GC_CUDA(cudaStreamWaitEvent(sd->st, sd->fork, 0));
    sq = sd->st;
  }
  int rc = launch90<fa90_dkv_pipe<T>>("fa90_dkv_pipe", dim3(NH, B, Tn / 64), 128,
                                      DKV_PIPE_SMEM, s, dqkv, qkv, dout, lse, Dsum, Tn, NH,
                                      sl2, scale);
  if (rc == 0)
    rc = launch90<fa90_dq<T, 2, DQ_STAGES>>("fa90_dq", dim3(NH, B, Tn / 128), 256,
                                            dq90_smem<2, DQ_STAGES>(), sq, dqkv, qkv, dout,
                                            lse, Dsum, Tn, NH, sl2, scale);
  if (sd) { /* the caller's stream waits for dQ, whatever happened */
    GC_CUDA(cudaEventRecord(sd->join, sd->st));
    GC_CUDA(cudaStreamWaitEvent(s, sd->join, 0));
  }
  return rc;
}

#define GC_INST90(T)                                                                        \
  template int gc_attention90_fwd<T>(T *, float *, const T *, int, int, int, float,          \
                                     cudaStream_t);                                           \
  template int gc_attention90_bwd<T>(T *, float *, const T *, const T *, const T *,          \
                                     const float *, int, int, int, float, float, cudaStream_t);
GC_INST90(bf16)
GC_INST90(f16)
