/* attention.cu - fused causal self-attention, forward and backward, in the
 * style of FlashAttention-2: scores and probabilities exist only in
 * registers, tile by tile, with an online softmax; backward recomputes them
 * from the saved log-sum-exp. Never a T x T matrix in memory.
 *
 * Fast path (bf16/fp16, head size 64, T a multiple of 128): tensor cores
 * through mma.sync m16n8k16 with ldmatrix from padded shared memory (row
 * stride 72 elements: 8 rows of an ldmatrix land in distinct banks),
 * cp.async double buffering. Forward: a block of 8 warps takes 128 queries,
 * each warp 16, and walks 64-key tiles up to the diagonal. Backward: a block
 * of 8 warps owns 128 keys (16 per warp, dK and dV in registers) and walks
 * 64-query tiles from the diagonal down; dQ is summed across key blocks with
 * fp32 atomics into a scratch buffer, then scaled into dqkv.
 * On compute capability 9.0, where the build has sm_90a code, the same
 * cases run in attention_sm90.cu's wgmma kernels instead (the default).
 * Other cases (fp32, other head sizes, ragged T): a simple warp-per-query
 * kernel with the same online softmax, for tests and tiny models. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <type_traits>

#include "attention.cuh"
#include "attention_cudnn.h"

/* ---- launchers ----------------------------------------------------------- */
#ifdef GPT_CUDA_SM90A
/* attention_sm90.cu (built for sm_90a only) */
template <typename T>
int gc_attention90_fwd(T *out, float *lse, const T *qkv, int B, int Tn, int NH, float sl2,
                       cudaStream_t s);
template <typename T>
int gc_attention90_bwd(T *dqkv, float *Dsum, const T *dout, const T *qkv, const T *out,
                       const float *lse, int B, int Tn, int NH, float sl2, float scale,
                       cudaStream_t s);
static const int have90 = 1;
#else
static const int have90 = 0;
#endif
/* Process-wide: the device's compute capability and the kernels of the
 * tensor-core path: 0 mma.sync (128 queries x 64 keys a block forward, 128
 * keys backward), 1 wgmma (the *_pipe kernels of attention_sm90.cu), which
 * exist where the build has sm_90a code and run on compute capability 9.0
 * only, and are the default there. The tile shapes, pipeline depths and
 * kernels they were chosen against are in lab/cuda/ (README.md). */
static int g_cc = 90, g_fwd = 0, g_bwd = 0;
enum { FWD_MMA = 1, BWD_MMA = 1 }; /* variants below these are mma.sync */
static const char *fwd_names[] = {"128x64", "wgmma-pipe"};
static const char *bwd_names[] = {"128", "wgmma-pipe"};
static const int n_fwd = 2, n_bwd = 2;

static int wgmma_ok(void) { return have90 && g_cc == 90; }

int gc_attention_variants(int *nfwd, int *nbwd) {
  *nfwd = wgmma_ok() ? n_fwd : FWD_MMA;
  *nbwd = wgmma_ok() ? n_bwd : BWD_MMA;
  return wgmma_ok();
}

void gc_attention_init(int cc) {
  g_cc = cc;
  /* the fastest measured in the model on the H200 (docs/BENCHMARKS.md) */
  g_fwd = wgmma_ok() ? FWD_MMA : 0;
  g_bwd = wgmma_ok() ? BWD_MMA : 0;
}

void gc_attention_variant(int fwd, int bwd) {
  int nf, nb;
  gc_attention_variants(&nf, &nb);
  g_fwd = fwd >= 0 && fwd < nf ? fwd : 0;
  g_bwd = bwd >= 0 && bwd < nb ? bwd : 0;
}

void gc_attention_stages(int stages) { (void)stages; }

/* ---- cuDNN's attention (attention_cudnn.h), loaded at run time ----------- */
static struct {
  int tried;       /* the library looked for */
  void *lib;       /* its handle, or NULL */
  gc_dnn_version_fn version;
  gc_dnn_open_fn open;
  gc_dnn_bytes_fn bytes;
  gc_dnn_fwd_fn fwd;
  gc_dnn_bwd_fn bwd;
  gc_dnn_close_fn close;
  gc_dnn_t *ctx;   /* the prepared shape's graphs, or NULL */
  int dtype, B, Tn, NH;
  char status[320];
} g_dnn;

const char *gc_attention_describe(void) {
  static char buf[96];
  if (g_dnn.ctx) /* its status is then the library's version */
    snprintf(buf, sizeof(buf), "cuDNN's fused attention (%s)", g_dnn.status);
  else
    snprintf(buf, sizeof(buf), "fwd %s, bwd %s", fwd_names[g_fwd], bwd_names[g_bwd]);
  return buf;
}

int gc_attention_fast(int dtype, int Tn, int HD_) {
  return g_cc >= 80 && dtype != GPT_FP32 && HD_ == HD && Tn % 128 == 0;
}

