/* fuzz.h - what every fuzz target shares. A target is fuzz/fuzz_<name>.c: it
 * defines LLVMFuzzerTestOneInput and checks the invariants of the decoder it
 * drives with FUZZ_CHECK. The same source links with libFuzzer
 * (LAUNCH_FUZZ=ON, clang) and with replay_main.c, which ctest runs over the
 * saved corpus and crashers in every build (SQLite's fuzzcheck). */
#ifndef FUZZ_H
#define FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant is a crash: libFuzzer saves the input, the replay test
 * fails. abort() rather than assert() so that release builds check too. */
#define FUZZ_CHECK(cond)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__,         \
              __LINE__, #cond);                                                \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/* A copy of data[0..n) in a buffer of exactly n bytes (1 when n is 0), so
 * that AddressSanitizer sees any read past the end of the piece a decoder
 * was given, not just past the end of the whole input. Free with free(). */
static inline uint8_t *fuzz_dup(const uint8_t *data, size_t n) {
  uint8_t *p = malloc(n ? n : 1);
  if (p == NULL)
    abort();
  if (n)
    memcpy(p, data, n);
  return p;
}

/* Is [p, p+n) inside [base, base+len)? An empty range is inside anything
 * (it is never read), whatever p is. */
static inline int fuzz_within(const void *p, uint64_t n, const void *base,
                              size_t len) {
  uintptr_t q = (uintptr_t)p, b = (uintptr_t)base;
  if (n == 0)
    return 1;
  return p != NULL && q >= b && q - b <= len && n <= (uint64_t)(len - (q - b));
}

/* Read every byte of [p, p+n), so that an out-of-bounds range faults under
 * AddressSanitizer even when nothing else would touch it. */
static inline unsigned fuzz_touch(const void *p, size_t n) {
  const volatile uint8_t *q = p;
  unsigned s = 0;
  for (size_t i = 0; i < n; i++)
    s += q[i];
  return s;
}

#endif /* FUZZ_H */
