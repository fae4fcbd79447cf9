/* fuzz_errorfile.c - libFuzzer target for the reader of PyTorch's error
 * file (launcher/summary.c, sum_parse_error_json). The file is written by
 * the worker, a user program: any bytes must give 0 with a NUL-terminated
 * message or a clean error, never a crash, a leak or a read out of bounds.
 * Seeds: fuzz/corpus/errorfile/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv.h"
#include "summary.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *msg = NULL;
  double ts = -1;
  /* A copy of exactly size bytes: ASan catches any read past the end. */
  char *buf = malloc(size ? size : 1);
  int rc;
  if (buf == NULL)
    return 0;
  if (size)
    memcpy(buf, data, size);
  rc = sum_parse_error_json(buf, size, &msg, &ts);
  if (rc == 0) {
    /* The message is a C string no longer than the input. */
    if (msg == NULL || strlen(msg) > size)
      abort();
    if (ts < 0)
      abort();
  } else {
    if (msg != NULL)
      abort();
    if (rc != RDZV_EPROTO && rc != RDZV_ETOOBIG && rc != RDZV_ENOMEM)
      abort();
  }
  free(msg);
  free(buf);
  return 0;
}
