/* proto.c - framing, msgpack structure scan, decode/encode, HMAC. */
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>


#include "lu.h"
#include "proto.h"

const char *proto_op_name(int op) {
  switch (op) {
#define XX(name, val, str)                                                     \
  case val:                                                                    \
    return str;
    PROTO_OP_MAP(XX)
#undef XX
  default:
    return "unknown";
  }
}

const char *proto_ev_name(int ev) {
  switch (ev) {
#define XX(name, val, str)                                                     \
  case val:                                                                    \
    return str;
    PROTO_EV_MAP(XX)
#undef XX
  default:
    return "unknown";
  }
}

uint32_t proto_get_len(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
         ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

void proto_put_len(uint8_t *p, uint32_t n) {
  p[0] = (uint8_t)(n >> 24);
  p[1] = (uint8_t)(n >> 16);
  p[2] = (uint8_t)(n >> 8);
  p[3] = (uint8_t)n;
}

static uint64_t be(const uint8_t *p, int n) {
  uint64_t v = 0;
  switch (n) { /* the widths msgpack has, without a loop */
  case 1: return p[0];
  case 2: return ((uint64_t)p[0] << 8) | p[1];
  case 4: return proto_get_len(p);
  case 8: return ((uint64_t)proto_get_len(p) << 32) | proto_get_len(p + 4);
  default: break;
  }
  for (int i = 0; i < n; i++)
    v = (v << 8) | p[i];
  return v;
}

/* Walk the msgpack encoding without building anything. `pending` counts the
 * objects still to read at each nesting level; a container's declared size
 * can never exceed the bytes left (every object takes at least one byte),
 * which rejects length bombs before any allocation. */
int proto_scan(const uint8_t *buf, size_t n, const proto_limits_t *lim) {
  uint64_t pending[16];
  uint32_t depth = 0;
  uint64_t items = 0;
  size_t pos = 0;
  uint32_t max_depth = lim->max_depth < 15 ? lim->max_depth : 15;

  if (n > lim->max_frame)
    return RDZV_ETOOBIG;
  pending[0] = 1;
  while (depth > 0 || pending[0] > 0) {
    uint8_t b;
    uint64_t skip = 0, children = 0;
    int hdr = 1;

    if (pending[depth] == 0) {
      depth--;
      continue;
    }
    if (pos >= n)
      return RDZV_EPROTO;
    pending[depth]--;
    if (++items > lim->max_items)
      return RDZV_ETOOBIG;
    b = buf[pos];
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
      /* fixint, nil, bool */
    } else if (b >= 0x80 && b <= 0x8f) {
      children = 2u * (b & 0x0f);
    } else if (b >= 0x90 && b <= 0x9f) {
      children = b & 0x0f;
    } else if (b >= 0xa0 && b <= 0xbf) {
      skip = b & 0x1f;
    } else {
      static const uint8_t fixed[] = {
          /* c4 */ 0, 0, 0, 0, 0, 0, /* ca */ 4, 8, /* cc */ 1, 2, 4, 8,
          /* d0 */ 1, 2, 4, 8, /* d4 */ 2, 3, 5, 9, 17};
      int lenbytes = 0;
      switch (b) {
      case 0xc1:
        return RDZV_EPROTO;
      case 0xc4: case 0xd9: lenbytes = 1; break;
      case 0xc5: case 0xda: lenbytes = 2; break;
      case 0xc6: case 0xdb: lenbytes = 4; break;
      case 0xc7: lenbytes = 1; skip = 1; break; /* ext: +1 type byte */
      case 0xc8: lenbytes = 2; skip = 1; break;
      case 0xc9: lenbytes = 4; skip = 1; break;
      case 0xdc: case 0xdd: case 0xde: case 0xdf: {
        int w = (b == 0xdc || b == 0xde) ? 2 : 4;
        if (n - pos - 1 < (size_t)w)
          return RDZV_EPROTO;
        children = be(buf + pos + 1, w);
        if (b >= 0xde)
          children *= 2;
        hdr += w;
        break;
      }
      default:
        skip = fixed[b - 0xc4];
        break;
      }
      if (lenbytes) {
        if (n - pos - 1 < (size_t)lenbytes)
          return RDZV_EPROTO;
        skip += be(buf + pos + 1, lenbytes);
        hdr += lenbytes;
      }
    }
    if ((uint64_t)(n - pos) < (uint64_t)hdr + skip)
      return RDZV_EPROTO;
    pos += (size_t)hdr + (size_t)skip;
    if (children > 0) {
      if (children > n - pos)
        return RDZV_EPROTO;
      if (depth + 1 > max_depth)
        return RDZV_ETOOBIG;
      pending[++depth] = children;
    }
  }
  return pos == n ? 0 : RDZV_EPROTO;
}

