/* fuzz_etcd_watch.c - etcd_watch_decode(), one line of the stream etcd's
 * v3 JSON gateway writes for POST /v3/watch (a member, or whatever answers
 * at its address, writes them; --rdzv-backend etcd reads them).
 *
 * Invariants checked:
 * - the result is 0, RDZV_EPROTO or RDZV_ENOMEM, and a refused line comes
 *   with a message saying why;
 * - on success at most ETCD_WATCH_MAX_EVENTS events are kept; each key
 *   is 1 or more bytes (key_len), kept NUL-terminated when below
 *   ETCD_MAX_KEY and left "" when longer; each value below ETCD_MAX_VALUE,
 *   NUL-terminated; an error message has a message. */
#include "etcd.h"
#include "fuzz.h"
#include "rdzv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size ? size : 1), err[256] = "";
  etcd_watch_msg_t *m = malloc(sizeof(*m));
  int rc;
  FUZZ_CHECK(s != NULL && m != NULL);
  if (size)
    memcpy(s, data, size);
  rc = etcd_watch_decode(s, size, m, err, sizeof(err));
  FUZZ_CHECK(rc == 0 || rc == RDZV_EPROTO || rc == RDZV_ENOMEM);
  FUZZ_CHECK(rc == 0 || rc == RDZV_ENOMEM || err[0] != '\0');
  if (rc == 0) {
    FUZZ_CHECK(m->nevents <= ETCD_WATCH_MAX_EVENTS);
    FUZZ_CHECK(!m->more || m->nevents == ETCD_WATCH_MAX_EVENTS);
    for (size_t i = 0; i < m->nevents; i++) {
      size_t kl = strnlen(m->events[i].key, sizeof(m->events[i].key));
      size_t vl = strnlen(m->events[i].value, sizeof(m->events[i].value));
      FUZZ_CHECK(kl < sizeof(m->events[i].key));
      FUZZ_CHECK(m->events[i].key_len > 0);
      FUZZ_CHECK(m->events[i].key_len < ETCD_MAX_KEY
                     ? kl == m->events[i].key_len
                     : kl == 0);
      FUZZ_CHECK(vl < ETCD_MAX_VALUE);
    }
    if (m->error)
      FUZZ_CHECK(m->message[0] != '\0' && m->nevents == 0);
  }
  free(m);
  free(s);
  return 0;
}
