/* fuzz_fingerprint.c - libFuzzer target for the node fingerprint parser,
 * which reads what other nodes send at rendezvous: parse, serialise, parse
 * again to the same text, diff against itself (no differences). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  env_fp_t *fp = NULL, *again = NULL;
  char *text = NULL, *text2 = NULL, *diff = NULL;
  size_t len = 0, len2 = 0;
  const env_fp_t *pair[2];
  const char *names[] = {"a", "b"};
  if (env_fp_parse((const char *)data, size, &fp) != 0)
    return 0;
  if (env_fp_serialize(fp, &text, &len) != 0)
    abort();
  if (env_fp_parse(text, len, &again) != 0 ||
      env_fp_serialize(again, &text2, &len2) != 0 || len != len2 ||
      memcmp(text, text2, len) != 0)
    abort();
  pair[0] = fp;
  pair[1] = again;
  if (env_fp_diff(pair, names, 2, &diff) != 0)
    abort();
  free(diff);
  free(text);
  free(text2);
  env_fp_free(fp);
  env_fp_free(again);
  return 0;
}
