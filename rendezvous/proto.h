/* proto.h - the native wire protocol: framing, msgpack codec, HELLO
 * authentication. Shared by the server, librdzv and the agent.
 *
 * A native connection starts with the 4 bytes "RDZV" from the client. The
 * server answers with a CHALLENGE push; the client's first request is HELLO.
 * After that, frames in both directions:
 *
 *   u32 big-endian length | msgpack array [kind, id, op, args...]   (request)
 *                         | msgpack array [kind, id, status, results...] (reply)
 *                         | msgpack array [kind, 0, event, args...]  (push)
 *
 * docs/protocol.md is the full specification. */
#ifndef PROTO_H
#define PROTO_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "rdzv.h"

#define PROTO_MAGIC "RDZV"
#define PROTO_MAGIC_LEN 4
#define PROTO_HDR 4
#define PROTO_NONCE_LEN 32
#define PROTO_MAC_LEN 32

enum { PROTO_REQUEST = 0, PROTO_REPLY = 1, PROTO_PUSH = 2 };

/* Request ops. The numbers are part of the protocol: append only. */
#define PROTO_OP_MAP(XX)                                                       \
  XX(HELLO, 1, "hello")                                                        \
  XX(PING, 2, "ping")                                                          \
  XX(SET, 3, "set")                                                            \
  XX(GET, 4, "get")                                                            \
  XX(CHECK, 5, "check")                                                        \
  XX(ADD, 6, "add")                                                            \
  XX(CAS, 7, "compare_set")                                                    \
  XX(WAIT, 8, "wait")                                                          \
  XX(DELETE, 9, "delete")                                                      \
  XX(NUMKEYS, 10, "num_keys")                                                  \
  XX(APPEND, 11, "append")                                                     \
  XX(MGET, 12, "multi_get")                                                    \
  XX(MSET, 13, "multi_set")                                                    \
  XX(BARRIER, 14, "barrier")                                                   \
  XX(LIST, 15, "list_keys")                                                    \
  XX(CANCEL, 16, "cancel")                                                     \
  XX(SETQ, 17, "set_quiet")                                                   \
  XX(JOIN, 32, "rdzv_join")                                                    \
  XX(HEARTBEAT, 33, "rdzv_heartbeat")                                          \
  XX(LEAVE, 34, "rdzv_leave")                                                  \
  XX(REPORT, 35, "rdzv_report")                                                \
  XX(STATUS, 36, "rdzv_status")                                                \
  XX(SUBSCRIBE, 37, "rdzv_subscribe")

typedef enum {
#define PROTO_XX(name, val, str) PROTO_OP_##name = (val),
  PROTO_OP_MAP(PROTO_XX)
#undef PROTO_XX
  PROTO_OP_MAX_ = 64
} proto_op_t;

/* Features a server offers, in its CHALLENGE (a bit mask after
 * auth_required; absent from servers older than the first feature: 0). */
#define PROTO_FEAT_SETQ 1u /* SETQ: a set answered only when it fails */
#define PROTO_FEATURES PROTO_FEAT_SETQ /* what this build's server offers */

/* Push events (server -> client). */
#define PROTO_EV_MAP(XX)                                                       \
  XX(CHALLENGE, 1, "challenge")                                                \
  XX(ROUND, 2, "round")                                                        \
  XX(RESTART, 3, "restart")                                                    \
  XX(MEMBERS, 4, "members")                                                    \
  XX(SHUTDOWN, 5, "shutdown")                                                  \
  XX(WAITING, 6, "waiting")

typedef enum {
#define PROTO_XX(name, val, str) PROTO_EV_##name = (val),
  PROTO_EV_MAP(PROTO_XX)
#undef PROTO_XX
  PROTO_EV_MAX_ = 64
} proto_ev_t;

const char *proto_op_name(int op);

/* A reply's status as a return code: 0, or a negative int. A server
 * sending another (positive, or beyond int) would turn a failure into 0,
 * success, or a positive count once cast: RDZV_EPROTO. */
