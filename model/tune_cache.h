/* tune_cache.h - the persistent cuBLASLt tuning cache: which algorithm the
 * timing of model/cuda/matmul.cu chose for a product, per GPU model and
 * cuBLASLt version, kept in a small text file per user so that the next
 * start (a restart after a failure) does not time the candidates again.
 *
 * Plain C, no CUDA: the file is a decoder of bytes from disk with a fuzz
 * target (fuzz/fuzz_tune_cache.c). The format, the default path and the
 * variable GPT_CUDA_TUNE_CACHE are in docs/runtime.md ("cuBLASLt tuning
 * cache"). Errors: 0 or a negative errno.
 */
#ifndef GPT_TUNE_CACHE_H
#define GPT_TUNE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The product: m n k ta tb lda ldb ldd, the types of A/B and C/D, the
 * epilogue, the GELU input's leading dimension, the workspace bytes. */
#define TC_KEY_N 13
/* cublasLtMatmulAlgo_t: 8 x uint64, which cuBLASLt documents as
 * serialisable for use with the same cuBLASLt version. */
#define TC_ALGO_N 8
/* "NAME:ccXY:smN", NAME the GPU's with [A-Za-z0-9.-] kept, others '_' */
#define TC_DEV_MAX 96
/* More entries than this: the oldest are dropped when written. */
#define TC_MAX_ENTRIES 4096
/* A bigger file is not read (and is rewritten). */
#define TC_MAX_FILE (1u << 20)

typedef struct tc_entry_s {
  char dev[TC_DEV_MAX];
  uint64_t ltver;          /* cublasLtGetVersion() */
  int64_t key[TC_KEY_N];   /* each >= 0 */
  uint64_t algo[TC_ALGO_N];
} tc_entry_t;

typedef struct tc_table_s {
  tc_entry_t *e; /* in file order */
  size_t n, cap;
} tc_table_t;

/* Parse a cache file's bytes (need not be NUL-terminated). RET 0, or
 * -EINVAL when any line is not of the format or the header is foreign
 * (the table is then empty: the file is ignored), -ENOMEM. */
int tc_parse(tc_table_t *t, const char *text, size_t len);
/* OUT *out (malloc'd, NUL-terminated), *len. RET 0 or -ENOMEM. */
int tc_format(const tc_table_t *t, char **out, size_t *len);
/* The entry of (dev, ltver, key), or NULL. */
const tc_entry_t *tc_find(const tc_table_t *t, const char *dev, uint64_t ltver,
                          const int64_t key[TC_KEY_N]);
/* Add e, replacing the entry of the same (dev, ltver, key). RET 0,
 * -EINVAL (e does not fit the format), -ENOMEM. */
int tc_put(tc_table_t *t, const tc_entry_t *e);
void tc_free(tc_table_t *t);

/* The device key of a GPU. RET 0, -EINVAL (does not fit n). */
int tc_device_key(char *buf, size_t n, const char *name, int cc, int sms);
/* The file: $GPT_CUDA_TUNE_CACHE when set (a path; "0": no cache), else
 * $XDG_CACHE_HOME/launch/cublaslt-tune.txt, else
 * $HOME/.cache/launch/cublaslt-tune.txt. RET 1 (path in buf), 0 (no
 * cache: turned off, or no home), -ENAMETOOLONG. */
int tc_path(char *buf, size_t n);
/* Read path into t. RET 0 (t may be empty: no file), 1 (the file is corrupt,
 * foreign or too big: t is empty and the next tc_update rewrites it),
 * -errno (it cannot be read), -ENOMEM. */
int tc_load(const char *path, tc_table_t *t);
/* Merge: read path again (another process may have added entries), put
 * the n entries, write it atomically (a temp file, mode 0600, renamed over
 * it; the directory made with mode 0700 when missing). RET 0 or -errno. */
int tc_update(const char *path, const tc_entry_t *e, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* GPT_TUNE_CACHE_H */
