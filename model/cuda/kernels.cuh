/* kernels.cuh - the launchers of the CUDA backend's own kernels (everything
 * that is not a cuBLASLt matrix product). Internal to model/cuda/ and its
 * tests (tests/gpu/). Each returns 0 or a negative code after reporting a
 * launch failure once (common.cuh). T is float, bf16 or f16; tensors are
 * row-major, B*T rows ("N") of C channels unless said otherwise. */
#ifndef GPT_CUDA_KERNELS_CUH
#define GPT_CUDA_KERNELS_CUH

#include "common.cuh"

/* x[b,t,:] = wte[tok[b,t],:] + wpe[t,:] */
template <typename T>
int gc_encoder_fwd(T *out, const int *tok, const T *wte, const T *wpe, int B,
                   int Tn, int C, cudaStream_t s);
/* dwte[tok] += dout, dwpe[t] += sum over b of dout (fp32 gradients). */
template <typename T>
int gc_encoder_bwd(float *dwte, float *dwpe, const T *dout, const int *tok,
                   int B, int Tn, int C, cudaStream_t s);

/* LayerNorm over C (eps 1e-5), statistics kept for backward. */
template <typename T>
int gc_layernorm_fwd(T *out, float *mean, float *rstd, const T *inp,
                     const T *w, const T *b, int N, int C, cudaStream_t s);
/* dinp (= or += when accumulate) from dout * dout_scale; dw, db += (fp32).
 * The residual stream's gradient is accumulated here: the fused residual
 * backward. dsum (may be NULL) += the column sums of the dinp written: the
 * bias gradient of the projection whose output joined that residual. */
template <typename T>
int gc_layernorm_bwd(T *dinp, float *dw, float *db, float *dsum, const T *dout,
                     float dout_scale, const T *inp, const T *w,
                     const float *mean, const float *rstd, int N, int C,
                     int accumulate, int sm_count, cudaStream_t s);

/* Causal self-attention on qkv rows [q | k | v] of 3C (heads of HD inside
 * each), output [N][C], and per (b, head, t) the log2-sum-exp of the scaled
 * scores (lse, fp32 [B][NH][T]) for backward. Flash-style: scores live in
 * registers only. */
template <typename T>
int gc_attention_fwd(T *out, float *lse, const T *qkv, int B, int Tn, int NH,
                     int HD, cudaStream_t s);
/* dqkv (overwritten) from dout; scratch of gc_attention_scratch() floats. */
template <typename T>
int gc_attention_bwd(T *dqkv, float *scratch, const T *dout, const T *qkv,
                     const T *out, const float *lse, int B, int Tn, int NH,
                     int HD, cudaStream_t s);
/* The device's compute capability (major*10+minor): the tensor-core kernels
 * need SM80 or newer. Set once per process by the backend (and tests). */
void gc_attention_init(int cc);
/* The kernels of the tensor-core path (tests compare them): forward 0
 * 128x64 (mma.sync, queries x keys a block), 1 wgmma-pipe (64 queries, the
 * next tile's scores overlapping this one's P V); backward 0 128 (mma.sync,
 * keys a block), 1 wgmma-pipe (dK/dV overlapping its products, 64 keys; dQ
 * of 128 beside it on a second stream). Out-of-range or unavailable values
 * select 0. gc_attention_variants() gives how many this process can run
 * (the wgmma ones need an sm_90a build and compute capability 9.0) and
 * returns 1 when the wgmma kernels are among them. The shapes and kernels
 * they were measured against are in lab/cuda/ (README.md). */
void gc_attention_variant(int fwd, int bwd);
int gc_attention_variants(int *nfwd, int *nbwd);
/* No effect: the product's wgmma kernels have one copy-ring depth (2 tiles);
 * lab/cuda/attention_sm90.cu compares 2, 3 and 4. Kept for the GPU tests,
 * which name a depth. */
void gc_attention_stages(int stages);
const char *gc_attention_describe(void);
/* 1 when the tensor-core kernels serve this case, 0 for the generic one. */
int gc_attention_fast(int dtype, int Tn, int HD);
size_t gc_attention_scratch(int dtype, int B, int Tn, int NH, int HD);
/* cuDNN's fused attention (attention_cudnn.h) for this shape, where it is
 * loadable and the device has compute capability 9.0 (where it measured
 * faster than the wgmma kernels: docs/cuda.md): libgpt_cudnn.so is loaded
 * (GPT_CUDA_CUDNN names it, or =0 keeps the in-tree kernels; by default
 * ../lib/libgpt_cudnn.so beside the executable, then the loader's path)
 * and its graphs built, once. From then on gc_attention_fwd and _bwd of
 * exactly this dtype and shape run cuDNN's, the others the in-tree
 * kernels (a forward and its backward must be the same kind: their
 * log-sum-exp differs). Returns 1 when cuDNN's serve the shape, 0 when not
 * (gc_attention_dnn_status says why). One shape a process: a second call
 * with another shape releases the first. */
