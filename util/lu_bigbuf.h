/* lu_bigbuf.h - an allocator for big buffers (a quarter of a MiB and more)
 * that keeps a bounded number of freed blocks mapped and touched, for the
 * rendezvous server's input buffers, replies, stored values, watch events
 * and key arrays. Prefix lu_big_.
 *
 * Why: glibc maps each allocation of this size on its own and unmaps it
 * when freed, so every big buffer costs page faults on fresh memory (three
 * quarters of the time of a copy into it) and an munmap, which holds the
 * process's mmap lock for writing while every other thread's page fault
 * waits. A block freed here goes back to a cache of its size class while
 * the cache holds less than its bound; the next allocation of that class
 * takes it, already faulted in.
 *
 * Every pointer from lu_big_alloc/lu_big_realloc is freed with lu_big_free
 * (never free(); ASan reports a mismatch), whatever its size: small ones
 * are malloc'd with a header. Thread-safe. The cache is empty (blocks are
 * unmapped when freed) until lu_big_set_limit() gives it a bound. */
#ifndef LU_BIGBUF_H
#define LU_BIGBUF_H

#include <stddef.h>

/* Requests from this size on are served from size classes. */
#define LU_BIG_MIN ((size_t)256 << 10)

void *lu_big_alloc(size_t n);
/* Like realloc(p, n): the first min(old, n) bytes are kept. p may be NULL. */
void *lu_big_realloc(void *p, size_t n);
void lu_big_free(void *p); /* p may be NULL */

/* Bytes the cache may keep (the sizes of its classes' blocks); freed blocks
 * that would pass it are unmapped. A smaller bound releases the excess at
 * once; 0 empties the cache. */
void lu_big_set_limit(size_t bytes);

typedef struct lu_big_stats_s {
  size_t limit;     /* the bound */
  size_t cached;    /* bytes of blocks in the cache */
  size_t blocks;    /* blocks in the cache */
  size_t mapped;    /* bytes of big blocks in use or cached */
  size_t hits;      /* allocations served from the cache */
  size_t maps;      /* blocks mapped */
  size_t unmaps;    /* blocks unmapped */
} lu_big_stats_t;

void lu_big_stats(lu_big_stats_t *st);
/* The size class (bytes mapped) that holds an allocation of n bytes, or 0
 * when n is below LU_BIG_MIN. */
size_t lu_big_class_size(size_t n);

#endif
