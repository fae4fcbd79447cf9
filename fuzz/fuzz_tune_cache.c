/* fuzz_tune_cache.c - libFuzzer target for the persistent cuBLASLt tuning
 * cache (model/tune_cache.c, tc_parse): a file in the user's cache
 * directory that another version, another process or a full disk may have
 * left in any state. Any bytes give a table whose entries fit the format
 * (device key of allowed characters, keys >= 0), or -EINVAL with an empty
 * table; a table formats to text that parses back to the same table and
 * the same text, and each entry is found by its key.
 * Seeds: fuzz/corpus/tune_cache/. */
#include <errno.h>

#include "../model/tune_cache.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = (char *)fuzz_dup(data, size), *text = NULL, *text2 = NULL;
  tc_table_t t = {NULL, 0, 0}, u = {NULL, 0, 0};
  size_t len = 0, len2 = 0;
  int rc = tc_parse(&t, buf, size);
  free(buf);
  if (rc != 0) {
    FUZZ_CHECK(rc == -EINVAL || rc == -ENOMEM);
    FUZZ_CHECK(t.n == 0);
    return 0;
  }
  FUZZ_CHECK(t.n <= TC_MAX_ENTRIES);
  for (size_t i = 0; i < t.n; i++) {
    const tc_entry_t *e = &t.e[i];
    size_t dl = strnlen(e->dev, TC_DEV_MAX);
    FUZZ_CHECK(dl > 0 && dl < TC_DEV_MAX);
    FUZZ_CHECK(strspn(e->dev, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                              "0123456789.-_:") == dl);
    for (int k = 0; k < TC_KEY_N; k++)
      FUZZ_CHECK(e->key[k] >= 0);
    FUZZ_CHECK(tc_find(&t, e->dev, e->ltver, e->key) == e); /* keys unique */
  }
  FUZZ_CHECK(tc_format(&t, &text, &len) == 0);
  FUZZ_CHECK(strlen(text) == len);
  FUZZ_CHECK(tc_parse(&u, text, len) == 0);
  FUZZ_CHECK(u.n == t.n);
  FUZZ_CHECK(t.n == 0 || memcmp(u.e, t.e, t.n * sizeof(*t.e)) == 0);
  FUZZ_CHECK(tc_format(&u, &text2, &len2) == 0);
  FUZZ_CHECK(len2 == len && memcmp(text, text2, len) == 0);
  free(text);
  free(text2);
  tc_free(&t);
  tc_free(&u);
  return 0;
}