int gc_attention_prepare(int dtype, int B, int Tn, int NH, int HD);
/* The in-tree kernels again for every shape; frees cuDNN's workspace. */
void gc_attention_release(void);
/* Device bytes cuDNN's attention holds (its workspace), 0 when unused. */
size_t gc_attention_dnn_bytes(void);
/* "cuDNN 91900, cudnn-frontend 13200", or why cuDNN's attention is not used. */
const char *gc_attention_dnn_status(void);

/* Fused softmax cross-entropy over R rows of Vp logits (V real classes):
 * losses[r] = logsumexp - logit[target], and the logits are overwritten in
 * place by the unscaled gradient softmax - onehot (0 in padded columns). */
template <typename T>
int gc_crossentropy(T *logits, float *losses, const int *targets, int R,
                    int V, int Vp, cudaStream_t s);

/* GELU (tanh form) where cuBLASLt's epilogues are not used. */
template <typename T>
int gc_gelu_fwd(T *out, const T *inp, size_t n, cudaStream_t s);
/* out[j] += sum over i of x[i][j] (M rows, N columns, N % 8 == 0), fp32. */
template <typename T>
int gc_colsum(float *out, const T *x, int M, int N, int sm_count, cudaStream_t s);
/* The same over rows ld elements apart (ld >= N, ld % 8 == 0): the first N
 * columns of a wider matrix. */
template <typename T>
int gc_colsum_ld(float *out, const T *x, int M, int N, int ld, int sm_count, cudaStream_t s);
/* dvb[c] += sum over o of g[o] W[o][c] (W [C][C], C even, <= 8192), then db
 * += g and g = 0: the attention's value-bias gradient from the column sums g
 * of the projection's output gradient (see backward in gpt_cuda.cu). done:
 * a device counter, 0 before the call and after it; calls that share one
 * must not overlap. Deterministic. */
template <typename T>
int gc_vbias(float *dvb, float *db, float *g, const T *W, int C, unsigned *done,
             cudaStream_t s);
/* d *= gelu'(pre) in place (M rows, N columns, N % 8 == 0) and out[j] +=
 * the column sums of the d written: GELU's backward and gc_colsum in one pass. */
template <typename T>
int gc_dgelu_colsum(float *out, T *d, const T *pre, int M, int N, int sm_count,
                    cudaStream_t s);

/* 0, or a reported -ENOEXEC when this build has no code for the device. */
int gc_check_image(int cc);
/* dst += scale * src; dst = scale * src when add is 0 (dst not read) */
int gc_axpy(float *dst, const float *src, float scale, size_t n, int add, cudaStream_t s);

/* dst = (T)src */
template <typename T>
int gc_convert(T *dst, const float *src, size_t n, cudaStream_t s);

/* AdamW over chunks of the flat parameter array (one launch); a chunk's wd
 * (0 or 1) marks whether weight_decay applies to its tensor. plow, when not
 * NULL, receives the updated weights in the compute type. */
typedef struct gc_chunk_s {
  unsigned long long start;
  unsigned int len;
  float wd;
} gc_chunk_t;
/* g's elements in each chunk (start, len; wd unused) set to 0 */
int gc_zero_chunks(float *g, const gc_chunk_t *chunks, int nchunks, cudaStream_t s);
template <typename T>
int gc_adamw(float *p, float *m, float *v, const float *g, T *plow,
             const gc_chunk_t *chunks, int nchunks, float lr, float b1,
             float b2, float eps, float gscale, float bc1, float bc2,
             float weight_decay, cudaStream_t s);
/* gc_adamw over the parameters [lo, hi) only (ZeRO-1's shard): m and v
 * hold the moments of [moff, ...), moff = lo rounded down to a multiple of
 * 4 (float4 access); chunks may reach past the range, their other elements
 * are neither read as moments nor written. Bitwise gc_adamw's arithmetic. */
template <typename T>
int gc_adamw_range(float *p, float *m, float *v, const float *g, T *plow,
                   const gc_chunk_t *chunks, int nchunks, float lr, float b1,
                   float b2, float eps, float gscale, float bc1, float bc2,
                   float weight_decay, size_t lo, size_t hi, size_t moff,
                   cudaStream_t s);
/* part[k] = the sum of g[i]^2 (double) over block b0 + k, k < nb, of the
 * blocks of `block` elements of g[0, n) (the last one shorter); each
 * block's sum depends on its elements only (a fixed reduction order). */
int gc_sumsq_blocks(double *part, const float *g, size_t n, size_t block,
                    size_t b0, size_t nb, cudaStream_t s);
/* *out = sqrt(sum of g^2) * scale (device float); partial: 2*sm_count floats. */
int gc_norm(float *out, float *partial, const float *g, size_t n, float scale,
            int sm_count, cudaStream_t s);

#endif /* GPT_CUDA_KERNELS_CUH */
