/* fuzz_frame.c - the native protocol's frame decoder, fed as the server feeds
 * it. The input is the byte stream a client sends after the "RDZV" magic: it
 * is cut into frames (4-byte big-endian length + body) with the server's
 * frame limit, each body is decoded with proto_decode(), and every argument
 * goes through the typed accessors the handlers use.
 *
 * Invariants checked:
 * - a body proto_scan() accepts is one whole msgpack object for msgpack-c
 *   (unpack succeeds and consumes exactly the body) within the object and
 *   depth limits, so proto_decode() never fails on it for size reasons;
 * - a body proto_scan() refuses is refused by proto_decode() the same way;
 * - raising the depth limit never turns an accepted body into a refused one;
 * - every string, binary and ext of a decoded message lies inside its frame;
 * - each accessor succeeds exactly for the msgpack types it documents, and
 *   never gives a NULL pointer for bytes (not even empty ones);
 * - the map accessor (proto_map_get) finds each string key of a map at its
 *   first occurrence;
 * - packing a decoded object and decoding the result gives the same bytes
 *   again (the server's encoder and decoder agree);
 * - proto_decode's one pass over a flat frame and proto_decode_generic
 *   (msgpack-c) give the same result: the same code, the same header, and
 *   arguments of the same types and values;
 * - proto_decode_keylist accepts only frames proto_decode accepts whose
 *   first argument is a list of strings or binaries, with the same header
 *   and other arguments, and proto_next_bytes walks exactly that list's
 *   items, inside the frame;
 * - a message of strings, binaries and integers written again by the
 *   encoder's own writers (proto_enc_begin_msg, proto_enc_str/_bin/_int,
 *   proto_pack_str/_bytes, proto_enc_key_bin/_int) is byte for byte what
 *   msgpack-c's packer writes. */
#include "fuzz.h"
#include "proto.h"

/* The limits srv_new() derives from SRV_CONFIG_INIT. */
static const proto_limits_t srv_lim = {16u << 20, 128u * 1024 * 2 + 64, 4};

typedef struct walk_s {
  const uint8_t *body;
  size_t n;
  uint64_t items;
  uint32_t max_depth;
} walk_t;

static void walk(walk_t *w, const msgpack_object *o, uint32_t depth) {
  w->items++;
  FUZZ_CHECK(depth <= w->max_depth);
  switch (o->type) {
  case MSGPACK_OBJECT_STR:
    FUZZ_CHECK(fuzz_within(o->via.str.ptr, o->via.str.size, w->body, w->n));
    fuzz_touch(o->via.str.ptr, o->via.str.size);
    break;
  case MSGPACK_OBJECT_BIN:
    FUZZ_CHECK(fuzz_within(o->via.bin.ptr, o->via.bin.size, w->body, w->n));
    fuzz_touch(o->via.bin.ptr, o->via.bin.size);
    break;
  case MSGPACK_OBJECT_EXT:
    FUZZ_CHECK(fuzz_within(o->via.ext.ptr, o->via.ext.size, w->body, w->n));
    fuzz_touch(o->via.ext.ptr, o->via.ext.size);
    break;
  case MSGPACK_OBJECT_ARRAY:
    for (uint32_t i = 0; i < o->via.array.size; i++)
      walk(w, &o->via.array.ptr[i], depth + 1);
    break;
  case MSGPACK_OBJECT_MAP:
    for (uint32_t i = 0; i < o->via.map.size; i++) {
      walk(w, &o->via.map.ptr[i].key, depth + 1);
      walk(w, &o->via.map.ptr[i].val, depth + 1);
    }
    break;
  default:
    break;
  }
}

static int is_bytes(const msgpack_object *o) {
  return o->type == MSGPACK_OBJECT_STR || o->type == MSGPACK_OBJECT_BIN;
}

static int is_i64(const msgpack_object *o) {
  return (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
          o->via.u64 <= (uint64_t)INT64_MAX) ||
         o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
}

