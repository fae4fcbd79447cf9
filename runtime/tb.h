/* tb.h - TensorBoard event files of scalars (train_gpt --tb-dir): the
 * Event and Summary messages of TensorBoard's protos (runtime/tb_event.proto,
 * encoded by protobuf-c) in TFRecord framing (length, masked CRC-32C of
 * it, data, masked CRC-32C of it), one file per writer named
 * events.out.tfevents.<unix time>.<host>.<pid>. Built only with protobuf-c
 * (RT_HAVE_TB); without it tb_open returns -ENOTSUP. Prefix tb_. */
#ifndef TB_H
#define TB_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_s tb_t;

/* Create dir (and its parents) and a new event file in it, whose first
 * record is the file version. OUT *out. RET 0 or -errno. */
int tb_open(const char *dir, tb_t **out);
/* One scalar: tag at step. RET 0 or -errno (the write failed). */
int tb_scalar(tb_t *t, const char *tag, int64_t step, double value);
/* Push what was written to the file (TensorBoard reads it live). */
int tb_flush(tb_t *t);
/* Flush and close. NULL is a no-op. */
void tb_close(tb_t *t);

/* CRC-32C (Castagnoli) of p[0..n), and TFRecord's mask of it. */
uint32_t tb_crc32c(const void *p, size_t n);
uint32_t tb_masked_crc(const void *p, size_t n);

#endif /* TB_H */
