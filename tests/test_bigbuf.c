/* test_bigbuf.c - the server's cache of big blocks (util/bigbuf.c): a freed
 * block is reused, still mapped and touched, by the next allocation of its
 * class; the cache never holds more than its bound and what would pass it
 * is unmapped; realloc keeps the contents on every path (small to big, a
 * move by the kernel, a copy into a cached block, back to small); threads
 * share it (run under TSan in CI). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lu_bigbuf.h"
#include "test.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static void fill(void *p, size_t n, unsigned seed) {
  uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    b[i] = (uint8_t)(seed + i * 7 + (i >> 12));
}

static int same(const void *p, size_t n, unsigned seed) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != (uint8_t)(seed + i * 7 + (i >> 12)))
      return 0;
  return 1;
}

static uintptr_t page_of(const void *p) {
  return (uintptr_t)p & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
}

/* 1: the page holding p is mapped and resident; 0: mapped, not resident;
 * -1: not mapped at all. */
static int resident(const void *p) {
  unsigned char v = 0;
  if (mincore((void *)page_of(p), 1, &v) != 0)
    return errno == ENOMEM ? -1 : 0;
  return v & 1;
}

static void test_classes(void) {
  size_t sizes[] = {LU_BIG_MIN, LU_BIG_MIN + 1, 300 * KiB, MiB - 16, MiB,
                    MiB + 1, 2 * MiB, 3 * MiB + 5, 8 * MiB, 100 * MiB};
  ASSERT_EQ(lu_big_class_size(LU_BIG_MIN - 1), 0);
  ASSERT_EQ(lu_big_class_size(1000), 0);
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    size_t n = sizes[i], c = lu_big_class_size(n);
    if (c < n + 16 || c > n + n / 4 + 64 * KiB)
      TEST_FAIL("class of %zu bytes is %zu: not within a quarter", n, c);
    if (c % 4096 != 0)
      TEST_FAIL("class of %zu bytes is %zu: not whole pages", n, c);
  }
  /* One class for sizes close together, so that they share blocks. */
  ASSERT_EQ(lu_big_class_size(MiB - 200), lu_big_class_size(MiB - 100));
}

static void test_reuse(void) {
  lu_big_stats_t a, b;
  size_t cls = lu_big_class_size(MiB);
  uint8_t *p, *q;
  lu_big_set_limit(16 * MiB);
  lu_big_stats(&a);
  ASSERT_EQ(a.cached, 0);
  p = lu_big_alloc(MiB);
  ASSERT(p != NULL);
  fill(p, MiB, 1);
  lu_big_free(p);
  lu_big_stats(&b);
  ASSERT_EQ(b.cached, cls);
  ASSERT_EQ(b.blocks, 1);
  ASSERT_EQ(b.unmaps, a.unmaps);
  /* Still mapped and its pages still there: the next user faults none. */
  ASSERT_EQ(resident(p + MiB / 2), 1);
  q = lu_big_alloc(MiB + 1000); /* the same class */
  ASSERT(q == p);
  lu_big_stats(&b);
  ASSERT_EQ(b.hits, a.hits + 1);
  ASSERT_EQ(b.cached, 0);
  ASSERT_EQ(b.maps, a.maps + 1); /* the first allocation only */
  /* Another class does not take it. */
  lu_big_free(q);
  q = lu_big_alloc(4 * MiB);
  ASSERT(q != NULL && q != p);
  lu_big_free(q);
  lu_big_set_limit(0);
  lu_big_stats(&b);
  ASSERT_EQ(b.cached, 0);
  ASSERT_EQ(b.blocks, 0);
  ASSERT_EQ(b.mapped, 0);
  ASSERT_EQ(resident(p), -1); /* emptied: unmapped */
}

static void test_bound(void) {
  enum { N = 6 };
  size_t cls = lu_big_class_size(MiB);
  uint8_t *p[N];
  lu_big_stats_t a, b;
  lu_big_set_limit(3 * cls + cls / 2); /* room for three blocks */
  lu_big_stats(&a);
  for (int i = 0; i < N; i++) {
    ASSERT((p[i] = lu_big_alloc(MiB)) != NULL);
    fill(p[i], MiB, (unsigned)i);
  }
  for (int i = 0; i < N; i++) {
    lu_big_free(p[i]);
    lu_big_stats(&b);
    if (b.cached > b.limit)
      TEST_FAIL("%zu bytes cached over the bound of %zu", b.cached, b.limit);
    /* Past the bound a freed block is given back at once. */
    if (i >= 3)
      ASSERT_EQ(resident(p[i]), -1);
    else
      ASSERT_EQ(resident(p[i]), 1);
  }
  ASSERT_EQ(b.blocks, 3);
  ASSERT_EQ(b.cached, 3 * cls);
  ASSERT_EQ(b.unmaps, a.unmaps + N - 3);
  ASSERT_EQ(b.mapped, b.cached); /* nothing in use */
  /* A lower bound gives back the excess at once. */
  lu_big_set_limit(cls);
  lu_big_stats(&b);
  ASSERT_EQ(b.blocks, 1);
  ASSERT_EQ(b.cached, cls);
  ASSERT_EQ(b.mapped, cls);
  /* A block larger than the bound is never kept. */
  p[0] = lu_big_alloc(8 * MiB);
  ASSERT(p[0] != NULL);
  lu_big_free(p[0]);
  lu_big_stats(&b);
  ASSERT_EQ(b.cached, cls);
  lu_big_set_limit(0);
}

