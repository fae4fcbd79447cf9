/* io.c - durable writes, hashing while writing or reading, tree removal.
 *
 * Every file launch writes into a checkpoint goes temp file -> fsync ->
 * rename -> fsync of the directory: after a crash a name either holds the
 * whole new content or does not exist (or holds the old content).
 *
 * The shard writer aims at the disk's own bandwidth. SHA-256 runs on a
 * second thread over the caller's buffers from the start, so the hash is
 * never behind the write. By default the write goes through the page
 * cache: large chunks from the caller's buffers, write-back of each chunk
 * started at once (sync_file_range) and the chunk a few back waited for,
 * so the dirty data in flight stays bounded and the final fsync has little
 * left to do; the pages stay cached, clean, so that a worker restarted on
 * this node reads its step from memory. With $LAUNCH_CKPT_DIRECT=1 (and
 * where the file system allows it) the write goes around the page cache
 * (O_DIRECT): a third thread writes 8 MiB chunks, straight from the
 * caller's buffers where they are aligned, else from aligned buffers the
 * caller's thread fills (three in turn); no CPU time goes to the page
 * cache and the node's cache is left alone, for shards that dwarf memory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck_int.h"

#define CK_CHUNK (8u << 20)  /* bytes per write and per write-back range */
#define CK_LAG 8             /* chunks in flight before we wait for one */
#define CK_HASH_STEP (1u << 20)
#define CK_INLINE_HASH (4u << 20) /* below this, hash on the caller's thread */
#define CK_RM_DEPTH 16
#define CK_ALIGN 4096u           /* O_DIRECT: offsets, lengths, addresses */
#define CK_DIRECT_MIN (1u << 20) /* smaller shards go through the cache */
#define CK_DIRECT_BUFS 3         /* aligned chunks filled while one is written */
#define CK_AHEAD (4 * CK_CHUNK)   /* reading: asked of the disk ahead of use */

void ck_problem(char *problem, size_t n, const char *fmt, ...) {
  va_list ap;
  if (problem == NULL || n == 0 || problem[0] != '\0')
    return;
  va_start(ap, fmt);
  vsnprintf(problem, n, fmt, ap);
  va_end(ap);
}

int ck_join(char *buf, size_t n, const char *a, const char *b) {
  int k = snprintf(buf, n, "%s/%s", a, b);
  return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

int ck_threads(int want, int cap) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int n = want > 0 ? want : (int)(cpus > 0 ? cpus : 1);
  return n < 1 ? 1 : n > cap ? cap : n;
}

int ck_fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
  if (fd < 0)
    return -errno;
  /* Some file systems (and FUSE mounts) refuse fsync on a directory: the
   * rename is as durable as they make it. */
  if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)
    rc = -errno;
  close(fd);
  return rc;
}

static int ck_fsync_parent(const char *path) {
  char buf[4096];
  char *slash;
  if (lu_strlcpy(buf, path, sizeof(buf)) >= sizeof(buf))
    return -ENAMETOOLONG;
  while ((slash = strrchr(buf, '/')) != NULL && slash[1] == '\0' &&
         slash != buf)
    *slash = '\0'; /* "a/b/" -> "a/b" */
  slash = strrchr(buf, '/');
  if (slash == NULL)
    return ck_fsync_dir(".");
  if (slash == buf)
    return ck_fsync_dir("/");
  *slash = '\0';
  return ck_fsync_dir(buf);
}

