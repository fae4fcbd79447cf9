/* fuzz_libfiles.c - libFuzzer target for the file parsers behind the
 * fingerprint's GPU stack versions (affinity/aff_libs.c): the input is an
 * ld.so.cache, an ELF file (its .rodata section located through the
 * section headers, then searched for NCCL's version string), a
 * cuda_runtime_api.h, a library file name and a driver version, all at
 * once. Every answer must stay within the input and be well formed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aff_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
  const uint8_t *p;
  size_t n;
} mem_t;

static int mem_read(void *ctx, uint64_t off, void *buf, size_t n) {
  const mem_t *m = ctx;
  if (off > m->n || n > m->n - off)
    return -1;
  memcpy(buf, m->p + off, n);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char out[64], *s;
  int v[3], k;
  uint64_t off, len;
  mem_t m = {data, size};
  if (size > (1u << 20))
    return 0;
  if (aff__ldcache_find(data, size, "libnccl.so.2", out, sizeof(out)) == 0 &&
      (out[0] != '/' || strlen(out) >= sizeof(out)))
    abort();
  if (aff__elf_section(mem_read, &m, ".rodata", &off, &len) == 0) {
    if (off <= size && len <= size - off)
      (void)aff__nccl_verstr((const char *)data + off, (size_t)len);
  }
  k = aff__nccl_verstr((const char *)data, size);
  if (k != 0 && (k < 1000 || k > 999999))
    abort();
  k = aff__cudart_header((const char *)data, size);
  if (k != 0 && (k < 1000 || k >= 1000000))
    abort();
  if ((s = malloc(size + 1)) == NULL)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  k = aff__libver_name(s, "libnccl.so.", v);
  if (k < 0 || k > 3 || v[0] < 0 || v[1] < 0 || v[2] < 0)
    abort();
  (void)aff__cuda_of_driver(s);
  free(s);
  return 0;
}