static void test_realloc(void) {
  size_t n = 1000;
  uint8_t *p = lu_big_alloc(n), *q;
  lu_big_set_limit(16 * MiB);
  ASSERT(p != NULL);
  fill(p, n, 9);
  /* small to small, small to big */
  ASSERT((p = lu_big_realloc(p, 100 * KiB)) != NULL);
  ASSERT(same(p, n, 9));
  fill(p, 100 * KiB, 10);
  ASSERT((p = lu_big_realloc(p, 600 * KiB)) != NULL);
  ASSERT(same(p, 100 * KiB, 10));
  fill(p, 600 * KiB, 11);
  /* big to bigger, nothing cached: moved by the kernel */
  ASSERT((p = lu_big_realloc(p, 5 * MiB)) != NULL);
  ASSERT(same(p, 600 * KiB, 11));
  fill(p, 5 * MiB, 12);
  /* big to bigger with a block of that class cached: copied into it */
  q = lu_big_alloc(9 * MiB);
  ASSERT(q != NULL);
  lu_big_free(q);
  ASSERT((p = lu_big_realloc(p, 9 * MiB)) == q);
  ASSERT(same(p, 5 * MiB, 12));
  fill(p, 9 * MiB, 13);
  /* within its block: stays */
  ASSERT((q = lu_big_realloc(p, 9 * MiB - 4096)) == p);
  ASSERT(same(p, 9 * MiB - 4096, 13));
  /* much smaller, then small: moved, contents kept */
  ASSERT((p = lu_big_realloc(p, MiB)) != NULL);
  ASSERT(same(p, MiB, 13));
  ASSERT((p = lu_big_realloc(p, 10 * KiB)) != NULL);
  ASSERT(same(p, 10 * KiB, 13));
  lu_big_free(p);
  lu_big_free(NULL);
  ASSERT((p = lu_big_realloc(NULL, 300 * KiB)) != NULL);
  lu_big_free(p);
  lu_big_set_limit(0);
}

/* Threads allocating, growing and freeing blocks of a few classes at once,
 * each checking that no other thread wrote into its blocks. */
#define THREADS 4
#define ROUNDS 300

static void *worker(void *arg) {
  unsigned id = (unsigned)(uintptr_t)arg, r = id * 2654435761u;
  static const size_t sizes[] = {4 * KiB, 300 * KiB, MiB, 3 * MiB};
  for (int i = 0; i < ROUNDS; i++) {
    size_t n, m;
    uint8_t *p;
    r = r * 1103515245u + 12345u;
    n = sizes[(r >> 8) % 4];
    m = sizes[(r >> 12) % 4];
    if ((p = lu_big_alloc(n)) == NULL)
      return (void *)1;
    fill(p, n, id + (unsigned)i);
    if ((p = lu_big_realloc(p, m)) == NULL)
      return (void *)1;
    if (!same(p, n < m ? n : m, id + (unsigned)i))
      return (void *)2;
    lu_big_free(p);
  }
  return NULL;
}

static void test_threads(void) {
  pthread_t t[THREADS];
  lu_big_stats_t st;
  lu_big_set_limit(8 * MiB);
  for (uintptr_t i = 0; i < THREADS; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, worker, (void *)i), 0);
  for (int i = 0; i < THREADS; i++) {
    void *rv;
    ASSERT_EQ(pthread_join(t[i], &rv), 0);
    if (rv != NULL)
      TEST_FAIL("thread %d: %s", i,
                rv == (void *)1 ? "out of memory" : "its block was changed");
  }
  lu_big_stats(&st);
  if (st.cached > 8 * MiB)
    TEST_FAIL("%zu bytes cached over the bound of 8 MiB", st.cached);
  ASSERT_EQ(st.mapped, st.cached);
  ASSERT(st.hits > 0);
  lu_big_set_limit(0);
  lu_big_stats(&st);
  ASSERT_EQ(st.mapped, 0);
}

int main(void) {
  test_classes();
  test_reuse();
  test_bound();
  test_realloc();
  test_threads();
  printf("test_bigbuf: ok\n");
  return 0;
}