int ck_mkdir_durable(const char *path) {
  struct stat st;
  if (mkdir(path, 0755) == 0)
    return ck_fsync_parent(path);
  if (errno != EEXIST)
    return -errno;
  if (stat(path, &st) != 0)
    return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

void ck_rand_hex(char hex[9]) {
  unsigned char r[4];
  if (lu_random(r, sizeof(r)) != 0)
    memset(r, 0, sizeof(r));
  lu_hex(r, sizeof(r), hex);
}

/* dir/.name.tmp-PID-RANDOM: unique per writer, hidden, never a step. */
static int ck_tmp_name(char *buf, size_t n, const char *dir, const char *name) {
  char hex[9];
  int k;
  ck_rand_hex(hex);
  k = snprintf(buf, n, "%s/.%s.tmp-%d-%s", dir, name, (int)getpid(), hex);
  return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

static int ck_write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* rename the temp file into place and make both durable. */
static int ck_publish(int fd, const char *tmp, const char *dir,
                      const char *name) {
  char path[4096];
  int rc = 0;
  if (fdatasync(fd) != 0)
    rc = -errno;
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  if (rc == 0 && (rc = ck_join(path, sizeof(path), dir, name)) == 0 &&
      rename(tmp, path) != 0)
    rc = -errno;
  if (rc == 0)
    rc = ck_fsync_dir(dir);
  if (rc != 0)
    unlink(tmp);
  return rc;
}

int ck_write_atomic_after(const char *dir, const char *name, const void *data,
                          size_t len, int64_t after_ns) {
  char tmp[4096];
  int fd, rc;
  if ((rc = ck_tmp_name(tmp, sizeof(tmp), dir, name)) != 0)
    return rc;
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  if ((rc = ck_write_all(fd, data, len)) != 0) {
    close(fd);
    unlink(tmp);
    return rc;
  }
  /* The file system's clock advances by ticks: wait for the next one (a
   * few ms at most) so that this file's ctime is strictly later. */
  for (int i = 0; i < 100 && after_ns >= 0; i++) {
    struct stat st;
    if (fstat(fd, &st) != 0 ||
        (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec >
            after_ns)
      break;
    usleep(1000);
    (void)futimens(fd, NULL);
  }
  return ck_publish(fd, tmp, dir, name);
}

int ck_write_atomic(const char *dir, const char *name, const void *data,
                    size_t len) {
  return ck_write_atomic_after(dir, name, data, len, -1);
}

/* ---- SHA-256 on a second thread ---------------------------------------------- */

/* The hasher follows a producer: it hashes bytes [0, avail) of the
 * buffers as avail grows (reading), or all of them at once (writing). */
typedef struct ck_hasher_s {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
  int threaded;
  const struct iovec *iov;
  int iovcnt;
  uint64_t total, avail;
  int abort;
  EVP_MD_CTX *ctx;
  int rc;
} ck_hasher_t;

/* Hash bytes [from, to) of the buffers. */
static int ck_hash_range(ck_hasher_t *h, uint64_t from, uint64_t to) {
  uint64_t base = 0;
  for (int i = 0; i < h->iovcnt && from < to; i++) {
    uint64_t len = h->iov[i].iov_len;
    if (from < base + len) {
      uint64_t a = from - base, b = LU_MIN(len, to - base);
      while (a < b) {
        size_t step = (size_t)LU_MIN(b - a, CK_HASH_STEP);
        if (EVP_DigestUpdate(h->ctx, (const char *)h->iov[i].iov_base + a,
                             step) != 1)
          return RDZV_ENOMEM;
        a += step;
      }
      from = base + b;
    }
    base += len;
  }
  return 0;
}

static void *ck_hasher_main(void *arg) {
  ck_hasher_t *h = arg;
  uint64_t done = 0;
  while (done < h->total && h->rc == 0) {
    uint64_t upto;
    pthread_mutex_lock(&h->mu);
    while (h->avail == done && !h->abort)
      pthread_cond_wait(&h->cv, &h->mu);
    upto = h->avail;
    if (h->abort)
      upto = done;
    pthread_mutex_unlock(&h->mu);
    if (upto == done)
      break;
    h->rc = ck_hash_range(h, done, upto);
    done = upto;
  }
  return NULL;
}

static int ck_hasher_start(ck_hasher_t *h, const struct iovec *iov,
                           int iovcnt, uint64_t total, uint64_t avail) {
  memset(h, 0, sizeof(*h));
  h->iov = iov;
  h->iovcnt = iovcnt;
  h->total = total;
  h->avail = avail;
  if ((h->ctx = EVP_MD_CTX_new()) == NULL)
    return RDZV_ENOMEM;
  if (EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(h->ctx);
    return RDZV_ENOMEM;
  }
  if (total < CK_INLINE_HASH)
    return 0;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  if (pthread_create(&h->th, NULL, ck_hasher_main, h) != 0) {
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    return 0; /* hash on the caller's thread at the end instead */
  }
  h->threaded = 1;
  return 0;
}

static void ck_hasher_feed(ck_hasher_t *h, uint64_t avail) {
  if (!h->threaded) {
    h->avail = avail;
    return;
  }
  pthread_mutex_lock(&h->mu);
  h->avail = avail;
  pthread_cond_signal(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* Finish: with ok, hash whatever is left and write the hex digest. */
static int ck_hasher_end(ck_hasher_t *h, int ok, char *sha) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned mdlen = 0;
  int rc = 0;
  if (h->threaded) {
    pthread_mutex_lock(&h->mu);
    h->abort = !ok;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->th, NULL);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    rc = h->rc;
  } else if (ok) {
    rc = ck_hash_range(h, 0, h->total);
  }
  if (ok && rc == 0) {
    if (EVP_DigestFinal_ex(h->ctx, md, &mdlen) != 1 || mdlen != 32)
      rc = RDZV_ENOMEM;
    else
      lu_hex(md, 32, sha);
  }
  EVP_MD_CTX_free(h->ctx);
  return rc;
}

/* ---- the shard writer ------------------------------------------------------------ */

/* Through the page cache, from the caller's buffers. */
static int ck_write_cached(int fd, const struct iovec *iov, int iovcnt,
                           uint64_t total) {
  uint64_t off = 0, chunk_start = 0;
  unsigned chunk = 0;
  int rc = 0;
  for (int i = 0; i < iovcnt && rc == 0; i++) {
    const char *p = iov[i].iov_base;
    size_t left = iov[i].iov_len;
    while (left > 0 && rc == 0) {
      size_t room = (size_t)(chunk_start + CK_CHUNK - off);
      size_t n = left < room ? left : room;
      if ((rc = ck_write_all(fd, p, n)) != 0)
        break;
      p += n;
      left -= n;
      off += n;
      if (off - chunk_start == CK_CHUNK || off == total) {
        /* Start write-back of this chunk; wait for the one CK_LAG chunks
         * back, so that little is left for the fsync and the dirty data
         * in flight stays bounded. Its pages stay cached (clean) for a
         * restart's read. Failures only cost speed: fdatasync below is
         * what makes the data durable. */
        (void)sync_file_range(fd, (off_t)chunk_start,
                              (off_t)(off - chunk_start),
                              SYNC_FILE_RANGE_WRITE);
        if (chunk >= CK_LAG) {
          off_t old = (off_t)(chunk - CK_LAG) * CK_CHUNK;
          (void)sync_file_range(fd, old, CK_CHUNK,
                                SYNC_FILE_RANGE_WAIT_BEFORE |
                                    SYNC_FILE_RANGE_WRITE |
                                    SYNC_FILE_RANGE_WAIT_AFTER);
        }
        chunk++;
        chunk_start = off;
      }
    }
  }
  return rc;
}

/* ---- the O_DIRECT writer ------------------------------------------------------------ */

/* A ring of chunks: the caller's thread fills slot head % N (or points it
 * at its own aligned memory), the writer thread writes slot tail % N. */
typedef struct ck_direct_s {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int fd;
  char *bounce[CK_DIRECT_BUFS];
  const char *data[CK_DIRECT_BUFS];
  size_t len[CK_DIRECT_BUFS]; /* a multiple of CK_ALIGN */
  off_t off[CK_DIRECT_BUFS];
  unsigned head, tail;
  int done, rc;
} ck_direct_t;

static int ck_pwrite_all(int fd, const char *p, size_t n, off_t off) {
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, off);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (w == 0)
      return -EIO;
    p += w;
    n -= (size_t)w;
    off += w;
  }
  return 0;
}

static void *ck_direct_main(void *arg) {
  ck_direct_t *d = arg;
  for (;;) {
    unsigned k;
    int rc;
    pthread_mutex_lock(&d->mu);
    while (d->tail == d->head && !d->done)
      pthread_cond_wait(&d->cv, &d->mu);
    if (d->tail == d->head) {
      pthread_mutex_unlock(&d->mu);
      return NULL;
    }
    k = d->tail % CK_DIRECT_BUFS;
    pthread_mutex_unlock(&d->mu);
    rc = ck_pwrite_all(d->fd, d->data[k], d->len[k], d->off[k]);
    pthread_mutex_lock(&d->mu);
    d->tail++;
    if (rc != 0 && d->rc == 0)
      d->rc = rc;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    if (rc != 0)
      return NULL;
  }
}

/* Copy bytes [off, off + n) of the buffers to dst. */
static void ck_gather(const struct iovec *iov, int iovcnt, uint64_t off,
                      char *dst, size_t n) {
  uint64_t base = 0;
  for (int i = 0; i < iovcnt && n > 0; i++) {
    uint64_t len = iov[i].iov_len;
    if (off < base + len) {
      size_t a = (size_t)(off - base);
      size_t m = (size_t)LU_MIN(len - a, (uint64_t)n);
      memcpy(dst, (const char *)iov[i].iov_base + a, m);
      dst += m;
      n -= m;
      off += m;
    }
    base += len;
  }
}

/* Where bytes [off, off + n) lie in one buffer, aligned for O_DIRECT:
 * that address, else NULL. */
static const char *ck_aligned_at(const struct iovec *iov, int iovcnt,
                                 uint64_t off, size_t n) {
  uint64_t base = 0;
  for (int i = 0; i < iovcnt; i++) {
    uint64_t len = iov[i].iov_len;
    if (off < base + len) {
      const char *p = (const char *)iov[i].iov_base + (off - base);
      return off + n <= base + len && (uintptr_t)p % CK_ALIGN == 0 ? p
                                                                  : NULL;
    }
    base += len;
  }
  return NULL;
}

/* Write the buffers with O_DIRECT into fd (opened so), the last chunk
 * padded to CK_ALIGN and the file then cut to total.
 * RET 0, -EINVAL when the file system refuses the writes (the
 * caller falls back), other -errno. */
static int ck_write_direct(int fd, const struct iovec *iov, int iovcnt,
                           uint64_t total) {
  ck_direct_t d;
  pthread_t th;
  uint64_t off = 0;
  int rc = 0, nb = 0;
  memset(&d, 0, sizeof(d));
  d.fd = fd;
  for (; nb < CK_DIRECT_BUFS; nb++)
    if (posix_memalign((void **)&d.bounce[nb], CK_ALIGN, CK_CHUNK) != 0) {
      d.bounce[nb] = NULL;
      rc = RDZV_ENOMEM;
      break;
    }
  if (rc == 0) {
    pthread_mutex_init(&d.mu, NULL);
    pthread_cond_init(&d.cv, NULL);
    if (pthread_create(&th, NULL, ck_direct_main, &d) != 0) {
      pthread_mutex_destroy(&d.mu);
      pthread_cond_destroy(&d.cv);
      rc = -EAGAIN;
    }
  }
  if (rc != 0) {
    for (int i = 0; i < nb; i++)
      free(d.bounce[i]);
    return rc;
  }
  while (off < total) {
    size_t n = (size_t)LU_MIN(total - off, (uint64_t)CK_CHUNK);
    size_t padded = (n + CK_ALIGN - 1) / CK_ALIGN * CK_ALIGN;
    const char *own = padded == n ? ck_aligned_at(iov, iovcnt, off, n) : NULL;
    unsigned k;
    pthread_mutex_lock(&d.mu);
    while (d.head - d.tail == CK_DIRECT_BUFS && d.rc == 0)
      pthread_cond_wait(&d.cv, &d.mu);
    rc = d.rc;
    k = d.head % CK_DIRECT_BUFS;
    pthread_mutex_unlock(&d.mu);
    if (rc != 0)
      break;
    if (own == NULL) { /* the slot's own buffer is free: tail passed it */
      ck_gather(iov, iovcnt, off, d.bounce[k], n);
      memset(d.bounce[k] + n, 0, padded - n);
    }
    pthread_mutex_lock(&d.mu);
    d.data[k] = own ? own : d.bounce[k];
    d.len[k] = padded;
    d.off[k] = (off_t)off;
    d.head++;
    pthread_cond_broadcast(&d.cv);
    pthread_mutex_unlock(&d.mu);
    off += n;
  }
  pthread_mutex_lock(&d.mu);
  d.done = 1;
  pthread_cond_broadcast(&d.cv);
  pthread_mutex_unlock(&d.mu);
  pthread_join(th, NULL);
  if (rc == 0)
    rc = d.rc;
  pthread_mutex_destroy(&d.mu);
  pthread_cond_destroy(&d.cv);
  for (int i = 0; i < nb; i++)
    free(d.bounce[i]);
  if (rc == 0 && total % CK_ALIGN != 0 && ftruncate(fd, (off_t)total) != 0)
    rc = -errno;
  return rc;
}

/* O_DIRECT only when asked ($LAUNCH_CKPT_DIRECT=1): through the page cache
 * the newest step stays in memory, and a worker restarted on this node
 * (the common failure) reads it from there instead of from the disk; the
 * kernel reclaims those clean pages first when memory runs short. */
static int ck_direct_wanted(uint64_t total) {
  const char *v = getenv("LAUNCH_CKPT_DIRECT");
  return total >= CK_DIRECT_MIN && v != NULL && strcmp(v, "1") == 0;
}

int ck_write_shard(const char *dir, const char *name, const struct iovec *iov,
                   int iovcnt, uint64_t *size, char *sha) {
  char tmp[4096];
  uint64_t total = 0;
  ck_hasher_t h;
  int fd = -1, rc, direct;
  for (int i = 0; i < iovcnt; i++)
    total += iov[i].iov_len;
  if ((rc = ck_tmp_name(tmp, sizeof(tmp), dir, name)) != 0)
    return rc;
  direct = ck_direct_wanted(total);
  if (direct) {
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL)
      direct = 0; /* not on this file system */
    else if (fd < 0)
      return -errno;
  }
  if (!direct && (fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                            0644)) < 0)
    return -errno;
  /* Reserve the extent up front: less fragmentation, and ENOSPC now
   * rather than after gigabytes. fallocate(2), not posix_fallocate(3):
   * where the file system lacks it, glibc would write the whole file
   * once more to emulate it. */
  if (total > 0 && fallocate(fd, 0, 0, (off_t)total) != 0 && errno == ENOSPC) {
    close(fd);
    unlink(tmp);
    return -ENOSPC;
  }
  if ((rc = ck_hasher_start(&h, iov, iovcnt, total, total)) != 0) {
    close(fd);
    unlink(tmp);
    return rc;
  }
  if (direct) {
    rc = ck_write_direct(fd, iov, iovcnt, total);
    if (rc == -EINVAL) {
      /* The file system took the open but not the writes: all again through
       * the page cache, from the start. */
      int fl = fcntl(fd, F_GETFL);
      rc = fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) != 0 ? -errno : 0;
      if (rc == 0 && ftruncate(fd, 0) != 0)
        rc = -errno;
      if (rc == 0 && total > 0)
        (void)fallocate(fd, 0, 0, (off_t)total);
      if (rc == 0 && lseek(fd, 0, SEEK_SET) != 0)
        rc = -errno;
      if (rc == 0)
        rc = ck_write_cached(fd, iov, iovcnt, total);
    }
  } else {
    rc = ck_write_cached(fd, iov, iovcnt, total);
  }
  {
    int hrc = ck_hasher_end(&h, rc == 0, sha);
    if (rc == 0)
      rc = hrc;
  }
  if (rc == 0) {
    *size = total;
    return ck_publish(fd, tmp, dir, name);
  }
  close(fd);
  unlink(tmp);
  return rc;
}