/* The header every message has: [kind, id, op, args...]. */
static int decode_header(const msgpack_object *a, uint32_t size,
                         proto_msg_t *msg) {
  if (size < 3 || a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
      a[0].via.u64 > 2 || a[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    return RDZV_EPROTO;
  msg->kind = (int)a[0].via.u64;
  msg->id = a[1].via.u64;
  if (proto_obj_i64(&a[2], &msg->op) != 0)
    return RDZV_EPROTO;
  msg->args = a + 3;
  msg->nargs = size - 3;
  return 0;
}

/* One scalar at b[*pos..n), as msgpack-c's unpack makes it. RET 1 read,
 * 0 not one this pass reads (a container, an ext, a malformed or cut
 * object: the generic path decides). */
static int flat_obj(const uint8_t *b, size_t n, size_t *pos,
                    msgpack_object *o) {
  size_t p = *pos, len = 0, hdr = 1;
  uint8_t t;
  int str = 0;
  if (p >= n)
    return 0;
  t = b[p];
  if (t <= 0x7f) {
    o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
    o->via.u64 = t;
  } else if (t >= 0xe0) {
    o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
    o->via.i64 = (int8_t)t;
  } else if (t >= 0xa0 && t <= 0xbf) {
    str = 1;
    len = t & 0x1f;
  } else {
    static const uint8_t width[] = {/* cc */ 1, 2, 4, 8, /* d0 */ 1, 2, 4, 8};
    uint64_t v;
    switch (t) {
    case 0xc0: o->type = MSGPACK_OBJECT_NIL; break;
    case 0xc2: case 0xc3:
      o->type = MSGPACK_OBJECT_BOOLEAN;
      o->via.boolean = t == 0xc3;
      break;
    case 0xc4: case 0xc5: case 0xc6:
    case 0xd9: case 0xda: case 0xdb: {
      int w = (t == 0xc4 || t == 0xd9) ? 1 : (t == 0xc5 || t == 0xda) ? 2 : 4;
      if (n - p - 1 < (size_t)w)
        return 0;
      str = t >= 0xd9 ? 1 : 2;
      len = (size_t)be(b + p + 1, w);
      hdr += (size_t)w;
      break;
    }
    case 0xca: case 0xcb: {
      int w = t == 0xca ? 4 : 8;
      if (n - p - 1 < (size_t)w)
        return 0;
      v = be(b + p + 1, w);
      if (w == 4) {
        uint32_t u = (uint32_t)v;
        float f;
        memcpy(&f, &u, 4);
        o->type = MSGPACK_OBJECT_FLOAT32;
        o->via.f64 = f;
      } else {
        memcpy(&o->via.f64, &v, 8);
        o->type = MSGPACK_OBJECT_FLOAT64;
      }
      hdr += (size_t)w;
      break;
    }
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
      int w = width[t - 0xcc];
      if (n - p - 1 < (size_t)w)
        return 0;
      v = be(b + p + 1, w);
      hdr += (size_t)w;
      if (t >= 0xd0) { /* signed: sign-extend; msgpack-c calls >= 0 positive */
        int64_t s = w == 8 ? (int64_t)v
                           : (int64_t)(v << (64 - 8 * w)) >> (64 - 8 * w);
        if (s < 0) {
          o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
          o->via.i64 = s;
          break;
        }
        v = (uint64_t)s;
      }
      o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
      o->via.u64 = v;
      break;
    }
    default:
      return 0;
    }
  }
  if (n - p - hdr < len)
    return 0;
  if (str) {
    /* An empty one gets NULL, as from msgpack-c (proto_obj_bytes gives ""). */
    const char *ptr = len ? (const char *)b + p + hdr : NULL;
    if (str == 2) {
      o->type = MSGPACK_OBJECT_BIN;
      o->via.bin.ptr = ptr;
      o->via.bin.size = (uint32_t)len;
    } else {
      o->type = MSGPACK_OBJECT_STR;
      o->via.str.ptr = ptr;
      o->via.str.size = (uint32_t)len;
    }
  }
  *pos = p + hdr + len;
  return 1;
}

/* An array's header at b[*pos..n): a fixarray, array 16, or (wide) array
 * 32. RET 1 with *cnt and *pos past it, 0 not one. */
static int array_head(const uint8_t *b, size_t n, size_t *pos, int wide,
                      uint32_t *cnt) {
  size_t p = *pos;
  int w;
  if (p >= n)
    return 0;
  if (b[p] >= 0x90 && b[p] <= 0x9f) {
    *cnt = b[p] & 0x0f;
    *pos = p + 1;
    return 1;
  }
  w = b[p] == 0xdc ? 2 : (b[p] == 0xdd && wide) ? 4 : 0;
  if (w == 0 || n - p - 1 < (size_t)w)
    return 0;
  *cnt = (uint32_t)be(b + p + 1, w);
  *pos = p + 1 + (size_t)w;
  return 1;
}

/* The header of a message, [kind, id, op], when each is in the forms every
 * encoder of ours writes: kind and op a fixint, id a fixint or uint 8-64.
 * RET 1 read into msg (and flat[0..2], as flat_obj makes them), 0 for
 * flat_obj's way. */
static int flat_header(const uint8_t *b, size_t n, size_t *pos,
                       proto_msg_t *msg) {
  size_t p = *pos;
  uint64_t id;
  uint8_t t;
  if (n - p < 3 || b[p] > 2)
    return 0;
  t = b[p + 1];
  if (t <= 0x7f) {
    id = t;
    p += 2;
  } else if (t >= 0xcc && t <= 0xcf) {
    int w = 1 << (t - 0xcc);
    if (n - p - 2 < (size_t)w + 1)
      return 0;
    id = be(b + p + 2, w);
    p += 2 + (size_t)w;
  } else {
    return 0;
  }
  t = b[p];
  if (t > 0x7f && t < 0xe0)
    return 0;
  msg->kind = b[*pos];
  msg->id = id;
  msg->op = t <= 0x7f ? (int64_t)t : (int64_t)(int8_t)t;
  msg->flat[0].type = MSGPACK_OBJECT_POSITIVE_INTEGER;
  msg->flat[0].via.u64 = (uint64_t)msg->kind;
  msg->flat[1].type = MSGPACK_OBJECT_POSITIVE_INTEGER;
  msg->flat[1].via.u64 = id;
  msg->flat[2].type = t <= 0x7f ? MSGPACK_OBJECT_POSITIVE_INTEGER
                                : MSGPACK_OBJECT_NEGATIVE_INTEGER;
  msg->flat[2].via.i64 = msg->op;
  *pos = p + 1;
  return 1;
}

/* A flat frame in one pass, no allocation. RET 1 decoded (the header
 * checked too), 0 for the generic path (not flat, or anything it must
 * judge). */
static int decode_flat(const uint8_t *buf, size_t n, const proto_limits_t *lim,
                       proto_msg_t *msg) {
  size_t pos = 1;
  uint32_t cnt, i = 0;
  if (n == 0 || n > lim->max_frame || lim->max_depth < 1)
    return 0;
  if (buf[0] >= 0x90 && buf[0] <= 0x9f) {
    cnt = buf[0] & 0x0f;
  } else if (buf[0] == 0xdc && n >= 3) {
    cnt = (uint32_t)be(buf + 1, 2);
    pos = 3;
  } else {
    return 0;
  }
  if (cnt < 3 || cnt > PROTO_FLAT_MAX || (uint64_t)cnt + 1 > lim->max_items)
    return 0;
  if (flat_header(buf, n, &pos, msg)) {
    i = 3;
    msg->args = msg->flat + 3;
    msg->nargs = cnt - 3;
  }
  for (; i < cnt; i++)
    if (!flat_obj(buf, n, &pos, &msg->flat[i]))
      return 0;
  if (pos != n)
    return 0;
  return msg->args != NULL || decode_header(msg->flat, cnt, msg) == 0;
}

int proto_decode(const uint8_t *buf, size_t n, const proto_limits_t *lim,
                 proto_msg_t *msg) {
  /* No memset of the whole (the zone is only looked at when live). */
  msg->args = NULL;
  msg->nargs = 0;
  msg->keys = NULL; /* the key list of proto_decode_keylist only */
  msg->nkeys = 0;
  msg->zone_live = 0;
  if (!decode_flat(buf, n, lim, msg))
    return proto_decode_generic(buf, n, lim, msg);
  return 0;
}

#define KEYLIST_HEAD_MAX (3 + 3 * 9 + 5)

/* [kind, id, op, [keys...]: the frame's elements and the keys' count;
 * *pos at the first key. RET 1, or 0 (cut short or not such a frame). */
static int keylist_head(const uint8_t *buf, size_t avail, size_t *pos,
                        proto_msg_t *msg, uint32_t *cnt, uint32_t *nk) {
  if (!array_head(buf, avail, pos, 0, cnt))
    return 0;
  for (uint32_t i = 0; i < 3; i++)
    if (!flat_obj(buf, avail, pos, &msg->flat[i]))
      return 0;
  return array_head(buf, avail, pos, 1, nk);
}

int proto_keylist_step(proto_keylist_t *kl, const uint8_t *buf, size_t avail,
                       size_t n, const proto_limits_t *lim, proto_msg_t *msg,
                       size_t *koff, size_t *klen) {
  /* What fails before the frame's end may only be cut short. */
  int cut = avail < n ? PROTO_KL_MORE : RDZV_EPROTO;
  size_t pos = kl->pos;
  if (kl->stage == 0) {
    memset(msg, 0, offsetof(proto_msg_t, flat));
    if (n == 0 || n > lim->max_frame || lim->max_depth < 2)
      return RDZV_EPROTO;
    /* A head that could be one (three integers, two array headers) fits
     * in KEYLIST_HEAD_MAX bytes: past that, not such a frame (a large SET
     * is told at once, not when it is whole). */
    if (!keylist_head(buf, avail, &pos, msg, &kl->cnt, &kl->nk))
      return avail < KEYLIST_HEAD_MAX ? cut : RDZV_EPROTO;
    /* The items proto_scan counts: the frame, its elements, the keys. */
    if (kl->cnt < 4 || kl->cnt > PROTO_FLAT_MAX ||
        1 + (uint64_t)kl->cnt + kl->nk > lim->max_items)
      return RDZV_EPROTO;
    kl->list = kl->pos = pos;
    kl->k = 0;
    kl->stage = 1;
  }
  if (kl->stage == 1 && kl->k < kl->nk) {
    msgpack_object o;
    const uint8_t *q = buf + pos;
    const char *p;
    if (!flat_obj(buf, avail, &pos, &o))
      return cut;
    if (o.type != MSGPACK_OBJECT_STR && o.type != MSGPACK_OBJECT_BIN)
      return RDZV_EPROTO;
    proto_next_bytes(&q, &p, klen);
    *koff = (size_t)((const uint8_t *)p - buf);
    kl->pos = pos;
    kl->k++;
    return PROTO_KL_KEY;
  }
  /* The other elements, once the frame is whole (the header again: the
   * buffer may have moved since). */
  kl->stage = 2;
  if (avail < n)
    return PROTO_KL_MORE;
  pos = 0;
  if (!keylist_head(buf, n, &pos, msg, &kl->cnt, &kl->nk))
    return RDZV_EPROTO;
  msg->flat[3].type = MSGPACK_OBJECT_ARRAY;
  msg->flat[3].via.array.size = 0;
  msg->flat[3].via.array.ptr = NULL;
  pos = kl->pos;
  for (uint32_t i = 4; i < kl->cnt; i++)
    if (!flat_obj(buf, n, &pos, &msg->flat[i]))
      return RDZV_EPROTO;
  if (pos != n || decode_header(msg->flat, kl->cnt, msg) != 0)
    return RDZV_EPROTO;
  msg->keys = buf + kl->list;
  msg->nkeys = kl->nk;
  return PROTO_KL_DONE;
}

int proto_decode_keylist(const uint8_t *buf, size_t n,
                         const proto_limits_t *lim, proto_msg_t *msg) {
  proto_keylist_t kl = {0};
  size_t ko, kn;
  int r;
  while ((r = proto_keylist_step(&kl, buf, n, n, lim, msg, &ko, &kn)) ==
         PROTO_KL_KEY)
    ;
  return r == PROTO_KL_DONE ? 0 : RDZV_EPROTO;
}

/* A msgpack integer at buf[*pos..n): *v, *neg (a negative one; *v is then
 * its two's complement). RET 0, PROTO_KL_MORE, RDZV_EPROTO. */
static int peek_int(const uint8_t *buf, size_t n, size_t *pos, uint64_t *v,
                    int *neg) {
  uint8_t b;
  int w;
  if (*pos >= n)
    return PROTO_KL_MORE;
  b = buf[(*pos)++];
  *neg = 0;
  if (b <= 0x7f) {
    *v = b;
    return 0;
  }
  if (b >= 0xe0) {
    *v = (uint64_t)(int64_t)(int8_t)b;
    *neg = 1;
    return 0;
  }
  if (b >= 0xcc && b <= 0xcf)
    w = 1 << (b - 0xcc);
  else if (b >= 0xd0 && b <= 0xd3)
    w = 1 << (b - 0xd0);
  else
    return RDZV_EPROTO;
  if (n - *pos < (size_t)w)
    return PROTO_KL_MORE;
  *v = be(buf + *pos, w);
  *pos += (size_t)w;
  if (b >= 0xd0 && w < 8 && (*v >> (8 * w - 1)) != 0) { /* sign-extend */
    *v |= ~(uint64_t)0 << (8 * w);
    *neg = 1;
  } else if (b >= 0xd0 && w == 8) {
    *neg = (int64_t)*v < 0;
  }
  return 0;
}

int proto_peek_request(const uint8_t *buf, size_t n, uint64_t *id,
                       int64_t *op) {
  size_t pos = 1;
  uint64_t cnt, kind, v;
  int neg, rc;
  if (n == 0)
    return PROTO_KL_MORE;
  if (buf[0] >= 0x90 && buf[0] <= 0x9f) {
    cnt = buf[0] & 0x0f;
  } else if (buf[0] == 0xdc || buf[0] == 0xdd) {
    int w = buf[0] == 0xdc ? 2 : 4;
    if (n - pos < (size_t)w)
      return PROTO_KL_MORE;
    cnt = be(buf + pos, w);
    pos += (size_t)w;
  } else {
    return RDZV_EPROTO;
  }
  if (cnt < 3)
    return RDZV_EPROTO;
  if ((rc = peek_int(buf, n, &pos, &kind, &neg)) != 0)
    return rc;
  if (neg || kind != PROTO_REQUEST)
    return RDZV_EPROTO;
  if ((rc = peek_int(buf, n, &pos, id, &neg)) != 0)
    return rc;
  if (neg)
    return RDZV_EPROTO;
  if ((rc = peek_int(buf, n, &pos, &v, &neg)) != 0)
    return rc;
  if (!neg && v > INT64_MAX)
    return RDZV_EPROTO;
  *op = (int64_t)v;
  return 0;
}

void proto_next_bytes(const uint8_t **pos, const char **p, size_t *n) {
  const uint8_t *b = *pos;
  size_t hdr = 1, len;
  if ((b[0] & 0xe0) == 0xa0) {
    len = b[0] & 0x1f;
  } else {
    int w = (b[0] == 0xc4 || b[0] == 0xd9) ? 1
            : (b[0] == 0xc5 || b[0] == 0xda) ? 2 : 4;
    len = (size_t)be(b + 1, w);
    hdr += (size_t)w;
  }
  *p = (const char *)b + hdr;
  *n = len;
  *pos = b + hdr + len;
}

int proto_decode_generic(const uint8_t *buf, size_t n,
                         const proto_limits_t *lim, proto_msg_t *msg) {
  msgpack_object obj;
  size_t off = 0;
  int rc;

  memset(msg, 0, offsetof(proto_msg_t, flat));
  rc = proto_scan(buf, n, lim);
  if (rc != 0)
    return rc;
  if (!msgpack_zone_init(&msg->zone, 2048))
    return RDZV_ENOMEM;
  msg->zone_live = 1;
  switch (msgpack_unpack((const char *)buf, n, &off, &msg->zone, &obj)) {
  case MSGPACK_UNPACK_SUCCESS:
    break;
  case MSGPACK_UNPACK_NOMEM_ERROR:
    proto_msg_free(msg);
    return RDZV_ENOMEM;
  default:
    proto_msg_free(msg);
    return RDZV_EPROTO;
  }
  if (obj.type != MSGPACK_OBJECT_ARRAY ||
      decode_header(obj.via.array.ptr, obj.via.array.size, msg) != 0) {
    proto_msg_free(msg);
    return RDZV_EPROTO;
  }
  return 0;
}

void proto_msg_free(proto_msg_t *msg) {
  if (msg->zone_live)
    msgpack_zone_destroy(&msg->zone);
  msg->zone_live = 0;
}

int proto_obj_bytes(const msgpack_object *o, const char **p, size_t *n) {
  /* msgpack-c leaves ptr NULL for an empty str or bin; hand out "" so that
   * no handler passes NULL to memcpy/memcmp, even for 0 bytes. */
  if (o->type == MSGPACK_OBJECT_BIN) {
    *p = o->via.bin.ptr ? o->via.bin.ptr : "";
    *n = o->via.bin.size;
    return 0;
  }
  if (o->type == MSGPACK_OBJECT_STR) {
    *p = o->via.str.ptr ? o->via.str.ptr : "";
    *n = o->via.str.size;
    return 0;
  }
  return RDZV_EPROTO;
}

int proto_obj_i64(const msgpack_object *o, int64_t *v) {
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    if (o->via.u64 > (uint64_t)INT64_MAX)
      return RDZV_EPROTO;
    *v = (int64_t)o->via.u64;
    return 0;
  }
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    *v = o->via.i64;
    return 0;
  }
  return RDZV_EPROTO;
}