size_t gc_attention_scratch(int dtype, int B, int Tn, int NH, int hd) {
  size_t stats = ((size_t)B * NH * Tn + 63) / 64 * 64;
  size_t acc = (size_t)B * Tn * NH * hd;
  return stats + (gc_attention_fast(dtype, Tn, hd) ? 1 : 3) * acc;
}


/* dlopen the library: GPT_CUDA_CUDNN's path, else ../lib/libgpt_cudnn.so
 * beside the executable, else the loader's search path. 0 or -1 (status
 * says why). */
static int dnn_load(void) {
  if (g_dnn.tried)
    return g_dnn.lib ? 0 : -1;
  g_dnn.tried = 1;
  const char *env = getenv("GPT_CUDA_CUDNN");
  if (env && strcmp(env, "0") == 0) {
    snprintf(g_dnn.status, sizeof(g_dnn.status), "off (GPT_CUDA_CUDNN=0)");
    return -1;
  }
  char path[PATH_MAX + 32] = "", err[256] = "";
  if (env && env[0]) {
    snprintf(path, sizeof(path), "%s", env);
  } else {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
      exe[n] = '\0';
      char *slash = strrchr(exe, '/');
      if (slash)
        *slash = '\0';
      snprintf(path, sizeof(path), "%s/../lib/libgpt_cudnn.so", exe);
      if (access(path, R_OK) != 0)
        path[0] = '\0';
    }
  }
  g_dnn.lib = dlopen(path[0] ? path : "libgpt_cudnn.so", RTLD_NOW | RTLD_LOCAL);
  if (!g_dnn.lib) {
    const char *e = dlerror();
    snprintf(err, sizeof(err), "%s", e ? e : "?");
    snprintf(g_dnn.status, sizeof(g_dnn.status),
             "not loaded (%s): the in-tree kernels; install cuDNN 9 or put its lib "
             "folder on LD_LIBRARY_PATH", err);
    return -1;
  }
  g_dnn.version = (gc_dnn_version_fn)dlsym(g_dnn.lib, "gc_dnn_version");
  g_dnn.open = (gc_dnn_open_fn)dlsym(g_dnn.lib, "gc_dnn_open");
  g_dnn.bytes = (gc_dnn_bytes_fn)dlsym(g_dnn.lib, "gc_dnn_bytes");
  g_dnn.fwd = (gc_dnn_fwd_fn)dlsym(g_dnn.lib, "gc_dnn_fwd");
  g_dnn.bwd = (gc_dnn_bwd_fn)dlsym(g_dnn.lib, "gc_dnn_bwd");
  g_dnn.close = (gc_dnn_close_fn)dlsym(g_dnn.lib, "gc_dnn_close");
  if (!g_dnn.version || !g_dnn.open || !g_dnn.bytes || !g_dnn.fwd || !g_dnn.bwd ||
      !g_dnn.close) {
    snprintf(g_dnn.status, sizeof(g_dnn.status),
             "not used: %s lacks gc_dnn_* (a libgpt_cudnn.so of another build?)",
             path[0] ? path : "libgpt_cudnn.so");
    dlclose(g_dnn.lib);
    g_dnn.lib = NULL;
    return -1;
  }
  return 0;
}

/* the prepared graphs when they are for this dtype and shape, else NULL */
static gc_dnn_t *dnn_for(int dtype, int B, int Tn, int NH) {
  return g_dnn.ctx && g_dnn.dtype == dtype && g_dnn.B == B && g_dnn.Tn == Tn &&
                 g_dnn.NH == NH
             ? g_dnn.ctx
             : NULL;
}

void gc_attention_release(void) {
  if (g_dnn.ctx)
    g_dnn.close(g_dnn.ctx);
  g_dnn.ctx = NULL;
}

int gc_attention_prepare(int dtype, int B, int Tn, int NH, int hd) {
  if (dnn_for(dtype, B, Tn, NH))
    return 1;
  gc_attention_release();
  if (!gc_attention_fast(dtype, Tn, hd) || g_cc != 90) {
    snprintf(g_dnn.status, sizeof(g_dnn.status),
             "not used: measured against the in-tree kernels on compute capability 9.0, "
             "bf16/fp16, head size 64 only");
    return 0;
  }
  if (dnn_load() != 0)
    return 0;
  char err[256] = "";
  gc_dnn_t *d = NULL;
  if (g_dnn.open(dtype == GPT_FP16, B, Tn, NH, hd, &d, err, sizeof(err)) != 0) {
    snprintf(g_dnn.status, sizeof(g_dnn.status), "not used: %s", err);
    return 0;
  }
  g_dnn.ctx = d, g_dnn.dtype = dtype, g_dnn.B = B, g_dnn.Tn = Tn, g_dnn.NH = NH;
  snprintf(g_dnn.status, sizeof(g_dnn.status), "%s", g_dnn.version());
  return 1;
}

size_t gc_attention_dnn_bytes(void) { return g_dnn.ctx ? g_dnn.bytes(g_dnn.ctx) : 0; }