/* ---- reading ------------------------------------------------------------------------ */

/* Reading sequentially: have the kernel fetch [off, off + CK_AHEAD) while
 * this chunk is consumed (its own read-ahead window is far smaller), so
 * that the disk always has work queued. */
static void ck_read_ahead(int fd, uint64_t off, uint64_t total) {
  if (off < total && off % CK_CHUNK == 0)
    (void)posix_fadvise(fd, (off_t)off, (off_t)LU_MIN(CK_AHEAD, total - off),
                        POSIX_FADV_WILLNEED);
}

static int ck_read_all(int fd, char *p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (r == 0)
      return CKPT_ESIZE; /* shorter than it was a moment ago */
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* Read path into the buffers; with sha, hash them on a second thread as
 * they arrive. */
static int ck_read_into(const char *path, const struct iovec *iov,
                        int iovcnt, char *sha) {
  uint64_t total = 0, done = 0;
  struct stat st;
  ck_hasher_t h;
  int fd, rc = 0;
  for (int i = 0; i < iovcnt; i++)
    total += iov[i].iov_len;
  if ((fd = lu_open_regular(path, 0, &st, NULL, 0)) < 0)
    return fd;
  if ((uint64_t)st.st_size != total) {
    close(fd);
    return CKPT_ESIZE;
  }
  /* A larger read-ahead window: the whole file is read once, in order. */
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (sha && (rc = ck_hasher_start(&h, iov, iovcnt, total, 0)) != 0) {
    close(fd);
    return rc;
  }
  for (int i = 0; i < iovcnt && rc == 0; i++) {
    char *p = iov[i].iov_base;
    size_t left = iov[i].iov_len;
    while (left > 0) {
      size_t n = (size_t)LU_MIN((uint64_t)left,
                                CK_CHUNK - done % CK_CHUNK);
      if (done % CK_CHUNK == 0)
        ck_read_ahead(fd, done + CK_CHUNK, total);
      if ((rc = ck_read_all(fd, p, n)) != 0)
        break;
      p += n;
      left -= n;
      done += n;
      if (sha)
        ck_hasher_feed(&h, done);
    }
  }
  close(fd);
  if (sha == NULL)
    return rc;
  if (rc != 0) {
    ck_hasher_end(&h, 0, NULL);
    return rc;
  }
  return ck_hasher_end(&h, 1, sha);
}

int ck_read_hashed(const char *path, const struct iovec *iov, int iovcnt,
                   char *sha) {
  return ck_read_into(path, iov, iovcnt, sha);
}

/* Without a hash to keep in order, a large shard is read by CK_READERS
 * threads at once, each taking the next CK_CHUNK of the file: one stream
 * leaves a fast disk (NVMe, a parallel file system) mostly idle between
 * read-ahead windows; several keep its queue full. */
#define CK_READERS 4
#define CK_PAR_MIN (4 * (uint64_t)CK_CHUNK)

typedef struct {
  int fd;
  const struct iovec *iov;
  int iovcnt;
  uint64_t total;
  pthread_mutex_t mu;
  uint64_t next; /* the next chunk's offset (mu) */
  int rc;        /* the first failure (mu) */
} ck_par_t;

/* Read the file's bytes [off, off + n) into the buffers where they go. */
static int ck_pread_range(const ck_par_t *r, uint64_t off, uint64_t n) {
  uint64_t at = 0;
  for (int i = 0; i < r->iovcnt && n > 0; i++) {
    uint64_t len = r->iov[i].iov_len;
    if (off < at + len) {
      uint64_t in = off - at, k = LU_MIN(n, len - in);
      char *p = (char *)r->iov[i].iov_base + in;
      while (k > 0) {
        ssize_t got = pread(r->fd, p, (size_t)k, (off_t)off);
        if (got < 0) {
          if (errno == EINTR)
            continue;
          return -errno;
        }
        if (got == 0)
          return CKPT_ESIZE; /* shorter than it was a moment ago */
        p += got;
        k -= (uint64_t)got;
        off += (uint64_t)got;
        n -= (uint64_t)got;
      }
    }
    at += len;
  }
  return 0;
}

static void *ck_par_reader(void *arg) {
  ck_par_t *r = arg;
  for (;;) {
    uint64_t off;
    int rc;
    pthread_mutex_lock(&r->mu);
    off = r->next;
    r->next += CK_CHUNK;
    if (r->rc != 0)
      off = r->total; /* another reader failed: stop */
    pthread_mutex_unlock(&r->mu);
    if (off >= r->total)
      return NULL;
    rc = ck_pread_range(r, off, LU_MIN((uint64_t)CK_CHUNK, r->total - off));
    if (rc != 0) {
      pthread_mutex_lock(&r->mu);
      if (r->rc == 0)
        r->rc = rc;
      pthread_mutex_unlock(&r->mu);
    }
  }
}

int ck_read_plain(const char *path, const struct iovec *iov, int iovcnt) {
  pthread_t t[CK_READERS - 1];
  struct stat st;
  ck_par_t r;
  int started = 0, rc;
  memset(&r, 0, sizeof(r));
  for (int i = 0; i < iovcnt; i++)
    r.total += iov[i].iov_len;
  if (r.total < CK_PAR_MIN)
    return ck_read_into(path, iov, iovcnt, NULL);
  if ((r.fd = lu_open_regular(path, 0, &st, NULL, 0)) < 0)
    return r.fd;
  rc = (uint64_t)st.st_size != r.total ? CKPT_ESIZE : 0;
  if (rc != 0) {
    close(r.fd);
    return rc;
  }
  r.iov = iov;
  r.iovcnt = iovcnt;
  pthread_mutex_init(&r.mu, NULL);
  for (; started < CK_READERS - 1; started++)
    if (pthread_create(&t[started], NULL, ck_par_reader, &r) != 0)
      break; /* fewer readers: this thread reads the rest */
  ck_par_reader(&r);
  for (int i = 0; i < started; i++)
    pthread_join(t[i], NULL);
  pthread_mutex_destroy(&r.mu);
  close(r.fd);
  return r.rc;
}

void ck_fid_of(const struct stat *st, ck_fid_t *id) {
  memset(id, 0, sizeof(*id));
  id->dev = (uint64_t)st->st_dev;
  id->ino = (uint64_t)st->st_ino;
  id->size = (uint64_t)st->st_size;
  id->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  id->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
}

int ck_hash_file_id(const char *path, uint64_t *size, char *sha,
                    ck_fid_t *id, int *stable) {
  size_t cap = CK_CHUNK;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned mdlen = 0;
  EVP_MD_CTX *ctx = NULL;
  char *buf = NULL;
  uint64_t total = 0;
  struct stat st;
  ck_fid_t before, after;
  int fd, rc = 0;
  if (stable)
    *stable = 0;
  /* Regular files only (a FIFO would block, /dev/zero never ends), and no
   * more than one byte past the size fstat gave: a file that keeps growing
   * is reported as changed, not hashed for ever. */
  if ((fd = lu_open_regular(path, 0, &st, NULL, 0)) < 0)
    return fd;
  ck_fid_of(&st, &before);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if ((buf = malloc(cap)) == NULL || (ctx = EVP_MD_CTX_new()) == NULL ||
      EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
    rc = RDZV_ENOMEM;
    goto out;
  }
  for (;;) {
    ssize_t r;
    ck_read_ahead(fd, total + cap, before.size);
    if (total > before.size)
      break;
    r = read(fd, buf, (size_t)LU_MIN((uint64_t)cap, before.size + 1 - total));
    if (r < 0) {
      if (errno == EINTR)
        continue;
      rc = -errno;
      goto out;
    }
    if (r == 0)
      break;
    if (EVP_DigestUpdate(ctx, buf, (size_t)r) != 1) {
      rc = RDZV_ENOMEM;
      goto out;
    }
    total += (uint64_t)r;
  }
  if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32) {
    rc = RDZV_ENOMEM;
    goto out;
  }
  lu_hex(md, 32, sha);
  *size = total;
  if (id && fstat(fd, &st) == 0) {
    ck_fid_of(&st, &after);
    *id = before;
    if (stable)
      *stable = memcmp(&before, &after, sizeof(before)) == 0 &&
                total == before.size;
  }
out:
  EVP_MD_CTX_free(ctx);
  free(buf);
  close(fd);
  return rc;
}

int ck_hash_file(const char *path, uint64_t *size, char *sha) {
  return ck_hash_file_id(path, size, sha, NULL, NULL);
}

/* ---- removal --------------------------------------------------------------------- */

static int ck_rm_at(int dfd, const char *name, int depth) {
  int fd, rc = 0;
  DIR *d;
  struct dirent *e;
  if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
    return 0;
  if (errno != EISDIR && errno != EPERM)
    return -errno;
  if (depth >= CK_RM_DEPTH)
    return -ELOOP;
  fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : -errno;
  if ((d = fdopendir(fd)) == NULL) {
    rc = -errno;
    close(fd);
    return rc;
  }
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    int r = ck_rm_at(dirfd(d), e->d_name, depth + 1);
    if (r != 0 && rc == 0)
      rc = r;
  }
  closedir(d);
  if (rc == 0 && unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
    rc = -errno;
  return rc;
}

int ck_rm_tree(const char *path) { return ck_rm_at(AT_FDCWD, path, 0); }