const msgpack_object *proto_map_get(const msgpack_object *m, const char *key) {
  size_t kl = strlen(key);
  if (m == NULL || m->type != MSGPACK_OBJECT_MAP)
    return NULL;
  for (uint32_t i = 0; i < m->via.map.size; i++) {
    const char *p;
    size_t n;
    if (proto_obj_bytes(&m->via.map.ptr[i].key, &p, &n) == 0 && n == kl &&
        memcmp(p, key, n) == 0)
      return &m->via.map.ptr[i].val;
  }
  return NULL;
}

int proto_arg_bytes(const proto_msg_t *m, uint32_t i, const char **p,
                    size_t *n) {
  if (i >= m->nargs)
    return RDZV_EPROTO;
  return proto_obj_bytes(&m->args[i], p, n);
}

int proto_arg_bytes_or_nil(const proto_msg_t *m, uint32_t i, const char **p,
                           size_t *n, int *is_nil) {
  if (i >= m->nargs)
    return RDZV_EPROTO;
  if (m->args[i].type == MSGPACK_OBJECT_NIL) {
    *is_nil = 1;
    *p = NULL;
    *n = 0;
    return 0;
  }
  *is_nil = 0;
  return proto_obj_bytes(&m->args[i], p, n);
}

int proto_arg_i64(const proto_msg_t *m, uint32_t i, int64_t *v) {
  if (i >= m->nargs)
    return RDZV_EPROTO;
  return proto_obj_i64(&m->args[i], v);
}