static inline int proto_status(int64_t op) {
  return op == 0 ? 0 : op < 0 && op >= INT32_MIN ? (int)op : RDZV_EPROTO;
}
const char *proto_ev_name(int ev);

/* Limits of one decoded frame. */
typedef struct proto_limits_s {
  uint32_t max_frame;   /* bytes of one frame body */
  uint32_t max_items;   /* msgpack objects in one frame */
  uint32_t max_depth;   /* nesting of arrays/maps */
} proto_limits_t;

#define PROTO_LIMITS_DEFAULT {16u << 20, 300000u, 4u}

/* ---- decoding ------------------------------------------------------------ */

/* Read the big-endian length at p (>= 4 bytes). */
uint32_t proto_get_len(const uint8_t *p);
void proto_put_len(uint8_t *p, uint32_t n);

/* Check that buf[0..n) is exactly one well-formed msgpack object within the
 * limits (objects, depth), before anything is allocated for it.
 * RET 0, RDZV_EPROTO (malformed or trailing bytes), RDZV_ETOOBIG. */
int proto_scan(const uint8_t *buf, size_t n, const proto_limits_t *lim);

/* Elements of a flat frame (nothing but scalars, strings and binaries)
 * that proto_decode reads in one pass into the message itself. */
#define PROTO_FLAT_MAX 12

/* A decoded message. Strings and binaries point into the frame buffer, which
 * must outlive the message; containers live in the zone, or, for a flat
 * frame, in flat[] (so a proto_msg_t must not be copied by value). */
typedef struct proto_msg_s {
  int kind;
  uint64_t id;
  int64_t op;                 /* op (request), status (reply), event (push) */
  const msgpack_object *args; /* the elements after op */
  uint32_t nargs;
  const uint8_t *keys; /* proto_decode_keylist: the list's first item */
  uint32_t nkeys;      /* and its items */
  msgpack_zone zone;
  int zone_live;
  msgpack_object flat[PROTO_FLAT_MAX];
} proto_msg_t;

/* Decode one frame body (after the length). Runs proto_scan first.
 * OUT *msg: free with proto_msg_free(). RET 0, RDZV_EPROTO, RDZV_ETOOBIG,
 * RDZV_ENOMEM. */
int proto_decode(const uint8_t *buf, size_t n, const proto_limits_t *lim,
                 proto_msg_t *msg);
/* The same through msgpack-c alone (a zone for every frame): what a flat
 * frame's one pass must agree with (fuzz/fuzz_frame.c checks it). */
int proto_decode_generic(const uint8_t *buf, size_t n,
                         const proto_limits_t *lim, proto_msg_t *msg);
void proto_msg_free(proto_msg_t *msg);
/* A request whose first argument is a list of strings or binaries and
 * whose others are scalars (an MGET, WAIT or CHECK of 131,072 keys),
 * decoded in one pass without a msgpack object per key: msg->keys points
 * at the list's first item, msg->nkeys counts them (proto_next_bytes walks
 * them) and args[0] is an empty array. Within the limits proto_decode
 * applies (the same header, the same other arguments). RET 0, or
 * RDZV_EPROTO: not such a frame (or over a limit): proto_decode decides.
 * Nothing to free. */
int proto_decode_keylist(const uint8_t *buf, size_t n,
                         const proto_limits_t *lim, proto_msg_t *msg);
/* proto_decode_keylist a step at a time, while the frame (n bytes) comes:
 * buf[0..avail) has come; buf may move between calls (kl keeps offsets).
 * Start with kl zeroed. RET PROTO_KL_KEY: one more key, at buf + *koff,
 * *klen bytes; PROTO_KL_MORE: call again once more has come;
 * PROTO_KL_DONE (avail == n): *msg is what proto_decode_keylist makes;
 * RDZV_EPROTO: not such a frame. */
