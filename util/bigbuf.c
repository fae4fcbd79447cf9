/* bigbuf.c - big buffers from a bounded cache of mapped blocks
 * (lu_bigbuf.h).
 *
 * A block is one mapping: a header, then the caller's bytes. Sizes from
 * LU_BIG_MIN on fall into classes, four to a power of two (a block is at
 * most a quarter larger than asked for), each class with a list of freed
 * blocks. Small requests are malloc'd with the same header (its map field
 * 0), so that one free function takes every pointer. Blocks larger than
 * the largest class are mapped and unmapped each time. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lu_bigbuf.h"

#if defined(__SANITIZE_ADDRESS__)
#define BIG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BIG_ASAN 1
#endif
#endif
#ifdef BIG_ASAN
#include <sanitizer/asan_interface.h>
/* A cached block, and a block's bytes past what was asked for, read as
 * freed memory under ASan, as they would from malloc. */
#define BIG_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define BIG_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define BIG_POISON(p, n) ((void)(p), (void)(n))
#define BIG_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

typedef struct hdr_s {
  size_t map; /* bytes mapped (the class size); 0: malloc'd */
  union {
    size_t n;            /* bytes asked for, while in use */
    struct hdr_s *next;  /* the class's next free block, while cached */
  } u;
  size_t touched;        /* bytes from the block's start that may be in
                          * memory (the most any user asked for) */
  size_t pad;
} hdr_t;

#define HDR sizeof(hdr_t) /* 32: malloc's alignment kept */
#define MIN_SHIFT 18      /* LU_BIG_MIN, 256 KiB */
#define MAX_SHIFT 30      /* classes below 1 GiB */
#define STEPS 4           /* classes per power of two */
#define NCLASS ((MAX_SHIFT - MIN_SHIFT) * STEPS)

static pthread_mutex_t big_mu = PTHREAD_MUTEX_INITIALIZER;
static hdr_t *big_free[NCLASS];
static lu_big_stats_t big_st;

static int log2_floor(size_t v) { return 63 - __builtin_clzll((unsigned long long)v); }

/* The class of a block of s bytes (header included), its size in *size;
 * -1 past the classes (*size: s rounded to pages). */
static int class_of(size_t s, size_t *size) {
  int k = log2_floor(s);
  size_t step, c;
  if (k < MIN_SHIFT) {
    *size = LU_BIG_MIN;
    return 0;
  }
  if (k >= MAX_SHIFT) {
    *size = (s + 4095) & ~(size_t)4095;
    return -1;
  }
  step = ((size_t)1 << k) / STEPS;
  c = (s + step - 1) / step; /* STEPS .. 2 * STEPS */
  *size = c * step;
  if (c == 2 * STEPS) {
    if (k + 1 >= MAX_SHIFT)
      return -1;
    return (k + 1 - MIN_SHIFT) * STEPS;
  }
  return (k - MIN_SHIFT) * STEPS + (int)(c - STEPS);
}

size_t lu_big_class_size(size_t n) {
  size_t size;
  if (n < LU_BIG_MIN || n > SIZE_MAX - HDR - 4096)
    return 0;
  class_of(n + HDR, &size);
  return size;
}

/* A reused block holds no more pages than its new user asked for, and an
 * eighth (64 KiB at least): the cache never adds more than that to what
 * the caller counts (MADV_DONTNEED takes the mmap lock only to read). */
static void trim_block(hdr_t *h, size_t n) {
  size_t keep = HDR + n + (n / 8 > (64u << 10) ? n / 8 : (64u << 10));
  size_t from = (HDR + n + 4095) & ~(size_t)4095;
  if (h->touched > keep && h->touched > from) {
    BIG_UNPOISON((char *)h + from, h->touched - from);
    madvise((char *)h + from, h->touched - from, MADV_DONTNEED);
    h->touched = from;
  }
}

static void *user_of(hdr_t *h, size_t n) {
  h->u.n = n;
  if (h->map) {
    trim_block(h, n);
    if (h->touched < HDR + n)
      h->touched = HDR + n;
    BIG_UNPOISON(h, HDR + n);
    BIG_POISON((char *)h + HDR + n, h->map - HDR - n);
  }
  return (char *)h + HDR;
}

static void unmap_block(hdr_t *h, size_t map) {
  BIG_UNPOISON(h, map);
  munmap(h, map);
}