int proto_arg_array(const proto_msg_t *m, uint32_t i,
                    const msgpack_object **items, uint32_t *n) {
  if (i >= m->nargs || m->args[i].type != MSGPACK_OBJECT_ARRAY)
    return RDZV_EPROTO;
  *items = m->args[i].via.array.ptr;
  *n = m->args[i].via.array.size;
  return 0;
}

/* ---- encoding ------------------------------------------------------------- */

/* Room for n more bytes at the end of the buffer. RET where they go, or
 * NULL (oom set: the frame is dropped at proto_enc_end). */
static uint8_t *enc_grow(proto_enc_t *e, size_t n) {
  size_t ncap = e->cap ? e->cap : 256;
  char *nd;
  if (e->oom || n > SIZE_MAX / 2 - e->len)
    goto oom;
  while (ncap < e->len + n)
    ncap *= 2;
  nd = e->realloc_fn(e->data, ncap);
  if (nd == NULL)
    goto oom;
  e->data = nd;
  e->cap = ncap;
  return (uint8_t *)e->data + e->len;
oom:
  e->oom = 1;
  return NULL;
}

static inline uint8_t *enc_reserve(proto_enc_t *e, size_t n) {
  if (e->cap - e->len >= n && !e->oom)
    return (uint8_t *)e->data + e->len;
  return enc_grow(e, n);
}