typedef struct proto_keylist_s {
  size_t pos, list; /* the next item; the first key */
  uint32_t cnt, nk, k; /* the frame's elements, its keys, keys read */
  int stage;
} proto_keylist_t;
#define PROTO_KL_KEY 1
#define PROTO_KL_MORE 2
#define PROTO_KL_DONE 3
int proto_keylist_step(proto_keylist_t *kl, const uint8_t *buf, size_t avail,
                       size_t n, const proto_limits_t *lim, proto_msg_t *msg,
                       size_t *koff, size_t *klen);
/* The header of a frame too large to decode ([kind, id, op, ...]) from
 * its first bytes, buf[0..n): enough to answer it and skip the rest.
 * PROTO_PEEK_MAX bytes always suffice (fewer when the frame is shorter).
 * OUT *id, *op. RET 0 when it is a request, PROTO_KL_MORE when more
 * bytes are needed, RDZV_EPROTO when it is not a request. */
#define PROTO_PEEK_MAX 32
int proto_peek_request(const uint8_t *buf, size_t n, uint64_t *id,
                       int64_t *op);
/* The str or bin at *pos in a list proto_decode_keylist accepted: *p, *n
 * (never NULL); *pos moves past it. */
void proto_next_bytes(const uint8_t **pos, const char **p, size_t *n);

/* Typed access to msg->args[i]; RET 0 or RDZV_EPROTO. The bytes accessors
 * never give a NULL *p (an empty string or bin points at ""), except for
 * nil in proto_arg_bytes_or_nil. */
int proto_arg_bytes(const proto_msg_t *m, uint32_t i, const char **p,
                    size_t *n);            /* str or bin */
int proto_arg_bytes_or_nil(const proto_msg_t *m, uint32_t i, const char **p,
                           size_t *n, int *is_nil);
int proto_arg_i64(const proto_msg_t *m, uint32_t i, int64_t *v);
int proto_arg_array(const proto_msg_t *m, uint32_t i,
                    const msgpack_object **items, uint32_t *n);
int proto_obj_bytes(const msgpack_object *o, const char **p, size_t *n);
int proto_obj_i64(const msgpack_object *o, int64_t *v);

/* The value of the first string key `key` of map m (the rendezvous
 * messages, msg.h). NULL when m is not a map or has no such key. */
const msgpack_object *proto_map_get(const msgpack_object *m, const char *key);

/* ---- encoding ------------------------------------------------------------- */

/* An encoder writes frames into a growable buffer: proto_enc_begin() reserves
 * the length, the caller packs the array with pk, proto_enc_end() patches the
 * length. Several frames may follow each other in one buffer. */
typedef struct proto_enc_s {
  char *data;
  size_t len, cap;
  /* How data is allocated: realloc and free, or what
   * proto_enc_init_alloc was given (the server's cache of big blocks). */
  void *(*realloc_fn)(void *, size_t);
  void (*free_fn)(void *);
  int oom;            /* an allocation failed; the buffer is incomplete */
  int toobig;         /* a str or bin over 4 GiB: the frame is dropped */
  msgpack_packer pk;
  size_t frame_start;
} proto_enc_t;

void proto_enc_init(proto_enc_t *e);
/* An encoder whose buffer comes from realloc_fn and goes with free_fn
 * (whoever takes data frees it with free_fn). */
void proto_enc_init_alloc(proto_enc_t *e, void *(*realloc_fn)(void *, size_t),
                          void (*free_fn)(void *));
void proto_enc_destroy(proto_enc_t *e);
void proto_enc_reset(proto_enc_t *e); /* keep the memory, drop the bytes */
/* Begin a frame holding an array of `count` elements. */
void proto_enc_begin(proto_enc_t *e, uint32_t count);
/* Begin a frame [kind, id, op, ...nargs more elements] (a request, a reply
 * with op the status, a push with id 0), its header in one write. */
void proto_enc_begin_msg(proto_enc_t *e, uint32_t nargs, int kind,
                         uint64_t id, int64_t op);
