/* etcd_codec.c - the replies of etcd's v3 JSON gateway, decoded strictly
 * (util/json.c reads the JSON; this file what it means). etcd.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "etcd.h"
#include "lu.h"
#include "rdzv.h"

#define ETCD_MAX_REPLY (1u << 20)

static int bad(char *err, size_t n, const char *what) {
  snprintf(err, n, "etcd's reply: %s", what);
  return RDZV_EPROTO;
}

/* The gateway writes int64 as a string ("123"), int32 as a number. OUT
 * *out (0 when absent). RET 0, or -1 when present and not an integer. */
static int get_i64(const lu_jv_t *obj, const char *key, int64_t *out) {
  const lu_jv_t *v = obj ? lu_jv_get(obj, key) : NULL;
  char *end;
  long long x;
  *out = 0;
  if (v == NULL)
    return 0;
  if (v->type == LU_JV_NUM)
    return lu_jv_int(v, INT64_MIN, INT64_MAX, out);
  if (v->type != LU_JV_STR || v->slen == 0 || v->slen > 20)
    return -1;
  errno = 0;
  x = strtoll(v->s, &end, 10);
  if (errno != 0 || *end != '\0' || end == v->s)
    return -1;
  *out = (int64_t)x;
  return 0;
}

static int get_str(const lu_jv_t *obj, const char *key, char *out, size_t cap,
                   int *present) {
  const lu_jv_t *v = obj ? lu_jv_get(obj, key) : NULL;
  if (present)
    *present = v != NULL;
  if (v == NULL) {
    if (cap)
      out[0] = '\0';
    return 0;
  }
  if (v->type != LU_JV_STR || v->slen >= cap)
    return -1;
  memcpy(out, v->s, v->slen + 1);
  return 0;
}

int etcd_b64(const void *p, size_t n, char *out, size_t cap) {
  if (n > (size_t)INT32_MAX / 2 || 4 * ((n + 2) / 3) + 1 > cap)
    return -1;
  return EVP_EncodeBlock((unsigned char *)out, p, (int)n);
}

int etcd_unb64(const char *s, size_t n, char *out, size_t cap) {
  unsigned char *tmp;
  size_t pad = 0;
  int got;
  if (n % 4 != 0 || n / 4 * 3 + 1 > cap + 2 || n > (size_t)INT32_MAX / 2)
    return -1;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
             (c >= '0' && c <= '9') || c == '+' || c == '/';
    if (c == '=' && i >= n - 2) {
      pad++;
      continue;
    }
    if (!ok || pad)
      return -1;
  }
  if (n == 0) {
    if (cap == 0)
      return -1;
    out[0] = '\0';
    return 0;
  }
  tmp = malloc(n / 4 * 3 + 1);
  if (tmp == NULL)
    return -1;
  got = EVP_DecodeBlock(tmp, (const unsigned char *)s, (int)n);
  if (got < 0 || (size_t)got < pad || (size_t)got - pad + 1 > cap) {
    free(tmp);
    return -1;
  }
  got -= (int)pad;
  memcpy(out, tmp, (size_t)got);
  out[got] = '\0';
  free(tmp);
  return got;
}

/* The first key of a range response (obj holds "kvs"). */
static int decode_kvs(const lu_jv_t *obj, etcd_reply_t *r, char *err,
                      size_t n) {
  const lu_jv_t *kvs = lu_jv_get(obj, "kvs"), *kv;
  const lu_jv_t *val;
  int len;
  if (kvs == NULL)
    return 0; /* none: the gateway leaves empty lists out */
  if (kvs->type != LU_JV_ARR)
    return bad(err, n, "\"kvs\" is not a list");
  if ((kv = kvs->first) == NULL)
    return 0;
  if (kv->type != LU_JV_OBJ)
    return bad(err, n, "a key-value is not an object");
  if (get_i64(kv, "create_revision", &r->create_rev) != 0 ||
      get_i64(kv, "mod_revision", &r->mod_rev) != 0 ||
      get_i64(kv, "lease", &r->lease) != 0)
    return bad(err, n, "a revision or lease is not an integer");
  val = lu_jv_get(kv, "value");
  r->found = 1;
  r->value[0] = '\0';
  r->value_len = 0;
  if (val == NULL)
    return 0; /* an empty value is left out */
  if (val->type != LU_JV_STR)
    return bad(err, n, "\"value\" is not a string");
  len = etcd_unb64(val->s, val->slen, r->value, sizeof(r->value));
  if (len < 0)
    return bad(err, n, "\"value\" is not base64 of at most 511 bytes");
  if (memchr(r->value, '\0', (size_t)len) != NULL)
    return bad(err, n, "\"value\" holds a NUL byte");
  r->value_len = (size_t)len;
  return 0;
}

