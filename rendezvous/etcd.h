/* etcd.h - a small etcd v3 client over its documented JSON gateway
 * (POST /v3/kv/range, /v3/kv/txn, /v3/lease/grant, /v3/lease/keepalive,
 * /v3/lease/revoke, /v3/auth/authenticate; keys and values base64), for
 * --rdzv-backend etcd (docs/rendezvous.md#etcd-backend).
 *
 * Two halves: the reply decoder (etcd_codec.c: pure, fuzzed by
 * fuzz/fuzz_etcd_reply.c) and the client (etcd.c: libcurl, blocking, one
 * thread per client). The client walks the member list: a member that does
 * not answer, or answers "no leader", passes the request to the next one. */
#ifndef ETCD_H
#define ETCD_H

#include <stddef.h>
#include <stdint.h>

#define ETCD_MAX_VALUE 512

/* What one reply of the gateway says (the fields its request has). */
typedef struct etcd_reply_s {
  int error;            /* the gateway answered an error object */
  int64_t code;         /* its gRPC code (14: unavailable) */
  char message[256];    /* its message */
  int64_t revision;     /* header.revision */
  int succeeded;        /* txn: the compare held */
  int64_t lease_id;     /* lease grant / keepalive: ID */
  int64_t ttl;          /* lease grant / keepalive: TTL (0: lease gone) */
  int has_ttl;
  char token[512];      /* auth/authenticate */
  /* range, or a txn's range response: the first key found */
  int found;
  char value[ETCD_MAX_VALUE]; /* decoded; NUL-terminated */
  size_t value_len;
  int64_t create_rev, mod_rev, lease;
} etcd_reply_t;

/* Decode a reply body (JSON). RET 0 (r filled; r->error when the gateway
 * said no), RDZV_EPROTO with err saying what is wrong. */
int etcd_decode(const char *body, size_t len, etcd_reply_t *r, char *err,
                size_t errlen);

/* One message of a watch stream (POST /v3/watch: one JSON object a line,
 * {"result":{"header":{...},"created":true,"events":[...]}}). Up to
 * ETCD_WATCH_MAX_EVENTS events are kept; more set `more` (the caller then
 * reads what it watches). */
#define ETCD_WATCH_MAX_EVENTS 8
/* Room for a key of an event: every key launch writes fits (etcd_prefix,
 * a job id and a host name of up to 255 bytes each, and a few more). */
#define ETCD_MAX_KEY 1024
typedef struct etcd_event_s {
  int deleted;                /* "type":"DELETE" (a PUT leaves it out) */
  /* decoded; NUL-terminated. A longer key (not launch's) leaves it "":
   * its event is decoded all the same (it was a refused line, which ended
   * the watch for polling), key_len saying how long the key was. */
  char key[ETCD_MAX_KEY];
  size_t key_len;
  char value[ETCD_MAX_VALUE]; /* decoded; "" for a DELETE */
  int64_t create_rev, mod_rev;
} etcd_event_t;

typedef struct etcd_watch_msg_s {
  int error;                  /* an error object: code, message */
  int64_t code;
  char message[256];
  int64_t revision;           /* header.revision */
  int created, canceled;
  int64_t compact_rev;        /* compact_revision: history gone below it */
  size_t nevents;
  int more;                   /* events beyond ETCD_WATCH_MAX_EVENTS */
  etcd_event_t events[ETCD_WATCH_MAX_EVENTS];
} etcd_watch_msg_t;

/* Decode one line of a watch stream. RET 0 (m filled), RDZV_EPROTO (err
 * says why), RDZV_ENOMEM. */
int etcd_watch_decode(const char *line, size_t len, etcd_watch_msg_t *m,
                      char *err, size_t errlen);

/* base64 (RFC 4648, with padding) of n bytes into out (cap bytes). RET the
 * length, or -1 when it does not fit. */
int etcd_b64(const void *p, size_t n, char *out, size_t cap);
/* Decode base64 into out (cap bytes, NUL added). RET the length, or -1 when
 * it is not base64 or does not fit. */
int etcd_unb64(const char *s, size_t n, char *out, size_t cap);

/* ---- the client (etcd.c, built with libcurl) ---------------------------- */

typedef struct etcd_s etcd_t;

