/* fuzz_torchver_files.c - what torchver.c reads to find the PyTorch a
 * program will import, each parser apart from its read:
 *   0 tv__line_value: torch/version.py ("__version__ = "), then the quotes
 *     stripped and cfg_parse_torch_version, as torch_in does;
 *   1 tv__line_value: a dist-info METADATA ("Version: ");
 *   2 tv__shebang: the program's first line (fgets of 511 bytes);
 *   3 tv__prefix_reply: what the interpreter printed for sys.prefix and its
 *     X.Y (at most 2 * PATH_MAX - 1 bytes, as ask_prefix reads).
 * The input is the selector byte (mod 4), then the file or output.
 *
 * Invariants checked: a value found is NUL-terminated in its buffer and
 * holds no newline; a shebang's interpreter is a python* name without
 * blanks; a prefix reply taken is an absolute prefix and a version starting
 * with a digit, neither holding a newline. */
#include <limits.h>

#include "fuzz.h"
#include "launch.h"

static void line_value(const uint8_t *d, size_t n, const char *key,
                       int version) {
  char v[128];
  FILE *f;
  memset(v, 'x', sizeof(v));
  if (n == 0 || (f = fmemopen((void *)d, n, "r")) == NULL)
    return;
  if (tv__line_value(f, key, v, sizeof(v))) {
    int ver = -1;
    FUZZ_CHECK(memchr(v, '\0', sizeof(v)) != NULL);
    FUZZ_CHECK(strpbrk(v, "\r\n") == NULL);
    if (version)
      (void)cfg_parse_torch_version(v + strspn(v, "'\""), &ver);
    else
      (void)cfg_parse_torch_version(v, &ver);
  }
  fclose(f);
}

static void shebang(const uint8_t *d, size_t n) {
  char line[512], named[PATH_MAX];
  FILE *f;
  if (n == 0 || (f = fmemopen((void *)d, n, "r")) == NULL)
    return;
  if (fgets(line, sizeof(line), f) != NULL) {
    memset(named, 'x', sizeof(named));
    if (tv__shebang(line, named, sizeof(named)) == 0) {
      const char *b = strrchr(named, '/');
      FUZZ_CHECK(memchr(named, '\0', sizeof(named)) != NULL);
      FUZZ_CHECK(strncmp(b ? b + 1 : named, "python", 6) == 0);
      FUZZ_CHECK(strpbrk(named, " \t\r\n") == NULL);
    }
  }
  fclose(f);
}

static void prefix_reply(const uint8_t *d, size_t n) {
  char *out, prefix[PATH_MAX], pyver[16];
  if (n > 2 * PATH_MAX - 1)
    n = 2 * PATH_MAX - 1;
  out = malloc(n + 1);
  FUZZ_CHECK(out != NULL);
  memcpy(out, d, n);
  out[n] = '\0';
  memset(prefix, 'x', sizeof(prefix));
  memset(pyver, 'x', sizeof(pyver));
  if (tv__prefix_reply(out, prefix, sizeof(prefix), pyver, sizeof(pyver)) ==
      0) {
    FUZZ_CHECK(memchr(prefix, '\0', sizeof(prefix)) != NULL &&
               memchr(pyver, '\0', sizeof(pyver)) != NULL);
    FUZZ_CHECK(prefix[0] == '/' && pyver[0] >= '0' && pyver[0] <= '9');
    FUZZ_CHECK(strchr(prefix, '\n') == NULL && strpbrk(pyver, "\r\n") == NULL);
  }
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *d;
  size_t n;
  if (size < 1 || size > 65536)
    return 0;
  n = size - 1;
  d = fuzz_dup(data + 1, n);
  switch (data[0] % 4) {
  case 0: line_value(d, n, "__version__ = ", 1); break;
  case 1: line_value(d, n, "Version: ", 0); break;
  case 2: shebang(d, n); break;
  default: prefix_reply(d, n); break;
  }
  free(d);
  return 0;
}