/* The object accessors on one element (of the args or of a list arg). */
static void check_obj_access(const msgpack_object *o, const uint8_t *body,
                             size_t n) {
  const char *p = NULL;
  size_t len = 0;
  int64_t v = 0;
  int rc = proto_obj_bytes(o, &p, &len);
  FUZZ_CHECK((rc == 0) == is_bytes(o));
  if (rc == 0)
    FUZZ_CHECK(p != NULL && fuzz_within(p, len, body, n));
  rc = proto_obj_i64(o, &v);
  FUZZ_CHECK((rc == 0) == is_i64(o));
  if (rc == 0 && o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
    FUZZ_CHECK(v < 0);
  if (rc == 0 && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
    FUZZ_CHECK(v >= 0);
}

static void check_args(const proto_msg_t *m, const uint8_t *body, size_t n) {
  /* One index past the end too: the accessors must refuse it. */
  for (uint32_t i = 0; i <= m->nargs; i++) {
    const msgpack_object *o = i < m->nargs ? &m->args[i] : NULL;
    const msgpack_object *items = NULL;
    const char *p = NULL;
    size_t len = 0;
    uint32_t cnt = 0;
    int64_t v = 0;
    int nil = -1, rc;

    rc = proto_arg_bytes(m, i, &p, &len);
    FUZZ_CHECK((rc == 0) == (o && is_bytes(o)));
    if (rc == 0) {
      FUZZ_CHECK(p != NULL && fuzz_within(p, len, body, n));
      fuzz_touch(p, len);
    }
    rc = proto_arg_bytes_or_nil(m, i, &p, &len, &nil);
    FUZZ_CHECK((rc == 0) ==
               (o && (is_bytes(o) || o->type == MSGPACK_OBJECT_NIL)));
    if (rc == 0 && nil)
      FUZZ_CHECK(p == NULL && len == 0);
    if (rc == 0 && !nil)
      FUZZ_CHECK(p != NULL && fuzz_within(p, len, body, n));
    rc = proto_arg_i64(m, i, &v);
    FUZZ_CHECK((rc == 0) == (o && is_i64(o)));
    rc = proto_arg_array(m, i, &items, &cnt);
    FUZZ_CHECK((rc == 0) == (o && o->type == MSGPACK_OBJECT_ARRAY));
    if (o)
      check_obj_access(o, body, n);
    for (uint32_t j = 0; rc == 0 && j < cnt; j++)
      check_obj_access(&items[j], body, n);
  }
}

/* The map accessors on every map of the message (JOIN, REPORT and STATUS
 * carry one): each string key of the map finds the value of its first
 * occurrence, an absent key finds nothing, and the typed getters stay in
 * their buffers (the messages themselves: fuzz_msg.c). */
static void check_map(const msgpack_object *m) {
  char key[64];
  if (m->type == MSGPACK_OBJECT_ARRAY) {
    for (uint32_t i = 0; i < m->via.array.size; i++)
      check_map(&m->via.array.ptr[i]);
    return;
  }
  if (m->type != MSGPACK_OBJECT_MAP) {
    FUZZ_CHECK(proto_map_get(m, "x") == NULL);
    return;
  }
  FUZZ_CHECK(proto_map_get(NULL, "x") == NULL);
  for (uint32_t i = 0; i < m->via.map.size; i++) {
    const msgpack_object *k = &m->via.map.ptr[i].key, *v;
    const char *p;
    size_t n;
    check_map(&m->via.map.ptr[i].val);
    if (proto_obj_bytes(k, &p, &n) != 0 || n >= sizeof(key) ||
        memchr(p, '\0', n) != NULL)
      continue;
    memcpy(key, p, n);
    key[n] = '\0';
    v = proto_map_get(m, key);
    FUZZ_CHECK(v != NULL);
    FUZZ_CHECK(v >= &m->via.map.ptr[0].val && v <= &m->via.map.ptr[i].val);
  }
}

/* pack(obj) must decode to an object that packs to the same bytes. */
static void check_repack(const msgpack_object *obj) {
  proto_enc_t a, b;
  msgpack_zone z;
  msgpack_object o2;
  size_t off = 0;
  proto_enc_init(&a);
  proto_enc_init(&b);
  FUZZ_CHECK(msgpack_pack_object(&a.pk, *obj) == 0 && !a.oom);
  FUZZ_CHECK(msgpack_zone_init(&z, 2048));
  FUZZ_CHECK(msgpack_unpack(a.data, a.len, &off, &z, &o2) ==
             MSGPACK_UNPACK_SUCCESS);
  FUZZ_CHECK(off == a.len);
  FUZZ_CHECK(msgpack_pack_object(&b.pk, o2) == 0 && !b.oom);
  FUZZ_CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
  msgpack_zone_destroy(&z);
  proto_enc_destroy(&a);
  proto_enc_destroy(&b);
}

/* Two decoded objects are the same: type and value, floats bit for bit
 * (NaN included), an empty string or binary pointing anywhere. */
static int same_obj(const msgpack_object *a, const msgpack_object *b) {
  if (a->type != b->type)
    return 0;
  switch (a->type) {
  case MSGPACK_OBJECT_STR:
  case MSGPACK_OBJECT_BIN:
    return a->via.str.size == b->via.str.size &&
           (a->via.str.size == 0 ||
            memcmp(a->via.str.ptr, b->via.str.ptr, a->via.str.size) == 0);
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64:
    return memcmp(&a->via.f64, &b->via.f64, sizeof(double)) == 0;
  case MSGPACK_OBJECT_EXT:
    return a->via.ext.type == b->via.ext.type &&
           a->via.ext.size == b->via.ext.size &&
           (a->via.ext.size == 0 ||
            memcmp(a->via.ext.ptr, b->via.ext.ptr, a->via.ext.size) == 0);
  case MSGPACK_OBJECT_ARRAY:
    if (a->via.array.size != b->via.array.size)
      return 0;
    for (uint32_t i = 0; i < a->via.array.size; i++)
      if (!same_obj(&a->via.array.ptr[i], &b->via.array.ptr[i]))
        return 0;
    return 1;
  case MSGPACK_OBJECT_MAP:
    if (a->via.map.size != b->via.map.size)
      return 0;
    for (uint32_t i = 0; i < a->via.map.size; i++)
      if (!same_obj(&a->via.map.ptr[i].key, &b->via.map.ptr[i].key) ||
          !same_obj(&a->via.map.ptr[i].val, &b->via.map.ptr[i].val))
        return 0;
    return 1;
  case MSGPACK_OBJECT_BOOLEAN:
    return a->via.boolean == b->via.boolean;
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
    return a->via.u64 == b->via.u64;
  case MSGPACK_OBJECT_NEGATIVE_INTEGER:
    return a->via.i64 == b->via.i64;
  default: /* nil */
    return 1;
  }
}

static void same_as_generic(const uint8_t *body, size_t n, int rc,
                            const proto_msg_t *m) {
  proto_msg_t g;
  int grc = proto_decode_generic(body, n, &srv_lim, &g);
  FUZZ_CHECK(grc == rc);
  if (rc != 0)
    return;
  FUZZ_CHECK(g.kind == m->kind && g.id == m->id && g.op == m->op);
  FUZZ_CHECK(g.nargs == m->nargs);
  for (uint32_t i = 0; i < m->nargs; i++)
    FUZZ_CHECK(same_obj(&g.args[i], &m->args[i]));
  proto_msg_free(&g);
}

/* proto_keylist_step fed the frame a third at a time (as the server does
 * while it comes): the same answer and keys as proto_decode_keylist. */
static void same_in_steps(const uint8_t *body, size_t n, int krc,
                          const proto_msg_t *k) {
  proto_keylist_t kl = {0};
  proto_msg_t s;
  const uint8_t *pos = k->keys;
  size_t avail = n / 3, ko, kn;
  uint32_t got = 0;
  int r;
  for (;;) {
    r = proto_keylist_step(&kl, body, avail, n, &srv_lim, &s, &ko, &kn);
    if (r == PROTO_KL_MORE) {
      FUZZ_CHECK(avail < n);
      avail = avail + n / 3 + 1 < n ? avail + n / 3 + 1 : n;
      continue;
    }
    if (r != PROTO_KL_KEY)
      break;
    FUZZ_CHECK(ko <= n && kn <= n - ko && ko + kn <= avail);
    if (krc == 0) {
      const char *p;
      size_t len;
      FUZZ_CHECK(got < k->nkeys);
      proto_next_bytes(&pos, &p, &len);
      FUZZ_CHECK((const uint8_t *)p == body + ko && len == kn);
    }
    got++;
  }
  FUZZ_CHECK((r == PROTO_KL_DONE) == (krc == 0));
  if (krc == 0)
    FUZZ_CHECK(got == k->nkeys && s.kind == k->kind && s.id == k->id &&
               s.op == k->op && s.nargs == k->nargs && s.keys == k->keys);
}

static void same_as_keylist(const uint8_t *body, size_t n, int rc,
                            const proto_msg_t *m) {
  proto_msg_t k;
  const msgpack_object *items;
  const uint8_t *pos;
  uint32_t cnt;
  int krc = proto_decode_keylist(body, n, &srv_lim, &k);
  same_in_steps(body, n, krc, &k);
  if (krc != 0)
    return;
  FUZZ_CHECK(rc == 0);
  FUZZ_CHECK(k.kind == m->kind && k.id == m->id && k.op == m->op);
  FUZZ_CHECK(k.nargs == m->nargs && k.nargs >= 1);
  FUZZ_CHECK(proto_arg_array(m, 0, &items, &cnt) == 0 && cnt == k.nkeys);
  FUZZ_CHECK(proto_arg_array(&k, 0, &items, &cnt) == 0 && cnt == 0);
  for (uint32_t i = 1; i < m->nargs; i++)
    FUZZ_CHECK(same_obj(&k.args[i], &m->args[i]));
  proto_arg_array(m, 0, &items, &cnt);
  pos = k.keys;
  for (uint32_t j = 0; j < cnt; j++) {
    const char *p = NULL, *q = NULL;
    size_t len = 0, qlen = 0;
    FUZZ_CHECK(proto_obj_bytes(&items[j], &q, &qlen) == 0);
    proto_next_bytes(&pos, &p, &len);
    FUZZ_CHECK(p != NULL && fuzz_within(p, len, body, n));
    FUZZ_CHECK(len == qlen && memcmp(p, q, len) == 0);
  }
  FUZZ_CHECK(pos <= body + n);
  proto_msg_free(&k);
}

/* The encoder's own writers (proto_enc_begin_msg, proto_enc_str/_bin/_int,
 * proto_pack_str/_bytes, proto_enc_key_bin/_int) write a decoded message
 * of strings, binaries and integers again as msgpack-c's packer does. */
static void check_encoders(const proto_msg_t *m) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  proto_enc_t e, k;
  uint32_t i;
  for (i = 0; i < m->nargs; i++) {
    msgpack_object_type t = m->args[i].type;
    if (t != MSGPACK_OBJECT_STR && t != MSGPACK_OBJECT_BIN &&
        t != MSGPACK_OBJECT_NEGATIVE_INTEGER &&
        !(t == MSGPACK_OBJECT_POSITIVE_INTEGER &&
          m->args[i].via.u64 <= (uint64_t)INT64_MAX))
      return;
  }
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  proto_enc_init(&e);
  proto_enc_init(&k);
  msgpack_pack_array(&pk, 3 + m->nargs);
  msgpack_pack_uint64(&pk, (uint64_t)m->kind);
  msgpack_pack_uint64(&pk, m->id);
  msgpack_pack_int64(&pk, m->op);
  proto_enc_begin_msg(&e, m->nargs, m->kind, m->id, m->op);
  for (i = 0; i < m->nargs; i++) {
    const msgpack_object *o = &m->args[i];
    const char *p = NULL;
    size_t n = 0;
    int64_t v = 0;
    if (proto_obj_bytes(o, &p, &n) == 0) {
      if (o->type == MSGPACK_OBJECT_STR) {
        char *z = malloc(n + 1);
        FUZZ_CHECK(z != NULL);
        memcpy(z, p, n);
        z[n] = '\0';
        msgpack_pack_str(&pk, n);
        msgpack_pack_str_body(&pk, p, n);
        /* proto_pack_str stops at a NUL: only a string without one. */
        if (memchr(p, '\0', n) == NULL && i % 2 == 0)
          proto_pack_str(&e.pk, z);
        else
          proto_enc_str(&e, p, n);
        free(z);
      } else {
        msgpack_pack_bin(&pk, n);
        msgpack_pack_bin_body(&pk, p, n);
        if (i % 2 == 0)
          proto_pack_bytes(&e.pk, p, n);
        else
          proto_enc_bin(&e, p, n);
      }
    } else {
      FUZZ_CHECK(proto_obj_i64(o, &v) == 0);
      msgpack_pack_int64(&pk, v);
      proto_enc_int(&e, v);
    }
  }
  FUZZ_CHECK(proto_enc_end(&e) == 0);
  FUZZ_CHECK(e.len == PROTO_HDR + sb.size);
  FUZZ_CHECK(proto_get_len((const uint8_t *)e.data) == sb.size);
  FUZZ_CHECK(memcmp(e.data + PROTO_HDR, sb.data, sb.size) == 0);
  if (m->nargs == 2 && m->args[0].type == MSGPACK_OBJECT_STR) {
    const char *kp, *vp;
    size_t kn, vn;
    int64_t v;
    FUZZ_CHECK(proto_obj_bytes(&m->args[0], &kp, &kn) == 0);
    if (m->args[1].type == MSGPACK_OBJECT_BIN) {
      FUZZ_CHECK(proto_obj_bytes(&m->args[1], &vp, &vn) == 0);
      FUZZ_CHECK(proto_enc_key_bin(&k, m->kind, m->id, m->op, kp, kn, vp,
                                   vn) == 0);
    } else if (proto_obj_i64(&m->args[1], &v) == 0) {
      FUZZ_CHECK(proto_enc_key_int(&k, m->kind, m->id, m->op, kp, kn, v) ==
                 0);
    }
    if (k.len > 0)
      FUZZ_CHECK(k.len == e.len && memcmp(k.data, e.data, e.len) == 0);
  }
  proto_enc_destroy(&e);
  proto_enc_destroy(&k);
  msgpack_sbuffer_destroy(&sb);
}

static void one_frame(const uint8_t *body, size_t n) {
  proto_msg_t m;
  int scan = proto_scan(body, n, &srv_lim);
  int rc;

  for (uint32_t d = 0; d < srv_lim.max_depth; d++) {
    proto_limits_t l = srv_lim;
    l.max_depth = d;
    if (proto_scan(body, n, &l) == 0)
      FUZZ_CHECK(scan == 0);
  }
  if (scan == 0) {
    /* msgpack-c must agree that this is exactly one object. */
    msgpack_zone z;
    msgpack_object obj;
    size_t off = 0;
    walk_t w = {body, n, 0, srv_lim.max_depth};
    FUZZ_CHECK(msgpack_zone_init(&z, 2048));
    FUZZ_CHECK(msgpack_unpack((const char *)body, n, &off, &z, &obj) ==
               MSGPACK_UNPACK_SUCCESS);
    FUZZ_CHECK(off == n);
    walk(&w, &obj, 0);
    FUZZ_CHECK(w.items <= srv_lim.max_items);
    check_repack(&obj);
    msgpack_zone_destroy(&z);
  }
  rc = proto_decode(body, n, &srv_lim, &m);
  same_as_generic(body, n, rc, &m);
  same_as_keylist(body, n, rc, &m);
  if (scan != 0) {
    FUZZ_CHECK(rc == scan);
    FUZZ_CHECK(!m.zone_live);
    return;
  }
  FUZZ_CHECK(rc == 0 || rc == RDZV_EPROTO);
  if (rc != 0) {
    FUZZ_CHECK(!m.zone_live);
    return;
  }
  FUZZ_CHECK(m.kind >= PROTO_REQUEST && m.kind <= PROTO_PUSH);
  FUZZ_CHECK(m.nargs == 0 || m.args != NULL);
  proto_op_name((int)m.op);
  proto_ev_name((int)m.op);
  check_args(&m, body, n);
  check_encoders(&m);
  for (uint32_t i = 0; i < m.nargs; i++)
    check_map(&m.args[i]);
  proto_msg_free(&m);
  proto_msg_free(&m); /* a second free is a no-op */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t off = 0;
  while (size - off >= PROTO_HDR) {
    uint32_t len = proto_get_len(data + off);
    uint8_t hdr[PROTO_HDR];
    uint8_t *body;
    proto_put_len(hdr, len);
    FUZZ_CHECK(memcmp(hdr, data + off, PROTO_HDR) == 0);
    /* The server closes the connection on an oversized length and waits
     * for the rest of a partial frame. */
    if (len > srv_lim.max_frame || size - off - PROTO_HDR < len)
      break;
    body = fuzz_dup(data + off + PROTO_HDR, len);
    one_frame(body, len);
    free(body);
    off += PROTO_HDR + (size_t)len;
  }
  return 0;
}