const char *gc_attention_dnn_status(void) {
  return g_dnn.status[0] ? g_dnn.status : "not prepared";
}


template <typename T>
int gc_attention_fwd(T *out, float *lse, const T *qkv, int B, int Tn, int NH,
                     int hd, cudaStream_t s) {
  if (gc_dnn_t *d = dnn_for(gc_type<T>::dtype, B, Tn, NH)) {
    if (g_dnn.fwd(d, out, lse, qkv, s) != 0)
      return gc_fail(-EIO, "attention",
                     "cuDNN's attention forward failed to launch (GPT_CUDA_CUDNN=0 runs "
                     "the in-tree kernels instead)",
                     __FILE__, __LINE__);
    return 0;
  }
  const float sl2 = softmax_scale_log2(hd);
  if constexpr (!std::is_same<T, float>::value) {
    if (gc_attention_fast(gc_type<T>::dtype, Tn, hd)) {
#ifdef GPT_CUDA_SM90A
      if (g_fwd >= FWD_MMA)
        return gc_attention90_fwd<T>(out, lse, qkv, B, Tn, NH, sl2, s);
#endif
      return launch_fwd<T, 128, 64>(out, lse, qkv, B, Tn, NH, sl2, s);
    }
  }
  if (hd > 32 * GMAXD)
    return gc_fail(-EINVAL, "attention", "head size above 256 is not supported",
                   __FILE__, __LINE__);
  long warps = (long)B * NH * Tn;
  attn_fwd_generic<T><<<gc_cdiv(warps, 4), 128, 0, s>>>(out, lse, qkv, B, Tn, NH, hd, sl2);
  GC_LAUNCH("attn_fwd_generic");
  return 0;
}

template <typename T>
int gc_attention_bwd(T *dqkv, float *scratch, const T *dout, const T *qkv,
                     const T *out, const float *lse, int B, int Tn, int NH,
                     int hd, cudaStream_t s) {
  if (gc_dnn_t *d = dnn_for(gc_type<T>::dtype, B, Tn, NH)) {
    if (g_dnn.bwd(d, dqkv, dout, qkv, out, lse, s) != 0)
      return gc_fail(-EIO, "attention",
                     "cuDNN's attention backward failed to launch (GPT_CUDA_CUDNN=0 runs "
                     "the in-tree kernels instead)",
                     __FILE__, __LINE__);
    return 0;
  }
  const float sl2 = softmax_scale_log2(hd);
  const float scale = (float)(1.0 / sqrt((double)hd));
  const int fast = gc_attention_fast(gc_type<T>::dtype, Tn, hd);
  const size_t acc = (size_t)B * Tn * NH * hd;
  float *Dsum = scratch;
#ifdef GPT_CUDA_SM90A
  if constexpr (!std::is_same<T, float>::value)
    if (fast && g_bwd >= BWD_MMA)
      return gc_attention90_bwd<T>(dqkv, Dsum, dout, qkv, out, lse, B, Tn, NH, sl2, scale, s);
#endif
  float *dq = scratch + ((size_t)B * NH * Tn + 63) / 64 * 64;
  float *dk = fast ? nullptr : dq + acc, *dv = fast ? nullptr : dq + 2 * acc;
  const long rows = (long)B * Tn * NH;
  attn_bwd_pre<T><<<gc_cdiv(rows, 8), 256, 0, s>>>(Dsum, dq, dk, dv, dout, out, B, Tn,
                                                   NH, hd);
  GC_LAUNCH("attn_bwd_pre");
  bool launched = false;
  if constexpr (!std::is_same<T, float>::value) {
    if (fast) {
      GC_TRY(launch_bwd<T, 128>(dqkv, dq, dout, qkv, lse, Dsum, B, Tn, NH, sl2, scale, s));
      launched = true;
    }
  }
  if (!launched) {
    if (hd > 32 * GMAXD)
      return gc_fail(-EINVAL, "attention", "head size above 256 is not supported",
                     __FILE__, __LINE__);
    attn_bwd_generic<T><<<gc_cdiv(rows, 4), 128, 0, s>>>(dq, dk, dv, qkv, dout, lse,
                                                        Dsum, B, Tn, NH, hd, sl2);
    GC_LAUNCH("attn_bwd_generic");
  }
  const long n = (long)B * Tn, C = (long)NH * hd;
  attn_bwd_post<T><<<gc_cdiv(n * C / 8, 256), 256, 0, s>>>(dqkv, dq, dk, dv, scale, scale,
                                                           n, (int)C);
  GC_LAUNCH("attn_bwd_post");
  return 0;
}

#define GC_INST(T)                                                              \
  template int gc_attention_fwd<T>(T *, float *, const T *, int, int, int, int,  \
                                   cudaStream_t);                                \
  template int gc_attention_bwd<T>(T *, float *, const T *, const T *, const T *, \
                                   const float *, int, int, int, int, cudaStream_t);
GC_INST(float)
GC_INST(bf16)
GC_INST(f16)
