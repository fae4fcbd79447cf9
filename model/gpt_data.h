/* gpt_data.h - training data for train_gpt: token streams from files.
 *
 * Two formats, told apart by the first four bytes:
 *   - llm.c's token files: a header of 256 little-endian int32 (magic
 *     20240520, version 1 for uint16 token ids or 2 for uint32, the token
 *     count), then the ids, little-endian;
 *   - anything else is text, one token per byte (vocabulary 256).
 * With no file, the default corpus is the text of every regular file in
 * /usr/share/common-licenses (Debian's and Ubuntu's base-files package),
 * in name order.
 *
 * Split: the first tokens are for training, the last `val_fraction` for
 * validation. A training sample is a window of T + 1 tokens (inputs and
 * their next tokens) at a multiple of T; sample n of the training stream
 * is window perm_e(n mod S) of epoch e = n div S (S windows, perm_e a
 * permutation drawn from the seed and e), so the sample of any position
 * can be read directly: a rank reads only its own samples and the
 * position is one number (samples consumed) that checkpoints save.
 * Validation samples are the validation windows in order.
 */
#ifndef GPT_DATA_H
#define GPT_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPT_DATA_MAGIC 20240520
#define GPT_DATA_DEFAULT_DIR "/usr/share/common-licenses"

enum { GPT_DATA_TEXT = 0, GPT_DATA_TOKENS = 1 };

/* What the first bytes of a file say. */
typedef struct gpt_data_info_s {
  int kind;      /* GPT_DATA_* */
  int width;     /* bytes per token: 1 (text), 2 or 4 */
  size_t offset; /* of the first token */
  size_t count;  /* tokens */
} gpt_data_info_t;

/* Decode a file's header. IN buf, len: the whole file (or at least its
 * first 1024 bytes and its true length in len). RET 0, or -EINVAL with a
 * reason in err (a token file whose header or size is wrong; an empty
 * file). */
int gpt_data_parse(const void *buf, size_t len, gpt_data_info_t *info,
                   char *err, size_t errcap);

typedef struct gpt_data_s gpt_data_t;

/* Open path (NULL: the default corpus). RET 0, or a negative code with a
 * one-line reason in err. */
int gpt_data_open(const char *path, gpt_data_t **out, char *err, size_t errcap);
void gpt_data_close(gpt_data_t *d);
const gpt_data_info_t *gpt_data_info(const gpt_data_t *d);
/* Where the tokens came from (the path, or the default corpus's). */
const char *gpt_data_name(const gpt_data_t *d);
/* The largest token id in the file. */
uint32_t gpt_data_max_token(const gpt_data_t *d);
/* A 64-bit hash of the tokens: equal on two hosts when their copies of the
 * data hold the same tokens (ranks compare it before training). */
uint64_t gpt_data_hash(const gpt_data_t *d);

/* Split for windows of T tokens. RET 0, or -EINVAL with a reason in err
 * when the training part has fewer than T + 1 tokens. *val_windows may be
 * 0 (too little data for a validation window). */
int gpt_data_split(gpt_data_t *d, int T, double val_fraction,
                   uint64_t *train_windows, uint64_t *val_windows, char *err,
                   size_t errcap);
/* Sample n of the training stream (data order from seed) or validation
 * window n (mod their count): T inputs and T targets. After
 * gpt_data_split(). */
void gpt_data_train_sample(const gpt_data_t *d, uint64_t n, uint64_t seed,
                           int32_t *tokens, int32_t *targets);
void gpt_data_val_sample(const gpt_data_t *d, uint64_t n, int32_t *tokens,
                         int32_t *targets);

#ifdef __cplusplus
}
#endif
#endif
