/* fuzz_etcd_reply.c - etcd_decode(), the replies of etcd's v3 JSON gateway
 * that --rdzv-backend etcd reads (a member, or whatever answers at its
 * address, writes them), and the base64 of its keys and values.
 *
 * Invariants checked:
 * - the result is 0, RDZV_EPROTO or RDZV_ENOMEM, and a refused reply comes
 *   with a message saying why;
 * - on success a found value is NUL-terminated, its length is value_len,
 *   below ETCD_MAX_VALUE, with no NUL inside; an error reply has a message;
 * - base64: any bytes encode, and decode back to the same bytes; the input
 *   read as base64 decodes to at most 3/4 of its length, or is refused. */
#include "etcd.h"
#include "fuzz.h"
#include "rdzv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size ? size : 1), err[256] = "";
  char enc[1024], dec[800];
  etcd_reply_t r;
  int rc, n;
  FUZZ_CHECK(s != NULL);
  if (size)
    memcpy(s, data, size);
  rc = etcd_decode(s, size, &r, err, sizeof(err));
  FUZZ_CHECK(rc == 0 || rc == RDZV_EPROTO || rc == RDZV_ENOMEM);
  FUZZ_CHECK(rc == 0 || rc == RDZV_ENOMEM || err[0] != '\0');
  if (rc == 0 && r.found) {
    FUZZ_CHECK(r.value_len < ETCD_MAX_VALUE);
    FUZZ_CHECK(strlen(r.value) == r.value_len);
  }
  if (rc == 0 && r.error)
    FUZZ_CHECK(r.message[0] != '\0');
  if (size <= 500) {
    n = etcd_b64(s, size, enc, sizeof(enc));
    FUZZ_CHECK(n >= 0 && (size_t)n == 4 * ((size + 2) / 3));
    n = etcd_unb64(enc, (size_t)n, dec, sizeof(dec));
    FUZZ_CHECK(n >= 0 && (size_t)n == size && memcmp(dec, s, size) == 0);
  }
  n = etcd_unb64(s, size, dec, sizeof(dec));
  FUZZ_CHECK(n < 0 || (size_t)n <= size / 4 * 3);
  free(s);
  return 0;
}