static int decode_root(const lu_jv_t *root, etcd_reply_t *r, char *err,
                       size_t n) {
  const lu_jv_t *res, *hdr, *sv, *resps;
  int has_err = 0;
  if (root->type != LU_JV_OBJ)
    return bad(err, n, "not a JSON object");
  /* {"error": "...", "code": 14, "message": "..."} (a stream's error sits
   * in "error" as an object) */
  sv = lu_jv_get(root, "error");
  if (sv && sv->type == LU_JV_OBJ)
    root = sv;
  if (get_str(root, "message", r->message, sizeof(r->message), &has_err) != 0)
    return bad(err, n, "\"message\" is not a short string");
  if (!has_err && sv && sv->type == LU_JV_STR) {
    lu_strlcpy(r->message, sv->s, sizeof(r->message));
    has_err = 1;
  }
  if (has_err || lu_jv_get(root, "code")) {
    r->error = 1;
    if (get_i64(root, "code", &r->code) != 0)
      return bad(err, n, "\"code\" is not an integer");
    if (r->message[0] == '\0')
      lu_strlcpy(r->message, "an error without a message",
                 sizeof(r->message));
    return 0;
  }
  /* lease keepalive wraps its message in "result" */
  res = lu_jv_get(root, "result");
  if (res) {
    if (res->type != LU_JV_OBJ)
      return bad(err, n, "\"result\" is not an object");
    root = res;
  }
  hdr = lu_jv_get(root, "header");
  if (hdr && hdr->type != LU_JV_OBJ)
    return bad(err, n, "\"header\" is not an object");
  if (get_i64(hdr, "revision", &r->revision) != 0 ||
      get_i64(root, "ID", &r->lease_id) != 0 ||
      get_i64(root, "TTL", &r->ttl) != 0)
    return bad(err, n, "a revision, ID or TTL is not an integer");
  r->has_ttl = lu_jv_get(root, "TTL") != NULL;
  if (get_str(root, "token", r->token, sizeof(r->token), NULL) != 0)
    return bad(err, n, "\"token\" is not a string of at most 511 bytes");
  sv = lu_jv_get(root, "succeeded");
  if (sv) {
    if (sv->type != LU_JV_BOOL)
      return bad(err, n, "\"succeeded\" is not true or false");
    r->succeeded = sv->b;
  }
  if (decode_kvs(root, r, err, n) != 0)
    return RDZV_EPROTO;
  resps = lu_jv_get(root, "responses");
  if (resps == NULL)
    return 0;
  if (resps->type != LU_JV_ARR)
    return bad(err, n, "\"responses\" is not a list");
  for (const lu_jv_t *x = resps->first; x; x = x->next) {
    const lu_jv_t *rr;
    if (x->type != LU_JV_OBJ)
      return bad(err, n, "a txn response is not an object");
    rr = lu_jv_get(x, "response_range");
    if (rr == NULL)
      continue;
    if (rr->type != LU_JV_OBJ)
      return bad(err, n, "\"response_range\" is not an object");
    if (decode_kvs(rr, r, err, n) != 0)
      return RDZV_EPROTO;
  }
  return 0;
}

int etcd_decode(const char *body, size_t len, etcd_reply_t *r, char *err,
                size_t errlen) {
  lu_jdoc_t *doc = NULL;
  const lu_jv_t *root = NULL;
  char jerr[160];
  int rc;
  memset(r, 0, sizeof(*r));
  if (errlen)
    err[0] = '\0';
  if (len > ETCD_MAX_REPLY)
    return bad(err, errlen, "over 1 MiB");
  rc = lu_jv_parse(body, len, 0, &doc, &root, jerr, sizeof(jerr));
  if (rc != 0) {
    snprintf(err, errlen, "etcd's reply is not JSON: %s", jerr);
    lu_jv_free(doc);
    return rc == RDZV_ENOMEM ? RDZV_ENOMEM : RDZV_EPROTO;
  }
  rc = decode_root(root, r, err, errlen);
  lu_jv_free(doc);
  return rc;
}