static int enc_write(void *data, const char *buf, size_t len) {
  proto_enc_t *e = data;
  uint8_t *d;
  /* msgpack-c hands over empty bodies as (NULL, 0): memcpy must not see
   * NULL, even for 0 bytes. */
  if (len == 0)
    return e->oom ? -1 : 0;
  if ((d = enc_reserve(e, len)) == NULL)
    return -1;
  memcpy(d, buf, len);
  e->len += len;
  return 0;
}

void proto_enc_init_alloc(proto_enc_t *e, void *(*realloc_fn)(void *, size_t),
                          void (*free_fn)(void *)) {
  memset(e, 0, sizeof(*e));
  e->realloc_fn = realloc_fn;
  e->free_fn = free_fn;
  msgpack_packer_init(&e->pk, e, enc_write);
}

void proto_enc_init(proto_enc_t *e) { proto_enc_init_alloc(e, realloc, free); }

void proto_enc_destroy(proto_enc_t *e) {
  e->free_fn(e->data);
  e->data = NULL;
  e->len = e->cap = 0;
}

void proto_enc_reset(proto_enc_t *e) {
  e->len = 0;
  e->oom = e->toobig = 0;
}

int proto_enc_raw(proto_enc_t *e, const void *p, size_t n) {
  return enc_write(e, p, n) == 0 ? 0 : RDZV_ENOMEM;
}

