/* srv_mem.c - what the rendezvous server holds, counted against
 * --max-memory, and the cache of big buffers.
 *
 * Memory: everything a client can make the server hold is counted against
 * cfg.max_memory (docs/protocol.md#limits): a fixed cost per connection
 * (which reserves a small input buffer and a small reply), per job, the
 * stores of all jobs (half of it at most), unfinished requests beyond the
 * reserve (--max-input-bytes) and unsent replies beyond the reserve. A
 * reply is counted before it is built: when it does not fit, the request
 * stays unread in the buffer and the connection is paused until its
 * replies drained or memory was freed. */

#include "lu_bigbuf.h"
#include "srv_int.h"


/* ---- memory ------------------------------------------------------------------------ */

size_t srv__mem_used(const srv_t *s) {
  return s->mem.conns + s->mem.jobs + s->mem.in + s->mem.out +
         s->mem.store.used;
}

/* max_memory is shared out so that no kind of use can starve another:
 * - a sixteenth (8 MiB at most) stays free for the request being decoded
 *   (up to --max-frame bytes of msgpack objects and key lists), which
 *   lives only while it runs;
 * - a quarter is kept for connections and jobs, whether they use it or
 *   not: unread replies filling memory never lock new agents out;
 * - the rest holds the stores (half of max_memory at most, so that full
 *   stores leave room for replies), unfinished requests (--max-input-bytes)
 *   and unsent replies. */
static size_t fixed_share(const srv_t *s) { return s->cfg.max_memory / 4; }

static size_t dynamic_limit(const srv_t *s) {
  return s->cfg.max_memory -
         LU_MIN(s->cfg.max_memory / 16, (size_t)8 << 20) - fixed_share(s);
}

/* Room left for stores, input and output. */
size_t srv__mem_free(const srv_t *s) {
  size_t u = s->mem.in + s->mem.out + s->mem.store.used;
  return u < dynamic_limit(s) ? dynamic_limit(s) - u : 0;
}

/* Stores and unsent replies leave an eighth of the rest to requests being
 * received: a half-read request waiting for memory that full stores or
 * replies nobody reads hold would wait for ever when the only other
 * holders are paused readers (whose clients may wait for that request's
 * answer before they read). */
static size_t in_share(const srv_t *s) {
  return LU_MIN(s->cfg.max_in_bytes, dynamic_limit(s) / 8);
}

/* Room left for replies: srv__mem_free less what input may still take of its
 * share. */
size_t srv__mem_free_out(const srv_t *s) {
  size_t u = LU_MAX(s->mem.in, in_share(s)) + s->mem.out + s->mem.store.used;
  return u < dynamic_limit(s) ? dynamic_limit(s) - u : 0;
}

/* Freed big buffers kept warm for reuse (lu_big_*): an eighth of
 * max_memory, cfg.big_cache_mb at most (16 MiB; 0: no cache, for tests
 * that measure what the server keeps: LAUNCH_SERVER_BIG_CACHE_MB), and never more than the room left, so
 * that what the server holds, cached blocks included, stays within its
 * budget. One bound for the process (the last server to update it sets
 * it). */
static void big_cache_update(const srv_t *s) {
  lu_big_set_limit(LU_MIN(LU_MIN((size_t)s->cfg.big_cache_mb << 20,
                                 s->cfg.max_memory / 8),
                          srv__mem_free(s)));
}

void srv__mem_update(srv_t *s) {
  size_t others = LU_MAX(s->mem.in, in_share(s)) + s->mem.out;
  size_t left = others < dynamic_limit(s) ? dynamic_limit(s) - others : 0;
  s->mem.store.max = LU_MIN(s->cfg.max_memory / 2, left);
  big_cache_update(s);
  s->stats.mem_used = srv__mem_used(s);
  s->stats.in_bytes = s->mem.in;
}

int srv__mem_fixed_room(const srv_t *s, size_t cost) {
  return s->mem.conns + s->mem.jobs + cost <= fixed_share(s);
}

int srv__mem_job_charge(srv_t *s, size_t n) {
  if (!srv__mem_fixed_room(s, n))
    return -1;
  s->mem.jobs += n;
  srv__mem_update(s);
  return 0;
}

void srv__mem_job_release(srv_t *s, size_t n) {
  s->mem.jobs -= n;
  srv__mem_update(s);
}