/* One event of a watch message. */
static int decode_event(const lu_jv_t *ev, etcd_event_t *out, char *err,
                        size_t n) {
  const lu_jv_t *kv, *k, *v, *ty;
  char *key;
  int len;
  memset(out, 0, sizeof(*out));
  if (ev->type != LU_JV_OBJ)
    return bad(err, n, "a watch event is not an object");
  ty = lu_jv_get(ev, "type");
  if (ty != NULL) {
    if (ty->type != LU_JV_STR ||
        (strcmp(ty->s, "DELETE") != 0 && strcmp(ty->s, "PUT") != 0))
      return bad(err, n, "a watch event's \"type\" is not PUT or DELETE");
    out->deleted = !strcmp(ty->s, "DELETE");
  }
  kv = lu_jv_get(ev, "kv");
  if (kv == NULL || kv->type != LU_JV_OBJ)
    return bad(err, n, "a watch event has no \"kv\" object");
  if (get_i64(kv, "create_revision", &out->create_rev) != 0 ||
      get_i64(kv, "mod_revision", &out->mod_rev) != 0)
    return bad(err, n, "a watch event's revision is not an integer");
  k = lu_jv_get(kv, "key");
  if (k == NULL || k->type != LU_JV_STR)
    return bad(err, n, "a watch event has no \"key\" string");
  /* any length (the line's 1 MiB bounds it): one too long to keep is
   * decoded, to check it, and left out */
  if ((key = malloc(k->slen / 4 * 3 + 1)) == NULL)
    return RDZV_ENOMEM;
  len = etcd_unb64(k->s, k->slen, key, k->slen / 4 * 3 + 1);
  if (len <= 0 || memchr(key, '\0', (size_t)len) != NULL) {
    free(key);
    return bad(err, n, "a watch event's \"key\" is not base64 of 1 or "
                       "more bytes without NUL");
  }
  out->key_len = (size_t)len;
  if (out->key_len < sizeof(out->key))
    memcpy(out->key, key, out->key_len + 1);
  free(key);
  v = lu_jv_get(kv, "value");
  if (v == NULL)
    return 0;
  if (v->type != LU_JV_STR)
    return bad(err, n, "a watch event's \"value\" is not a string");
  len = etcd_unb64(v->s, v->slen, out->value, sizeof(out->value));
  if (len < 0 || memchr(out->value, '\0', (size_t)len) != NULL)
    return bad(err, n, "a watch event's \"value\" is not base64 of at most "
                       "511 bytes without NUL");
  return 0;
}

static int decode_watch(const lu_jv_t *root, etcd_watch_msg_t *m, char *err,
                        size_t n) {
  const lu_jv_t *res, *hdr, *sv, *evs;
  int has_msg = 0;
  if (root->type != LU_JV_OBJ)
    return bad(err, n, "a watch message is not a JSON object");
  sv = lu_jv_get(root, "error");
  if (sv != NULL) {
    /* {"error":{"grpc_code":14,"http_code":503,"message":"..."}} */
    m->error = 1;
    if (sv->type == LU_JV_STR) {
      lu_strlcpy(m->message, sv->s, sizeof(m->message));
    } else if (sv->type == LU_JV_OBJ) {
      if (get_str(sv, "message", m->message, sizeof(m->message),
                  &has_msg) != 0)
        return bad(err, n, "\"message\" is not a short string");
      if (get_i64(sv, lu_jv_get(sv, "grpc_code") ? "grpc_code" : "code",
                  &m->code) != 0)
        return bad(err, n, "\"code\" is not an integer");
    } else {
      return bad(err, n, "\"error\" is not an object or a string");
    }
    if (m->message[0] == '\0')
      lu_strlcpy(m->message, "an error without a message",
                 sizeof(m->message));
    return 0;
  }
  res = lu_jv_get(root, "result");
  if (res == NULL || res->type != LU_JV_OBJ)
    return bad(err, n, "a watch message has no \"result\" object");
  hdr = lu_jv_get(res, "header");
  if (hdr && hdr->type != LU_JV_OBJ)
    return bad(err, n, "\"header\" is not an object");
  if (get_i64(hdr, "revision", &m->revision) != 0 ||
      get_i64(res, "compact_revision", &m->compact_rev) != 0)
    return bad(err, n, "a revision is not an integer");
  sv = lu_jv_get(res, "created");
  if (sv) {
    if (sv->type != LU_JV_BOOL)
      return bad(err, n, "\"created\" is not true or false");
    m->created = sv->b;
  }
  sv = lu_jv_get(res, "canceled");
  if (sv) {
    if (sv->type != LU_JV_BOOL)
      return bad(err, n, "\"canceled\" is not true or false");
    m->canceled = sv->b;
  }
  evs = lu_jv_get(res, "events");
  if (evs == NULL)
    return 0;
  if (evs->type != LU_JV_ARR)
    return bad(err, n, "\"events\" is not a list");
  for (const lu_jv_t *x = evs->first; x; x = x->next) {
    if (m->nevents == ETCD_WATCH_MAX_EVENTS) {
      m->more = 1;
      break;
    }
    int rc = decode_event(x, &m->events[m->nevents], err, n);
    if (rc != 0)
      return rc;
    m->nevents++;
  }
  return 0;
}

int etcd_watch_decode(const char *line, size_t len, etcd_watch_msg_t *m,
                      char *err, size_t errlen) {
  lu_jdoc_t *doc = NULL;
  const lu_jv_t *root = NULL;
  char jerr[160];
  int rc;
  memset(m, 0, sizeof(*m));
  if (errlen)
    err[0] = '\0';
  if (len > ETCD_MAX_REPLY)
    return bad(err, errlen, "a watch message over 1 MiB");
  rc = lu_jv_parse(line, len, 0, &doc, &root, jerr, sizeof(jerr));
  if (rc != 0) {
    snprintf(err, errlen, "etcd's watch message is not JSON: %s", jerr);
    lu_jv_free(doc);
    return rc == RDZV_ENOMEM ? RDZV_ENOMEM : RDZV_EPROTO;
  }
  rc = decode_watch(root, m, err, errlen);
  lu_jv_free(doc);
  return rc;
}
