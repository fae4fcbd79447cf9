/* tb.c - TensorBoard event files (tb.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tb.h"

uint32_t tb_crc32c(const void *p, size_t n) {
  static uint32_t table[256];
  static int ready;
  const unsigned char *b = p;
  uint32_t c = 0xffffffffu;
  if (!ready) { /* the same table from any thread: a benign race */
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t x = i;
      for (int k = 0; k < 8; k++)
        x = x & 1 ? (x >> 1) ^ 0x82f63b78u : x >> 1;
      table[i] = x;
    }
    ready = 1;
  }
  while (n--)
    c = table[(c ^ *b++) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t tb_masked_crc(const void *p, size_t n) {
  uint32_t c = tb_crc32c(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

#ifdef RT_HAVE_TB
#include "tb_event.pb-c.h"

struct tb_s {
  FILE *f;
};

static void le64(unsigned char *o, uint64_t v) {
  for (int i = 0; i < 8; i++)
    o[i] = (unsigned char)(v >> (8 * i));
}

static void le32(unsigned char *o, uint32_t v) {
  for (int i = 0; i < 4; i++)
    o[i] = (unsigned char)(v >> (8 * i));
}

/* One TFRecord holding ev. */
static int put_event(tb_t *t, const Tb__Event *ev) {
  size_t n = tb__event__get_packed_size(ev);
  unsigned char head[12], tail[4], *buf = malloc(n ? n : 1);
  int ok;
  if (buf == NULL)
    return -ENOMEM;
  tb__event__pack(ev, buf);
  le64(head, n);
  le32(head + 8, tb_masked_crc(head, 8));
  le32(tail, tb_masked_crc(buf, n));
  ok = fwrite(head, 1, 12, t->f) == 12 && fwrite(buf, 1, n, t->f) == n &&
       fwrite(tail, 1, 4, t->f) == 4;
  free(buf);
  return ok ? 0 : -EIO;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int mkdir_p(const char *dir) {
  char p[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof(p))
    return -ENAMETOOLONG;
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++)
    if (p[i] == '/' || p[i] == '\0') {
      char c = p[i];
      p[i] = '\0';
      if (mkdir(p, 0755) != 0 && errno != EEXIST)
        return -errno;
      p[i] = c;
    }
  return 0;
}

int tb_open(const char *dir, tb_t **out) {
  char path[4096], host[256] = "localhost";
  Tb__Event ev = TB__EVENT__INIT;
  tb_t *t;
  int rc;
  *out = NULL;
  if ((rc = mkdir_p(dir)) != 0)
    return rc;
  gethostname(host, sizeof(host) - 1);
  if ((size_t)snprintf(path, sizeof(path), "%s/events.out.tfevents.%lld.%s.%d",
                       dir, (long long)time(NULL), host, (int)getpid()) >=
      sizeof(path))
    return -ENAMETOOLONG;
  if ((t = calloc(1, sizeof(*t))) == NULL)
    return -ENOMEM;
  if ((t->f = fopen(path, "wbx")) == NULL) {
    rc = -errno;
    free(t);
    return rc;
  }
  ev.has_wall_time = 1;
  ev.wall_time = now_s();
  ev.file_version = (char *)"brain.Event:2";
  if ((rc = put_event(t, &ev)) != 0 || (rc = tb_flush(t)) != 0) {
    tb_close(t);
    return rc;
  }
  *out = t;
  return 0;
}

int tb_scalar(tb_t *t, const char *tag, int64_t step, double value) {
  Tb__Event ev = TB__EVENT__INIT;
  Tb__Summary sum = TB__SUMMARY__INIT;
  Tb__SummaryValue v = TB__SUMMARY_VALUE__INIT, *vp = &v;
  v.tag = (char *)tag;
  v.has_simple_value = 1;
  v.simple_value = (float)value;
  sum.n_value = 1;
  sum.value = &vp;
  ev.has_wall_time = 1;
  ev.wall_time = now_s();
  ev.has_step = 1;
  ev.step = step;
  ev.summary = &sum;
  return put_event(t, &ev);
}

int tb_flush(tb_t *t) { return fflush(t->f) == 0 ? 0 : -errno; }

void tb_close(tb_t *t) {
  if (t == NULL)
    return;
  fclose(t->f);
  free(t);
}

#else /* !RT_HAVE_TB */

int tb_open(const char *dir, tb_t **out) {
  (void)dir;
  *out = NULL;
  return -ENOTSUP;
}
int tb_scalar(tb_t *t, const char *tag, int64_t step, double value) {
  (void)t, (void)tag, (void)step, (void)value;
  return -ENOTSUP;
}
int tb_flush(tb_t *t) { (void)t; return 0; }
void tb_close(tb_t *t) { (void)t; }

#endif