/* msgpack's shortest forms, as msgpack-c's packer writes them. RET bytes. */
static inline size_t put_uint(uint8_t *p, uint64_t v) {
  if (v < 128) {
    p[0] = (uint8_t)v;
    return 1;
  }
  if (v < 256) {
    p[0] = 0xcc;
    p[1] = (uint8_t)v;
    return 2;
  }
  if (v < 65536) {
    p[0] = 0xcd;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)v;
    return 3;
  }
  if (v <= UINT32_MAX) {
    p[0] = 0xce;
    proto_put_len(p + 1, (uint32_t)v);
    return 5;
  }
  p[0] = 0xcf;
  proto_put_len(p + 1, (uint32_t)(v >> 32));
  proto_put_len(p + 5, (uint32_t)v);
  return 9;
}

static inline size_t put_int(uint8_t *p, int64_t v) {
  int w;
  uint64_t u = (uint64_t)v;
  if (v >= 0)
    return put_uint(p, u);
  if (v >= -32) {
    p[0] = (uint8_t)u;
    return 1;
  }
  w = v >= INT8_MIN ? 1 : v >= INT16_MIN ? 2 : v >= INT32_MIN ? 4 : 8;
  p[0] = (uint8_t)(w == 1 ? 0xd0 : w == 2 ? 0xd1 : w == 4 ? 0xd2 : 0xd3);
  for (int i = 0; i < w; i++)
    p[1 + i] = (uint8_t)(u >> (8 * (w - 1 - i)));
  return 1 + (size_t)w;
}

void proto_enc_begin_msg(proto_enc_t *e, uint32_t nargs, int kind,
                         uint64_t id, int64_t op) {
  /* Written in place: length, array header, kind, id, op. */
  uint8_t *b;
  size_t n = PROTO_HDR;
  uint32_t count = 3 + nargs;
  e->frame_start = e->len;
  if ((b = enc_reserve(e, PROTO_HDR + 5 + 1 + 9 + 9)) == NULL)
    return;
  if (count < 16) {
    b[n++] = (uint8_t)(0x90 | count);
  } else if (count < 65536) {
    b[n++] = 0xdc;
    b[n++] = (uint8_t)(count >> 8);
    b[n++] = (uint8_t)count;
  } else {
    b[n++] = 0xdd;
    proto_put_len(b + n, count);
    n += 4;
  }
  b[n++] = (uint8_t)kind;
  n += put_uint(b + n, id);
  n += put_int(b + n, op);
  e->len += n;
}

void proto_enc_begin(proto_enc_t *e, uint32_t count) {
  static const char zero[PROTO_HDR] = {0};
  e->frame_start = e->len;
  enc_write(e, zero, PROTO_HDR);
  msgpack_pack_array(&e->pk, count);
}

