/* torchfile.c - is a torch.save file or a safetensors file whole?
 *
 * torch.save (PyTorch >= 1.6) writes a zip archive, entries stored
 * uncompressed, whose central directory comes last: a save cut short has
 * no end-of-central-directory record, which is the cheapest reliable
 * "did this finish" test there is. Its data.pkl is the pickle that
 * describes the object (read by the layouts that keep their metadata in
 * it). safetensors starts with its JSON header, whose data_offsets say
 * exactly how long the file must be. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_int.h"

#define ZIP_EOCD 0x06054b50u
#define ZIP_EOCD64 0x06064b50u
#define ZIP_LOC64 0x07064b50u
#define ZIP_CEN 0x02014b50u
#define ZIP_LOC 0x04034b50u
#define ZIP_EOCD_LEN 22
#define ZIP_TAIL_MAX (ZIP_EOCD_LEN + 65535)
#define ST_HEADER_MAX (100u << 20) /* safetensors' own limit */

/* ---- sources --------------------------------------------------------------- */

static int mem_pread(void *ctx, void *buf, size_t n, uint64_t off) {
  ck_mem_t *m = ctx;
  if (off > m->n || n > m->n - off)
    return -EIO;
  memcpy(buf, m->p + off, n);
  return 0;
}

void ck_src_mem(ck_src_t *s, ck_mem_t *m, const void *p, size_t n) {
  m->p = p;
  m->n = n;
  s->pread = mem_pread;
  s->ctx = m;
  s->size = n;
}