/* A big block for n bytes: from the cache, else newly mapped. */
static hdr_t *big_get(size_t n) {
  size_t size;
  int ci = class_of(n + HDR, &size);
  hdr_t *h = NULL;
  void *m;
  if (ci >= 0) {
    pthread_mutex_lock(&big_mu);
    if ((h = big_free[ci]) != NULL) {
      BIG_UNPOISON(h, HDR);
      big_free[ci] = h->u.next;
      big_st.cached -= size;
      big_st.blocks--;
      big_st.hits++;
    }
    pthread_mutex_unlock(&big_mu);
    if (h != NULL)
      return h;
  }
  m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  h = m;
  h->map = size;
  h->touched = 0;
  pthread_mutex_lock(&big_mu);
  big_st.mapped += size;
  big_st.maps++;
  pthread_mutex_unlock(&big_mu);
  return h;
}

/* Back to the cache while it has room, else unmapped. */
static void big_put(hdr_t *h) {
  size_t size, map = h->map;
  int ci = class_of(map, &size);
  pthread_mutex_lock(&big_mu);
  if (ci >= 0 && size == map && big_st.cached + map <= big_st.limit) {
    h->u.next = big_free[ci];
    big_free[ci] = h;
    big_st.cached += map;
    big_st.blocks++;
    BIG_POISON(h, map);
    pthread_mutex_unlock(&big_mu);
    return;
  }
  big_st.mapped -= map;
  big_st.unmaps++;
  pthread_mutex_unlock(&big_mu);
  unmap_block(h, map);
}

void *lu_big_alloc(size_t n) {
  hdr_t *h;
  if (n > SIZE_MAX - HDR - 4096)
    return NULL;
  if (n < LU_BIG_MIN) {
    if ((h = malloc(HDR + n)) == NULL)
      return NULL;
    h->map = 0;
  } else if ((h = big_get(n)) == NULL) {
    return NULL;
  }
  return user_of(h, n);
}

void lu_big_free(void *p) {
  hdr_t *h;
  if (p == NULL)
    return;
  h = (hdr_t *)((char *)p - HDR);
  if (h->map == 0)
    free(h);
  else
    big_put(h);
}

void *lu_big_realloc(void *p, size_t n) {
  hdr_t *h, *nh;
  size_t old, size;
  if (p == NULL)
    return lu_big_alloc(n);
  if (n > SIZE_MAX - HDR - 4096)
    return NULL;
  h = (hdr_t *)((char *)p - HDR);
  old = h->u.n;
  if (h->map == 0 && n < LU_BIG_MIN) {
    if ((nh = realloc(h, HDR + n)) == NULL)
      return NULL;
    return user_of(nh, n);
  }
  /* A block that holds n and is not four times too big stays. */
  if (h->map != 0 && n >= LU_BIG_MIN && HDR + n <= h->map &&
      HDR + n > h->map / 4)
    return user_of(h, n);
  /* Growing a big block that no cached block can take: moved by the
   * kernel (its pages with it), not copied. */
  int ci = h->map != 0 && n > old ? class_of(n + HDR, &size) : -1;
  if (ci >= 0) {
    int cached;
    pthread_mutex_lock(&big_mu);
    cached = big_free[ci] != NULL;
    pthread_mutex_unlock(&big_mu);
    if (!cached) {
      size_t omap = h->map;
      void *m;
      BIG_UNPOISON(h, omap);
      m = mremap(h, omap, size, MREMAP_MAYMOVE);
      if (m == MAP_FAILED) {
        user_of(h, old);
        return NULL;
      }
      nh = m;
      nh->map = size;
      pthread_mutex_lock(&big_mu);
      big_st.mapped += size - omap;
      pthread_mutex_unlock(&big_mu);
      return user_of(nh, n);
    }
  }
  if ((p = lu_big_alloc(n)) == NULL)
    return NULL;
  memcpy(p, (char *)h + HDR, old < n ? old : n);
  lu_big_free((char *)h + HDR);
  return p;
}

void lu_big_set_limit(size_t bytes) {
  hdr_t *drop = NULL, *h;
  pthread_mutex_lock(&big_mu);
  big_st.limit = bytes;
  for (int ci = NCLASS - 1; ci >= 0 && big_st.cached > bytes; ci--) {
    while ((h = big_free[ci]) != NULL && big_st.cached > bytes) {
      BIG_UNPOISON(h, HDR);
      big_free[ci] = h->u.next;
      big_st.cached -= h->map;
      big_st.blocks--;
      big_st.mapped -= h->map;
      big_st.unmaps++;
      h->u.next = drop;
      drop = h;
    }
  }
  pthread_mutex_unlock(&big_mu);
  while ((h = drop) != NULL) {
    drop = h->u.next;
    unmap_block(h, h->map);
  }
}

void lu_big_stats(lu_big_stats_t *st) {
  pthread_mutex_lock(&big_mu);
  *st = big_st;
  pthread_mutex_unlock(&big_mu);
}