int proto_enc_end(proto_enc_t *e) {
  size_t body;
  if (e->oom || e->toobig) {
    /* Drop the partial frame; earlier frames in the buffer stay whole. */
    int rc = e->oom ? RDZV_ENOMEM : RDZV_ETOOBIG;
    e->len = e->frame_start < e->len ? e->frame_start : e->len;
    e->oom = e->toobig = 0;
    return rc;
  }
  body = e->len - e->frame_start - PROTO_HDR;
  if (body > UINT32_MAX) {
    e->len = e->frame_start;
    return RDZV_ETOOBIG;
  }
  proto_put_len((uint8_t *)e->data + e->frame_start, (uint32_t)body);
  return 0;
}

/* A str (0xa0/0xd9..) or bin (0xc4..) header of n <= UINT32_MAX bytes, as
 * msgpack-c's packer writes it. RET its bytes (at most 5). */
static inline size_t put_strbin_hdr(uint8_t *d, int bin, size_t n) {
  if (!bin && n < 32) {
    d[0] = (uint8_t)(0xa0 | n);
    return 1;
  }
  if (n < 256) {
    d[0] = bin ? 0xc4 : 0xd9;
    d[1] = (uint8_t)n;
    return 2;
  }
  if (n < 65536) {
    d[0] = bin ? 0xc5 : 0xda;
    d[1] = (uint8_t)(n >> 8);
    d[2] = (uint8_t)n;
    return 3;
  }
  d[0] = bin ? 0xc6 : 0xdb;
  proto_put_len(d + 1, (uint32_t)n);
  return 5;
}

/* A str or bin, header and body, straight into the encoder's buffer: one
 * reserve and one copy instead of a packer call per piece. Over 4 GiB
 * msgpack cannot say it: proto_enc_end drops the frame (RDZV_ETOOBIG). */
static void enc_strbin(proto_enc_t *e, int bin, const void *p, size_t n) {
  uint8_t *d;
  size_t h;
  if (n > UINT32_MAX) {
    e->toobig = 1;
    return;
  }
  if ((d = enc_reserve(e, 5 + n)) == NULL)
    return;
  h = put_strbin_hdr(d, bin, n);
  if (n)
    memcpy(d + h, p, n);
  e->len += h + n;
}

void proto_enc_str(proto_enc_t *e, const char *s, size_t n) {
  enc_strbin(e, 0, s, n);
}

void proto_enc_bin(proto_enc_t *e, const void *p, size_t n) {
  enc_strbin(e, 1, p, n);
}

void proto_enc_int(proto_enc_t *e, int64_t v) {
  uint8_t *d = enc_reserve(e, 9);
  if (d != NULL)
    e->len += put_int(d, v);
}

/* [kind, id, op, key, bin or int]: the whole frame, length included, with
 * one reserve and two copies. RET 0, RDZV_ENOMEM or RDZV_ETOOBIG (nothing
 * added). */
static int enc_key_msg(proto_enc_t *e, int kind, uint64_t id, int64_t op,
                       const char *k, size_t kn, const void *v, size_t vn,
                       int64_t iv, int is_int) {
  uint8_t *b;
  size_t n = PROTO_HDR, body;
  if (kn > UINT32_MAX || vn > UINT32_MAX)
    return RDZV_ETOOBIG; /* longer than a frame's length can say */
  if ((b = enc_reserve(e, PROTO_HDR + 3 + 9 + 9 + 5 + kn + 9 + vn)) == NULL) {
    e->oom = 0;
    return RDZV_ENOMEM;
  }
  b[n++] = 0x95;
  b[n++] = (uint8_t)kind;
  n += put_uint(b + n, id);
  n += put_int(b + n, op);
  n += put_strbin_hdr(b + n, 0, kn);
  if (kn)
    memcpy(b + n, k, kn);
  n += kn;
  if (is_int) {
    n += put_int(b + n, iv);
  } else {
    n += put_strbin_hdr(b + n, 1, vn);
    if (vn)
      memcpy(b + n, v, vn);
    n += vn;
  }
  body = n - PROTO_HDR;
  if (body > UINT32_MAX)
    return RDZV_ETOOBIG;
  proto_put_len(b, (uint32_t)body);
  e->frame_start = e->len;
  e->len += n;
  return 0;
}

int proto_enc_key_bin(proto_enc_t *e, int kind, uint64_t id, int64_t op,
                      const char *k, size_t kn, const void *v, size_t vn) {
  return enc_key_msg(e, kind, id, op, k, kn, v, vn, 0, 0);
}

int proto_enc_key_int(proto_enc_t *e, int kind, uint64_t id, int64_t op,
                      const char *k, size_t kn, int64_t v) {
  return enc_key_msg(e, kind, id, op, k, kn, NULL, 0, v, 1);
}

void proto_pack_bytes(msgpack_packer *pk, const void *p, size_t n) {
  if (pk->callback == enc_write) {
    enc_strbin(pk->data, 1, p, n);
    return;
  }
  msgpack_pack_bin(pk, n);
  msgpack_pack_bin_body(pk, p, n);
}

void proto_pack_str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  if (pk->callback == enc_write) {
    enc_strbin(pk->data, 0, s, n);
    return;
  }
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

/* ---- authentication ------------------------------------------------------ */

