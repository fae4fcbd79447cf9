/* fuzz_torchver.c - cfg_parse_torch_version(), the decoder of --torch-version
 * and of the version torch's site-packages files state (torch/version.py's
 * __version__, a dist-info METADATA's Version:), which launch reads to name
 * the async error handling variable. The input is one string.
 *
 * Invariants checked: it accepts exactly DIGITS{1,4} '.' DIGITS{1,3}
 * followed by nothing, '.', '+' or a pre-release letter (a, b, rc, dev),
 * with a minor below 100; the result is major * 100 + minor. */
#include "config.h"
#include "fuzz.h"

static int ref(const char *s, int *out) {
  int major = 0, minor = 0, k = 0;
  while (s[k] >= '0' && s[k] <= '9' && k < 4)
    major = major * 10 + (s[k++] - '0');
  if (k == 0 || s[k] != '.')
    return 0;
  s += k + 1;
  k = 0;
  while (s[k] >= '0' && s[k] <= '9' && k < 3)
    minor = minor * 10 + (s[k++] - '0');
  if (k == 0 || minor > 99)
    return 0;
  if (s[k] && s[k] != '.' && s[k] != '+' && s[k] != 'a' && s[k] != 'b' &&
      s[k] != 'r' && s[k] != 'd')
    return 0;
  *out = major * 100 + minor;
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  int v = -1, want = -1, ok, rc;
  FUZZ_CHECK(s != NULL);
  memcpy(s, data, size);
  s[size] = '\0';
  ok = ref(s, &want);
  rc = cfg_parse_torch_version(s, &v);
  FUZZ_CHECK(rc == 0 || rc == -1);
  FUZZ_CHECK((rc == 0) == ok);
  if (ok)
    FUZZ_CHECK(v == want && v >= 0);
  free(s);
  return 0;
}
