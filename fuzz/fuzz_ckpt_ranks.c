/* fuzz_ckpt_ranks.c - ckpt__parse_ranks, the `launch ckpt --ranks` list a
 * user types ("0-3,8"). The input is the string, of at most 255 bytes, as
 * cfg_parse takes it (cfg_t's ckpt_ranks; a longer one is refused before):
 * 25 ranges of all 2^20 + 1 ranks are the most, 128 MiB.
 *
 * Invariants checked: a list taken has at least one rank, each in
 * 0..2^20, and each of its ranges in order. */
#include "cmd_vals.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s;
  int *v = NULL;
  size_t n = 0;
  if (size > 255)
    return 0;
  s = malloc(size + 1);
  FUZZ_CHECK(s != NULL);
  memcpy(s, data, size);
  s[size] = '\0';
  if (ckpt__parse_ranks(s, &v, &n) == 0) {
    FUZZ_CHECK(n > 0 && v != NULL);
    for (size_t i = 0; i < n; i++)
      FUZZ_CHECK(v[i] >= 0 && v[i] <= (1 << 20));
  } else {
    FUZZ_CHECK(v == NULL && n == 0);
  }
  free(v);
  free(s);
  return 0;
}