static int fd_pread(void *ctx, void *buf, size_t n, uint64_t off) {
  int fd = (int)(intptr_t)ctx;
  char *b = buf;
  while (n > 0) {
    ssize_t r = pread(fd, b, n, (off_t)off);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (r == 0)
      return -EIO; /* the file shrank under us */
    b += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

int ck_src_file(ck_src_t *s, const char *path) {
  struct stat st;
  int fd = lu_open_regular(path, 0, &st, NULL, 0);
  if (fd < 0)
    return fd;
  s->pread = fd_pread;
  s->ctx = (void *)(intptr_t)fd;
  s->size = (uint64_t)st.st_size;
  return 0;
}

void ck_src_close(ck_src_t *s) {
  if (s->pread == fd_pread)
    close((int)(intptr_t)s->ctx);
  s->pread = NULL;
}

static uint64_t le(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;)
    v = v << 8 | p[i];
  return v;
}

/* ---- zip ------------------------------------------------------------------------ */

typedef struct zip_s {
  uint64_t cd_off, cd_size, entries;
  uint64_t cd_end_limit; /* the central directory must end by here */
} zip_t;

static int zip_find_end(const ck_src_t *s, zip_t *z, char *why, size_t n) {
  size_t tail = s->size < ZIP_TAIL_MAX ? (size_t)s->size : ZIP_TAIL_MAX;
  unsigned char *buf, *e = NULL;
  uint64_t base = s->size - tail, eocd_at = 0;
  int rc;
  if (s->size < ZIP_EOCD_LEN) {
    lu_errf(why, n, "%llu bytes: shorter than a zip's end record "
            "(the save did not finish)", (unsigned long long)s->size);
    return CKPT_EINCOMPLETE;
  }
  if ((buf = malloc(tail)) == NULL)
    return RDZV_ENOMEM;
  if ((rc = s->pread(s->ctx, buf, tail, base)) != 0) {
    free(buf);
    return rc;
  }
  /* The record is 22 bytes plus a comment that must reach the end. */
  for (size_t i = tail - ZIP_EOCD_LEN + 1; i-- > 0;) {
    if (le(buf + i, 4) == ZIP_EOCD &&
        i + ZIP_EOCD_LEN + le(buf + i + 20, 2) == tail) {
      e = buf + i;
      eocd_at = base + i;
      break;
    }
  }
  if (e == NULL) {
    free(buf);
    lu_errf(why, n, "no zip end-of-central-directory record: truncated "
            "(the save did not finish)");
    return CKPT_EINCOMPLETE;
  }
  z->entries = le(e + 10, 2);
  z->cd_size = le(e + 12, 4);
  z->cd_off = le(e + 16, 4);
  z->cd_end_limit = eocd_at;
  if (z->entries == 0xFFFF || z->cd_size == 0xFFFFFFFF ||
      z->cd_off == 0xFFFFFFFF) {
    unsigned char loc[20], rec[56];
    uint64_t rec_at;
    if (eocd_at < 20) {
      free(buf);
      lu_errf(why, n, "zip64 archive without its locator");
      return CKPT_EFORMAT;
    }
    if ((rc = s->pread(s->ctx, loc, sizeof(loc), eocd_at - 20)) != 0) {
      free(buf);
      return rc;
    }
    rec_at = le(loc + 8, 8);
    if (le(loc, 4) != ZIP_LOC64 || rec_at > eocd_at - 20 ||
        eocd_at - 20 - rec_at < sizeof(rec)) {
      free(buf);
      lu_errf(why, n, "zip64 locator does not point at a zip64 record");
      return CKPT_EFORMAT;
    }
    if ((rc = s->pread(s->ctx, rec, sizeof(rec), rec_at)) != 0) {
      free(buf);
      return rc;
    }
    if (le(rec, 4) != ZIP_EOCD64) {
      free(buf);
      lu_errf(why, n, "zip64 end record missing");
      return CKPT_EFORMAT;
    }
    z->entries = le(rec + 32, 8);
    z->cd_size = le(rec + 40, 8);
    z->cd_off = le(rec + 48, 8);
    z->cd_end_limit = rec_at;
  }
  free(buf);
  if (z->cd_off > z->cd_end_limit || z->cd_size > z->cd_end_limit - z->cd_off) {
    lu_errf(why, n, "zip central directory lies outside the file");
    return CKPT_EFORMAT;
  }
  return 0;
}

/* The zip64 extra field replaces each 32-bit field that is all ones, in
 * the order usize, csize, offset. */
static void zip64_extra(const unsigned char *x, size_t xlen, uint64_t *usize,
                        uint64_t *csize, uint64_t *off) {
  while (xlen >= 4) {
    size_t id = (size_t)le(x, 2), sz = (size_t)le(x + 2, 2), k = 0;
    if (sz > xlen - 4)
      return;
    if (id == 1) {
      uint64_t *f[3] = {usize, csize, off};
      for (int i = 0; i < 3; i++)
        if (*f[i] == 0xFFFFFFFF && k + 8 <= sz) {
          *f[i] = le(x + 4 + k, 8);
          k += 8;
        }
      return;
    }
    x += 4 + sz;
    xlen -= 4 + sz;
  }
}

/* Walk the central directory: every entry's data must lie before it; find
 * the entry ".../data.pkl" (one directory level, as torch writes it). */
static int zip_walk(const ck_src_t *s, const zip_t *z, uint64_t *pkl_off,
                    uint64_t *pkl_size, int *pkl_stored, char *why,
                    size_t n) {
  size_t win = z->cd_size < (4u << 20) ? (size_t)z->cd_size : (4u << 20);
  unsigned char *buf = malloc(win ? win : 1);
  uint64_t at = z->cd_off, end = z->cd_off + z->cd_size, count = 0;
  size_t have = 0, pos = 0;
  uint64_t buf_at = at;
  int rc = 0;
  if (buf == NULL)
    return RDZV_ENOMEM;
  *pkl_off = UINT64_MAX;
  while (at < end) {
    unsigned char *h;
    size_t name_len, extra_len, comment_len, rec_len;
    uint64_t csize, usize, loff;
    /* Refill so that a whole header (46 bytes + names) is in the window. */
    if (have - pos < 46 || have - pos < 46 + (size_t)le(buf + pos + 28, 2) +
                                           (size_t)le(buf + pos + 30, 2) +
                                           (size_t)le(buf + pos + 32, 2)) {
      size_t want = end - at < win ? (size_t)(end - at) : win;
      if ((rc = s->pread(s->ctx, buf, want, at)) != 0)
        break;
      buf_at = at;
      have = want;
      pos = 0;
    }
    h = buf + pos;
    if (have - pos < 46 || le(h, 4) != ZIP_CEN) {
      lu_errf(why, n, "zip central directory entry %llu is damaged",
              (unsigned long long)count);
      rc = CKPT_EFORMAT;
      break;
    }
    name_len = (size_t)le(h + 28, 2);
    extra_len = (size_t)le(h + 30, 2);
    comment_len = (size_t)le(h + 32, 2);
    rec_len = 46 + name_len + extra_len + comment_len;
    if (have - pos < rec_len) {
      lu_errf(why, n, "zip central directory entry %llu overruns it",
              (unsigned long long)count);
      rc = CKPT_EFORMAT;
      break;
    }
    csize = le(h + 20, 4);
    usize = le(h + 24, 4);
    loff = le(h + 42, 4);
    zip64_extra(h + 46 + name_len, extra_len, &usize, &csize, &loff);
    if (loff > z->cd_off || csize > z->cd_off - loff ||
        30 + name_len > z->cd_off - loff - csize) {
      lu_errf(why, n, "zip entry '%.*s' ends past the central directory: "
              "truncated or damaged", (int)(name_len > 200 ? 200 : name_len),
              (const char *)h + 46);
      rc = CKPT_EINCOMPLETE;
      break;
    }
    if (name_len > 9 && memcmp(h + 46 + name_len - 9, "/data.pkl", 9) == 0 &&
        memchr(h + 46, '/', name_len - 9) == NULL) {
      *pkl_off = loff;
      *pkl_size = csize;
      *pkl_stored = le(h + 10, 2) == 0 && csize == usize;
    }
    pos += rec_len;
    at = buf_at + pos;
    count++;
  }
  free(buf);
  if (rc == 0 && count != z->entries) {
    lu_errf(why, n, "zip central directory holds %llu entries, its end "
            "record says %llu", (unsigned long long)count,
            (unsigned long long)z->entries);
    rc = CKPT_EFORMAT;
  }
  return rc;
}

static int zip_read_pkl(const ck_src_t *s, const zip_t *z, uint64_t loff,
                        uint64_t size, unsigned char **pkl, size_t *len) {
  unsigned char h[30];
  uint64_t data;
  int rc;
  if ((rc = s->pread(s->ctx, h, sizeof(h), loff)) != 0)
    return rc;
  if (le(h, 4) != ZIP_LOC)
    return CKPT_EFORMAT;
  data = loff + 30 + le(h + 26, 2) + le(h + 28, 2);
  if (data > z->cd_off || size > z->cd_off - data || size > CK_META_MAX)
    return CKPT_EFORMAT;
  if ((*pkl = malloc(size ? size : 1)) == NULL)
    return RDZV_ENOMEM;
  if ((rc = s->pread(s->ctx, *pkl, (size_t)size, data)) != 0) {
    free(*pkl);
    *pkl = NULL;
    return rc;
  }
  *len = (size_t)size;
  return 0;
}

/* The legacy format: five pickles (magic number, protocol version, system
 * info, the object, the storage keys), then raw storages. */
static int legacy_check(const ck_src_t *s, unsigned char **pkl, size_t *len,
                        char *why, size_t n) {
  size_t want = s->size < CK_META_MAX ? (size_t)s->size : CK_META_MAX;
  unsigned char *buf = malloc(want ? want : 1);
  size_t at = 0;
  int rc;
  if (buf == NULL)
    return RDZV_ENOMEM;
  if ((rc = s->pread(s->ctx, buf, want, 0)) != 0) {
    free(buf);
    return rc;
  }
  for (int i = 0; i < 5; i++) {
    size_t used = 0;
    rc = pk_walk(buf + at, want - at, &used, NULL, NULL);
    if (rc != 0) {
      free(buf);
      if (pkl && *pkl) {
        /* Not whole after all: hand nothing back. */
        free(*pkl);
        *pkl = NULL;
        *len = 0;
      }
      if (rc == RDZV_ENOMEM)
        return rc;
      if (want < s->size) {
        lu_errf(why, n, "legacy torch file: its pickles exceed %u MiB, "
                "not checked", CK_META_MAX >> 20);
        return 0;
      }
      lu_errf(why, n, "legacy torch file: pickle %d of 5 is cut short "
              "(truncated)", i + 1);
      return CKPT_EINCOMPLETE;
    }
    if (i == 3 && pkl) {
      if ((*pkl = malloc(used)) == NULL) {
        free(buf);
        return RDZV_ENOMEM;
      }
      memcpy(*pkl, buf + at, used);
      *len = used;
    }
    at += used;
  }
  free(buf);
  return 0;
}

int ck_torch_check(const ck_src_t *s, unsigned char **pkl, size_t *pkl_len,
                   char *why, size_t whylen) {
  unsigned char head[4];
  zip_t z;
  uint64_t off = UINT64_MAX, size = 0;
  int stored = 0, rc;
  if (pkl) {
    *pkl = NULL;
    *pkl_len = 0;
  }
  if (s->size == 0) {
    lu_errf(why, whylen, "empty file");
    return CKPT_EINCOMPLETE;
  }
  if (s->size < sizeof(head)) {
    lu_errf(why, whylen, "%llu bytes: too short for a torch.save file",
            (unsigned long long)s->size);
    return CKPT_EINCOMPLETE;
  }
  if ((rc = s->pread(s->ctx, head, sizeof(head), 0)) != 0)
    return rc;
  if (le(head, 4) == ZIP_LOC) {
    if ((rc = zip_find_end(s, &z, why, whylen)) != 0)
      return rc;
    if ((rc = zip_walk(s, &z, &off, &size, &stored, why, whylen)) != 0)
      return rc;
    /* A data.pkl we cannot read (compressed: not torch's writer) leaves
     * *pkl NULL; the caller falls back to file names. */
    if (pkl && off != UINT64_MAX && stored) {
      rc = zip_read_pkl(s, &z, off, size, pkl, pkl_len);
      if (rc == RDZV_ENOMEM)
        return rc;
    }
    return 0;
  }
  if (head[0] == 0x80 && head[1] >= 2 && head[1] <= 5)
    return legacy_check(s, pkl, pkl_len, why, whylen);
  lu_errf(why, whylen, "not a torch.save file (neither a zip archive nor a "
          "pickle)");
  return CKPT_EFORMAT;
}

/* ---- safetensors ------------------------------------------------------------------ */

int ck_safetensors_check(const ck_src_t *s, char *why, size_t whylen) {
  unsigned char h8[8];
  uint64_t hlen, need = 0;
  char *hdr;
  cj_doc_t *doc;
  const cj_t *root;
  char jerr[128];
  int rc;
  if (s->size < 8) {
    lu_errf(why, whylen, "%llu bytes: shorter than a safetensors header",
            (unsigned long long)s->size);
    return CKPT_EINCOMPLETE;
  }
  if ((rc = s->pread(s->ctx, h8, 8, 0)) != 0)
    return rc;
  hlen = le(h8, 8);
  if (hlen > ST_HEADER_MAX) {
    lu_errf(why, whylen, "safetensors header length %llu is not plausible",
            (unsigned long long)hlen);
    return CKPT_EFORMAT;
  }
  if (8 + hlen > s->size) {
    lu_errf(why, whylen, "%llu bytes, its safetensors header alone needs "
            "%llu: truncated", (unsigned long long)s->size,
            (unsigned long long)(8 + hlen));
    return CKPT_EINCOMPLETE;
  }
  if ((hdr = malloc(hlen ? hlen : 1)) == NULL)
    return RDZV_ENOMEM;
  if ((rc = s->pread(s->ctx, hdr, (size_t)hlen, 8)) != 0) {
    free(hdr);
    return rc;
  }
  rc = cj_parse(hdr, (size_t)hlen, &doc, &root, jerr, sizeof(jerr));
  free(hdr);
  if (rc != 0) {
    lu_errf(why, whylen, "safetensors header: %s", jerr);
    return rc;
  }
  if (root->type != CJ_OBJ) {
    rc = CKPT_EFORMAT;
    lu_errf(why, whylen, "safetensors header is not a JSON object");
  }
  for (const cj_t *t = root->first; rc == 0 && t; t = t->next) {
    const cj_t *offs;
    int64_t b, e;
    if (strcmp(t->key, "__metadata__") == 0)
      continue;
    offs = cj_get(t, "data_offsets");
    if (offs == NULL || offs->type != CJ_ARR || offs->n != 2 ||
        cj_int(offs->first, 0, INT64_MAX, &b) != 0 ||
        cj_int(offs->first->next, b, INT64_MAX, &e) != 0) {
      lu_errf(why, whylen, "safetensors tensor '%.100s' has no valid "
              "data_offsets", t->key);
      rc = CKPT_EFORMAT;
      break;
    }
    if ((uint64_t)e > need)
      need = (uint64_t)e;
  }
  cj_free(doc);
  if (rc == 0 && need > s->size - 8 - hlen) {
    lu_errf(why, whylen, "%llu bytes, its header promises %llu: truncated",
            (unsigned long long)s->size,
            (unsigned long long)(8 + hlen + need));
    rc = CKPT_EINCOMPLETE;
  }
  return rc;
}