int proto_mac(const void *token, size_t token_len, const char *label,
              const uint8_t *nonce, size_t nonce_len, const char *job,
              const char *role, uint8_t mac[PROTO_MAC_LEN]) {
  /* Length-prefix each field so that no two inputs share an encoding. */
  uint8_t msg[4 * 4 + 64 + PROTO_NONCE_LEN + 2 * 256];
  size_t off = 0;
  const char *fields[4] = {label, (const char *)nonce, job, role};
  size_t lens[4] = {strlen(label), nonce_len, strlen(job), strlen(role)};

  for (int i = 0; i < 4; i++) {
    if (lens[i] > 256 || off + 4 + lens[i] > sizeof(msg))
      return RDZV_EINVAL;
    proto_put_len(msg + off, (uint32_t)lens[i]);
    memcpy(msg + off + 4, fields[i], lens[i]);
    off += 4 + lens[i];
  }
  lu_hmac_sha256(token, token_len, msg, off, mac);
  return 0;
}

int proto_mac_equal(const uint8_t *a, const uint8_t *b, size_t n) {
  uint8_t d = 0;
  for (size_t i = 0; i < n; i++)
    d |= (uint8_t)(a[i] ^ b[i]);
  return d == 0;
}

int proto_job_key(const void *secret, size_t secret_len, const char *job,
                  char out[PROTO_JOB_KEY_LEN + 1]) {
  static const char label[] = "launch-job-key-v1";
  uint8_t msg[8 + sizeof(label) + 256], mac[PROTO_MAC_LEN];
  size_t jl = strlen(job), ll = sizeof(label) - 1, off = 0;
  if (jl > 255)
    return RDZV_EINVAL;
  proto_put_len(msg, (uint32_t)ll);
  memcpy(msg + 4, label, ll);
  off = 4 + ll;
  proto_put_len(msg + off, (uint32_t)jl);
  memcpy(msg + off + 4, job, jl);
  off += 4 + jl;
  lu_hmac_sha256(secret, secret_len, msg, off, mac);
  lu_hex(mac, sizeof(mac), out);
  return 0;
}

int proto_hello_challenge(proto_hello_t *h, const proto_msg_t *m, char *err,
                          size_t errcap) {
  const char *nonce;
  size_t nn;
  int auth_required = 0, rc;
  if (m->kind != PROTO_PUSH || m->op != PROTO_EV_CHALLENGE ||
      proto_arg_bytes(m, 0, &nonce, &nn) != 0 || nn != PROTO_NONCE_LEN) {
    lu_errf(err, errcap, "sent no challenge: is it a launch server?");
    return RDZV_EPROTO;
  }
  if (m->nargs > 2 && m->args[2].type == MSGPACK_OBJECT_BOOLEAN)
    auth_required = m->args[2].via.boolean;
  /* Features: a server before them sends none; bits unknown here are not
   * used. */
  h->features = 0;
  if (m->nargs > 3 && m->args[3].type == MSGPACK_OBJECT_POSITIVE_INTEGER)
    h->features = (uint32_t)(m->args[3].via.u64 & PROTO_FEATURES);
  if (auth_required && h->token == NULL) {
    lu_errf(err, errcap, "requires a token: give the job's key or the "
            "server's token (--token-file, LAUNCH_RDZV_TOKEN_FILE)");
    return RDZV_EAUTH;
  }
  if (lu_random(h->cnonce, sizeof(h->cnonce)) != 0) {
    lu_errf(err, errcap, "no randomness for the handshake");
    return RDZV_ENOMEM;
  }
  if (h->token &&
      (rc = proto_mac(h->token, h->token_len, "rdzv-client",
                      (const uint8_t *)nonce, nn, h->job, h->role,
                      h->proof)) != 0) {
    lu_errf(err, errcap, "cannot compute the proof: %s", rdzv_strerror(rc));
    return rc;
  }
  return 0;
}

void proto_hello_pack(const proto_hello_t *h, msgpack_packer *pk) {
  msgpack_pack_uint32(pk, RDZV_PROTOCOL_VERSION);
  proto_pack_str(pk, h->role);
  proto_pack_str(pk, h->job);
  if (h->token)
    proto_pack_bytes(pk, h->proof, sizeof(h->proof));
  else
    msgpack_pack_nil(pk);
  proto_pack_bytes(pk, h->cnonce, sizeof(h->cnonce));
}

int proto_hello_reply(const proto_hello_t *h, const proto_msg_t *m, char *err,
                      size_t errcap) {
  const char *sp;
  size_t sn;
  uint8_t want[PROTO_MAC_LEN];
  if (h->token == NULL)
    return 0;
  if (proto_arg_bytes(m, 0, &sp, &sn) != 0 || sn != PROTO_MAC_LEN ||
      proto_mac(h->token, h->token_len, "rdzv-server", h->cnonce,
                sizeof(h->cnonce), h->job, h->role, want) != 0 ||
      !proto_mac_equal(want, (const uint8_t *)sp, PROTO_MAC_LEN)) {
    lu_errf(err, errcap, "could not prove it holds the token");
    return RDZV_EAUTH;
  }
  return 0;
}