/* Patch the frame length. RET 0, RDZV_ENOMEM (the frame is dropped),
 * RDZV_ETOOBIG (over 4 GiB). */
int proto_enc_end(proto_enc_t *e);
/* Append raw bytes (the magic). RET 0 or RDZV_ENOMEM. */
int proto_enc_raw(proto_enc_t *e, const void *p, size_t n);
/* The same elements written straight into the encoder's buffer (one
 * reserve, one copy; msgpack's shortest forms, as msgpack-c writes them):
 * a str of n bytes, a bin, an integer. */
void proto_enc_str(proto_enc_t *e, const char *s, size_t n);
void proto_enc_bin(proto_enc_t *e, const void *p, size_t n);
void proto_enc_int(proto_enc_t *e, int64_t v);
/* A whole frame [kind, id, op, key (str), value (bin) or v (int)], the
 * length patched (no proto_enc_end needed), with one reserve: the set and
 * get of librdzv's hot path. RET 0, RDZV_ENOMEM or RDZV_ETOOBIG (a body
 * over 4 GiB); on failure nothing is added to e. */
int proto_enc_key_bin(proto_enc_t *e, int kind, uint64_t id, int64_t op,
                      const char *k, size_t kn, const void *v, size_t vn);
int proto_enc_key_int(proto_enc_t *e, int kind, uint64_t id, int64_t op,
                      const char *k, size_t kn, int64_t v);
void proto_pack_bytes(msgpack_packer *pk, const void *p, size_t n); /* bin */
void proto_pack_str(msgpack_packer *pk, const char *s);

/* ---- authentication ------------------------------------------------------ */

/* HMAC-SHA256(token, label || nonce || job || role) into mac[32]. The label
 * separates the client's proof ("rdzv-client") from the server's
 * ("rdzv-server"). RET 0 or RDZV_ENOMEM. */
int proto_mac(const void *token, size_t token_len, const char *label,
              const uint8_t *nonce, size_t nonce_len, const char *job,
              const char *role, uint8_t mac[PROTO_MAC_LEN]);
/* Constant-time comparison. */
int proto_mac_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* The key of one job: hex(HMAC-SHA256(secret, L("launch-job-key-v1")
 * L(job))), 64 characters. A client holding it (as its token) can enter
 * that job and no other; the server derives it from its own secret, so
 * nothing per job is stored. RET 0, RDZV_EINVAL (job over 255 bytes). */
#define PROTO_JOB_KEY_LEN 64
int proto_job_key(const void *secret, size_t secret_len, const char *job,
                  char out[PROTO_JOB_KEY_LEN + 1]);

/* ---- the client's side of the handshake (librdzv and the agent) -------- */

typedef struct proto_hello_s {
  const char *job, *role;      /* IN */
  const void *token;           /* IN: the server's token or the job's key */
  size_t token_len;
  uint8_t cnonce[PROTO_NONCE_LEN];
  uint8_t proof[PROTO_MAC_LEN];
  uint32_t features;           /* OUT: the server's PROTO_FEAT_* bits */
} proto_hello_t;

/* Check the server's CHALLENGE push and compute the proof.
 * RET 0; RDZV_EPROTO (not a challenge: not a launch server) or RDZV_EAUTH
 * (the server requires a token and h has none), with a message in err. */
int proto_hello_challenge(proto_hello_t *h, const proto_msg_t *m, char *err,
                          size_t errcap);
/* Pack HELLO's five arguments, after [0, id, HELLO]. */
void proto_hello_pack(const proto_hello_t *h, msgpack_packer *pk);
/* Check HELLO's reply (status 0): with a token, the server must prove it
 * holds it too. RET 0 or RDZV_EAUTH with a message in err. */
int proto_hello_reply(const proto_hello_t *h, const proto_msg_t *m, char *err,
                      size_t errcap);

#endif /* PROTO_H */