typedef struct etcd_config_s {
  const char *endpoints; /* "h1:2379,h2:2379" or URLs, comma-separated */
  int https;             /* https:// for members given without a scheme */
  const char *cacert, *cert, *key; /* PEM files, or NULL */
  const char *user;      /* NAME or NAME:PASSWORD, or NULL */
  const char *password;  /* when user has none, or NULL */
  int64_t timeout_ms;    /* one request to one member (connect + reply) */
} etcd_config_t;

/* RET 0 and *out, RDZV_ENOTSUP (built without libcurl), RDZV_EINVAL (err
 * says which member does not parse), RDZV_ENOMEM. */
int etcd_new(const etcd_config_t *cfg, etcd_t **out, char *err, size_t n);
void etcd_free(etcd_t *e);
/* Whether this build has the client. */
int etcd_supported(void);
/* The last failure, one line ("127.0.0.1:2379: Connection refused; ..."). */
const char *etcd_last_error(const etcd_t *e);
/* The member that answered last (or the first). */
const char *etcd_member(const etcd_t *e);

/* The calls that follow (this client's thread) should be over by end_ms
 * (lu_now_ms(): a lease's end, 0 none): each member asked gets what is
 * left of it shared among the members still to ask (within timeout_ms, at
 * least ETCD_MIN_TRY_MS), so that a member that does not answer (stopped,
 * frozen) leaves time to ask the others before the lease ends. */
#define ETCD_MIN_TRY_MS 250
void etcd_set_budget(etcd_t *e, uint64_t end_ms);

/* Every request of e, the one in flight too, and its watch end by at_ms
 * (lu_now_ms()) at the latest: those cut short, or asked after it, fail
 * with -ECANCELED. 0 lifts it. Any thread (the agent's loop, stopping, cuts
 * its etcd thread's request short). */
void etcd_cut(etcd_t *e, uint64_t at_ms);

/* Each call: RET 0 (r filled and not an error reply), -EHOSTUNREACH (no
 * member answered, or none as etcd's JSON gateway: etcd is unreachable),
 * RDZV_EAUTH (refused: user, password or certificate), RDZV_EPROTO (another
 * error reply: etcd_last_error says which), -ECANCELED (cut short:
 * etcd_cut). */
int etcd_grant(etcd_t *e, int64_t ttl_s, etcd_reply_t *r);
int etcd_keepalive(etcd_t *e, int64_t lease, etcd_reply_t *r);
int etcd_revoke(etcd_t *e, int64_t lease);
int etcd_get(etcd_t *e, const char *key, etcd_reply_t *r);
int etcd_put(etcd_t *e, const char *key, const char *val, int64_t lease);
/* Create key = val under lease unless key exists: r->succeeded when it was
 * created here (r->create_rev then is the new one, from a read after), else
 * r->found/value/create_rev say what holds it. */
int etcd_create(etcd_t *e, const char *key, const char *val, int64_t lease,
                etcd_reply_t *r);
/* Put key = val under lease (0: none) only while guard's create revision
 * is guard_rev (a fenced write: a deposed holder of guard cannot write).
 * r->succeeded says. */
int etcd_put_if(etcd_t *e, const char *guard, int64_t guard_rev,
                const char *key, const char *val, int64_t lease,
                etcd_reply_t *r);

/* Delete key only while its create revision is rev (the holder it had
 * then). r->succeeded says. */
int etcd_delete_if(etcd_t *e, const char *key, int64_t rev, etcd_reply_t *r);

/* Watch the keys from prefix on (up to its end) from revision start_rev,
 * for at most max_ms: each message is given to on(arg, m); on returning
 * nonzero ends the watch. etcd_watch_wake(e) (from any thread) ends the
 * wait of the moment: on(arg, NULL) then says whether to end the watch.
 * RET 0 (ended: by on, wake, or max_ms), -EHOSTUNREACH (no member
 * answered, or the stream broke), RDZV_EAUTH, RDZV_EPROTO (a line that does
 * not decode, or an error message: etcd_last_error says which). */
int etcd_watch(etcd_t *e, const char *prefix, int64_t start_rev,
               int64_t max_ms, int (*on)(void *, const etcd_watch_msg_t *),
               void *arg);
void etcd_watch_wake(etcd_t *e);

#endif
