/* fuzz_hello.c - the client's side of the handshake (proto_hello_*), which
 * librdzv and the agent share, fed what a server (or anything listening
 * on the port) sends: the CHALLENGE push, then HELLO's reply. Also the
 * job keys (proto_job_key) of the job ids it makes up.
 *
 * Input: one byte of flags (bit 0: the client holds a token; bit 1: the
 * reply's proof is replaced by the right one; bit 2: the job id comes from
 * the input), then the server's stream: length-prefixed msgpack frames.
 *
 * Invariants checked:
 * - the features it gives are the challenge's (after auth_required) that
 *   this build knows, 0 when there are none;
 * - proto_hello_challenge() accepts exactly a CHALLENGE push with a 32-byte
 *   nonce, and refuses it (RDZV_EAUTH) when the server asks for a token and
 *   the client has none; a refusal comes with a message;
 * - the HELLO it packs decodes as [version, role, job, proof, nonce], the
 *   proof being HMAC(token, "rdzv-client", nonce, job, role);
 * - proto_hello_reply() accepts exactly the server's right proof
 *   HMAC(token, "rdzv-server", client nonce, job, role), and anything
 *   without a token;
 * - a job key is 64 hex digits, the same each time, other for another job. */
#include "fuzz.h"
#include "lu.h"
#include "proto.h"

/* The next frame of the stream, decoded. RET 0 or -1 (none or bad). */
static int next_msg(const uint8_t **p, size_t *n, uint8_t **body,
                    proto_msg_t *m) {
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  uint32_t len;
  lim.max_frame = 64u << 20; /* a client's limits */
  lim.max_items = 1u << 22;
  if (*n < PROTO_HDR)
    return -1;
  len = proto_get_len(*p);
  if (len > *n - PROTO_HDR)
    return -1;
  *body = fuzz_dup(*p + PROTO_HDR, len);
  *p += PROTO_HDR + len;
  *n -= PROTO_HDR + len;
  if (proto_decode(*body, len, &lim, m) != 0) {
    free(*body);
    return -1;
  }
  return 0;
}

static void check_job_key(const char *job) {
  char k1[PROTO_JOB_KEY_LEN + 1], k2[PROTO_JOB_KEY_LEN + 1];
  char other[300];
  if (proto_job_key("secret", 6, job, k1) != 0) {
    FUZZ_CHECK(strlen(job) > 255);
    return;
  }
  FUZZ_CHECK(strlen(k1) == PROTO_JOB_KEY_LEN);
  FUZZ_CHECK(strspn(k1, "0123456789abcdef") == PROTO_JOB_KEY_LEN);
  FUZZ_CHECK(proto_job_key("secret", 6, job, k2) == 0 && !strcmp(k1, k2));
  snprintf(other, sizeof(other), "%s.", job);
  if (strlen(other) <= 255) {
    FUZZ_CHECK(proto_job_key("secret", 6, other, k2) == 0);
    FUZZ_CHECK(strcmp(k1, k2) != 0);
  }
}

