/* fuzz_status_vals.c - what `launch status` reads back from the server
 * after the STATUS reply (cmd_status.c): the LIST replies of the progress
 * keys (status__keys_add: on_list, the native launch/progress/ and the
 * TCPStore namespace's), then the MGET reply of their values, which other
 * nodes' ranks wrote (status__ranks: on_mget, msg_progress_decode).
 *
 * The input is a byte (mod 3: how many LIST replies), then reply frames as
 * the wire has them (a 4-byte big-endian length, then the msgpack body),
 * decoded with the limits of the agent's client (aclient.c): the LIST
 * replies, then the MGET reply, asked only when some key was listed. A
 * frame that does not decode is a failed request.
 *
 * Invariants checked: at most 65,536 keys, each a string; at most as many
 * ranks as keys, sorted, each in 0..2^30 with a step >= 0. */
#include "cmd_vals.h"
#include "fuzz.h"
#include "rdzv.h"

/* The next frame of [*p, end) into m, its body (malloc'd) *bodyp. RET 0, or -1 when it does not decode
 * (or none is left: then *p is end). */
static int next(const uint8_t **p, const uint8_t *end, proto_msg_t *m,
                uint8_t **bodyp) {
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  uint32_t len;
  uint8_t *body;
  int rc;
  lim.max_frame = 64u << 20;
  lim.max_items = 1u << 22;
  if (end - *p < PROTO_HDR) {
    *p = end;
    return -1;
  }
  len = proto_get_len(*p);
  *p += PROTO_HDR;
  if (len > (size_t)(end - *p))
    len = (uint32_t)(end - *p);
  body = fuzz_dup(*p, len);
  *p += len;
  rc = proto_decode(body, len, &lim, m);
  if (rc != 0) {
    free(body);
    return -1;
  }
  *bodyp = body;
  return 0;
}

static void done(proto_msg_t *m, uint8_t *body) {
  proto_msg_free(m);
  free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *p, *end = data + size;
  char **keys = NULL;
  size_t nkeys = 0, nrk = 0;
  status_rank_t *rk = NULL;
  proto_msg_t m;
  uint8_t *body;
  int lists;
  if (size < 1)
    return 0;
  lists = data[0] % 3;
  p = data + 1;
  for (int i = 0; i < lists; i++)
    if (next(&p, end, &m, &body) == 0) {
      status__keys_add(&m, &keys, &nkeys);
      done(&m, body);
    }
  FUZZ_CHECK(nkeys <= 65536);
  for (size_t i = 0; i < nkeys; i++)
    FUZZ_CHECK(keys[i] != NULL && strlen(keys[i]) < size);
  if (nkeys > 0 && next(&p, end, &m, &body) == 0) {
    status__ranks(&m, keys, nkeys, &rk, &nrk);
    done(&m, body);
  }
  FUZZ_CHECK(nrk <= nkeys && (nrk == 0 || rk != NULL));
  for (size_t i = 0; i < nrk; i++) {
    FUZZ_CHECK(rk[i].rank >= 0 && rk[i].rank <= (1 << 30));
    FUZZ_CHECK(rk[i].p.step >= 0);
    if (i > 0)
      FUZZ_CHECK(rk[i - 1].rank <= rk[i].rank);
    if (rk[i].p.has_total_steps && rk[i].p.has_step_time &&
        rk[i].p.total_steps > rk[i].p.step) {
      char eta[16]; /* cmd_status.c's ETA column */
      status__fmt_duration((double)(rk[i].p.total_steps - rk[i].p.step) *
                               rk[i].p.step_time, eta, sizeof(eta));
      FUZZ_CHECK(eta[0] != '\0');
    }
  }
  free(rk);
  rdzv_free_keys(keys, nkeys);
  return 0;
}