/* Does the packed HELLO carry what it must? */
static void check_hello(const proto_hello_t *h, const uint8_t nonce[32]) {
  proto_limits_t lim = PROTO_LIMITS_DEFAULT;
  proto_enc_t e;
  proto_msg_t m;
  const char *p;
  size_t n;
  int64_t v;
  uint8_t want[PROTO_MAC_LEN];
  proto_enc_init(&e);
  proto_enc_begin(&e, 8);
  msgpack_pack_uint8(&e.pk, PROTO_REQUEST);
  msgpack_pack_uint64(&e.pk, 1);
  msgpack_pack_int64(&e.pk, PROTO_OP_HELLO);
  proto_hello_pack(h, &e.pk);
  FUZZ_CHECK(proto_enc_end(&e) == 0);
  FUZZ_CHECK(proto_decode((uint8_t *)e.data + PROTO_HDR, e.len - PROTO_HDR,
                          &lim, &m) == 0);
  FUZZ_CHECK(m.nargs == 5 && proto_arg_i64(&m, 0, &v) == 0 &&
             v == RDZV_PROTOCOL_VERSION);
  FUZZ_CHECK(proto_arg_bytes(&m, 1, &p, &n) == 0 && n == strlen(h->role) &&
             !memcmp(p, h->role, n));
  FUZZ_CHECK(proto_arg_bytes(&m, 2, &p, &n) == 0 && n == strlen(h->job) &&
             !memcmp(p, h->job, n));
  FUZZ_CHECK(proto_arg_bytes(&m, 4, &p, &n) == 0 && n == PROTO_NONCE_LEN &&
             !memcmp(p, h->cnonce, n));
  if (h->token) {
    FUZZ_CHECK(proto_mac(h->token, h->token_len, "rdzv-client", nonce,
                         PROTO_NONCE_LEN, h->job, h->role, want) == 0);
    FUZZ_CHECK(proto_arg_bytes(&m, 3, &p, &n) == 0 && n == PROTO_MAC_LEN &&
               !memcmp(p, want, n));
  } else {
    FUZZ_CHECK(m.args[3].type == MSGPACK_OBJECT_NIL);
  }
  proto_msg_free(&m);
  proto_enc_destroy(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  proto_hello_t h;
  proto_msg_t m;
  uint8_t *body = NULL, nonce[PROTO_NONCE_LEN];
  const uint8_t *p;
  const char *np;
  size_t n, nn;
  char err[256], job[256] = "fuzz-job";
  int flags, rc, is_challenge, auth = 0;
  uint32_t feats = 0;

  if (size < 1)
    return 0;
  flags = data[0];
  p = data + 1;
  n = size - 1;
  if ((flags & 4) && n > 0) {
    /* A job id from the input: up to the first NUL, at most 255 bytes. */
    size_t jl = strnlen((const char *)p, LU_MIN(n, sizeof(job) - 1));
    memcpy(job, p, jl);
    job[jl] = '\0';
    p += LU_MIN(jl + 1, n);
    n -= LU_MIN(jl + 1, n);
    if (jl == 0)
      lu_strlcpy(job, "fuzz-job", sizeof(job));
  }
  check_job_key(job);
  memset(&h, 0, sizeof(h));
  h.job = job;
  h.role = "agent";
  h.token = (flags & 1) ? "the-token" : NULL;
  h.token_len = h.token ? strlen(h.token) : 0;

  if (next_msg(&p, &n, &body, &m) != 0)
    return 0;
  is_challenge = m.kind == PROTO_PUSH && m.op == PROTO_EV_CHALLENGE &&
                 proto_arg_bytes(&m, 0, &np, &nn) == 0 &&
                 nn == PROTO_NONCE_LEN;
  if (is_challenge) {
    memcpy(nonce, np, PROTO_NONCE_LEN);
    auth = m.nargs > 2 && m.args[2].type == MSGPACK_OBJECT_BOOLEAN &&
           m.args[2].via.boolean;
    if (m.nargs > 3 && m.args[3].type == MSGPACK_OBJECT_POSITIVE_INTEGER)
      feats = (uint32_t)(m.args[3].via.u64 & PROTO_FEATURES);
  }
  err[0] = '\0';
  rc = proto_hello_challenge(&h, &m, err, sizeof(err));
  proto_msg_free(&m);
  free(body);
  if (!is_challenge) {
    FUZZ_CHECK(rc == RDZV_EPROTO && err[0] != '\0');
    return 0;
  }
  if (auth && h.token == NULL) {
    FUZZ_CHECK(rc == RDZV_EAUTH && err[0] != '\0');
    return 0;
  }
  FUZZ_CHECK(rc == 0);
  /* Only the features this build knows, and only when offered. */
  FUZZ_CHECK(h.features == feats);
  check_hello(&h, nonce);

  /* HELLO's reply. */
  if (next_msg(&p, &n, &body, &m) != 0)
    return 0;
  if ((flags & 2) && h.token && m.nargs > 0 &&
      m.args[0].type == MSGPACK_OBJECT_BIN &&
      m.args[0].via.bin.size == PROTO_MAC_LEN) {
    /* The right proof, where the input has room for one. */
    uint8_t right[PROTO_MAC_LEN];
    FUZZ_CHECK(proto_mac(h.token, h.token_len, "rdzv-server", h.cnonce,
                         sizeof(h.cnonce), h.job, h.role, right) == 0);
    memcpy((void *)m.args[0].via.bin.ptr, right, PROTO_MAC_LEN);
    FUZZ_CHECK(proto_hello_reply(&h, &m, err, sizeof(err)) == 0);
  } else {
    rc = proto_hello_reply(&h, &m, err, sizeof(err));
    /* Without a token nothing is checked; with one, a proof made without
     * the client's fresh nonce cannot pass. */
    FUZZ_CHECK(h.token ? rc == RDZV_EAUTH : rc == 0);
  }
  proto_msg_free(&m);
  free(body);
  return 0;
}
