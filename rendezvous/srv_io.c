/* srv_io.c - a connection's output (replies, pushes, writes) and input
 * (reads, TLS, sniffing, running its requests), and the loops' passes
 * that run them. Moved out of server.c (issue #25). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lu_bigbuf.h"
#include "rounds.h"
#include "srv_int.h"


#define IN_CHUNK 1024         /* first read buffer; doubles as frames need */
#define OUT_FLUSH_NOW (64u << 10) /* hand this much output to the kernel at once */
#define TLS_IN_MAX (128u << 10) /* ciphertext not yet decrypted */
/* A connection runs its requests for cfg.turn_us at most (500 us), then
 * the others get their turn: a client that pipelines thousands of large
 * requests must not hold up one that sends a small one. With several
 * loops sharing one lock, a loop may wait for the others' turns one after
 * another: 0.5 ms (it was 2 ms) keeps their sum short. */
#define TURN_NS(s) ((uint64_t)(s)->cfg.turn_us * 1000u)
/* A loop's pass runs the large requests (and the connections resumed) for
 * cfg.pass_us (1 ms), or one piece, after the small ones: the rest waits
 * for the next pass, after the poll has read what came meanwhile. A small
 * request waits for one pass's large work on its loop at most. These and
 * the lock's knobs (cfg.lock_plain: no hungry waiters; cfg.lock_spins:
 * pause-spins before a waiter sleeps) are rows of `launch server
 * --help-debug` (LAUNCH_SERVER_*), for benchmarks that compare. */
#define PASS_NS(s) ((uint64_t)(s)->cfg.pass_us * 1000u)
/* What a connection has read is small: its requests run first. */
#define SMALL_IN (4u << 10)

static void conn_process(conn_t *c);
static void conn_run_read(conn_t *c);
static void conn_input(conn_t *c);
static int flush_conn(conn_t *c, int may_close);

/* ---- output -------------------------------------------------------------------------- */

typedef struct wreq_s {
  uv_write_t req;
  conn_t *c;
  char *base; /* freed after the write */
  size_t len;
} wreq_t;

static void mark_dirty(conn_t *c) {
  if (c->state == CONN_CLOSING || !list_empty(&c->dirty_link))
    return;
  list_insert_tail(&c->lp->dirty, &c->dirty_link);
  srv__wake_loop(c->lp);
}

static size_t conn_unsent(const conn_t *c) {
  return c->out.len + c->inflight + c->out_deferred;
}

/* Count the connection's unsent bytes beyond its reserve. */
static void out_account(conn_t *c) {
  srv_t *s = c->srv;
  size_t u = conn_unsent(c);
  size_t charge = u > SRV_OUT_RESERVE ? u - SRV_OUT_RESERVE : 0;
  size_t old = c->out_charged;
  /* A closing connection gave its charge back when it was torn down. */
  if (charge == old || c->state == CONN_CLOSING)
    return;
  s->mem.out = s->mem.out - old + charge;
  c->out_charged = charge;
  if (charge < old)
    srv__mem_released(s);
  else
    srv__mem_update(s);
}

static void conn_pause(conn_t *c, int memwait) {
  srv_t *s = c->srv;
  if (!c->paused) {
    c->paused = 1;
    s->stats.paused++;
  }
  if (c->reading && srv__lp_here(c->lp)) {
    uv_read_stop(&c->h.stream);
    c->reading = 0;
  } else if (c->reading) {
    mark_dirty(c); /* its loop stops reading */
  }
  if (memwait && list_empty(&c->memwait_link) &&
      list_empty(&c->resume_link))
    list_insert_tail(&s->memwait, &c->memwait_link);
}

static void conn_schedule_resume(conn_t *c) {
  if (c->state == CONN_CLOSING)
    return;
  list_unlink(&c->memwait_link);
  if (list_empty(&c->resume_link))
    list_insert_tail(&c->lp->resume, &c->resume_link);
  srv__wake_loop(c->lp);
}

void srv__defer(conn_t *c) {
  out_account(c);
  conn_pause(c, 0);
  conn_schedule_resume(c);
}

int srv__conn_paused(conn_t *c) {
  if (!c->paused && conn_unsent(c) >= c->srv->cfg.max_out_bytes)
    conn_pause(c, 0);
  if (!c->paused && uv_hrtime() > c->lp->turn_end) {
    /* Its turn is over: go on after the others, in this loop's check. */
    conn_pause(c, 0);
    conn_schedule_resume(c);
  }
  return c->paused;
}

void srv__conn_yield(conn_t *c) {
  if (!c->paused) {
    conn_pause(c, 0);
    conn_schedule_resume(c);
  }
}

int srv__out_room(conn_t *c, size_t n) {
  srv_t *s = c->srv;
  size_t u = conn_unsent(c);
  size_t need;
  if (n > s->cfg.max_out_bytes)
    return SRV_ROOM_NEVER;
  if (u + n <= SRV_OUT_RESERVE)
    return SRV_ROOM_OK;
  if (u + n > s->cfg.max_out_bytes) {
    conn_pause(c, 0); /* resumes as its replies drain */
    return SRV_ROOM_LATER;
  }
  need = u + n - SRV_OUT_RESERVE - c->out_charged;
  if (need > srv__mem_free_out(s)) {
    /* Its own replies draining frees memory too. */
    conn_pause(c, 1);
    return SRV_ROOM_LATER;
  }
  return SRV_ROOM_OK;
}

int srv__push_room(conn_t *c, size_t n) {
  srv_t *s = c->srv;
  size_t u = conn_unsent(c);
  if (c->broken || c->state == CONN_CLOSING)
    return 0;
  if (u + n <= SRV_OUT_RESERVE)
    return 1;
  if (u + n > s->cfg.max_out_bytes ||
      u + n - SRV_OUT_RESERVE - c->out_charged > srv__mem_free_out(s)) {
    srv__bad_input(c, "does not read its events: %zu bytes unsent and %zu "
                      "more to send, over %s; closing", u, n,
                   u + n > s->cfg.max_out_bytes
                       ? "what one connection may hold (--max-out-bytes)"
                       : "the server's memory (--max-memory)");
    c->broken = 1;
    mark_dirty(c);
    return 0;
  }
  return 1;
}

/* After output was queued: count it, and hand a large amount to the kernel
 * at once so that a reader is never charged for what it reads anyway. */
static void out_queued(conn_t *c) {
  mark_dirty(c);
  if (c->out.len >= OUT_FLUSH_NOW && c->inflight == 0 && srv__lp_here(c->lp))
    flush_conn(c, 0);
  else
    out_account(c);
}

void srv__reply_begin(conn_t *c, uint64_t id, int status, uint32_t nres) {
  proto_enc_begin_msg(&c->out, nres, PROTO_REPLY, id, status);
}

void srv__push_begin(conn_t *c, int ev, uint32_t nargs) {
  proto_enc_begin_msg(&c->out, nargs, PROTO_PUSH, 0, ev);
}

void srv__reply_end(conn_t *c) {
  if (proto_enc_end(&c->out) != 0)
    c->broken = 1;
  out_queued(c);
}

void srv__reply_ok(conn_t *c, uint64_t id) {
  srv__reply_begin(c, id, 0, 0);
  srv__reply_end(c);
}

void srv__reply_err(conn_t *c, uint64_t id, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  srv__reply_begin(c, id, status, 1);
  proto_pack_str(&c->out.pk, msg);
  srv__reply_end(c);
}

void srv__out_raw(conn_t *c, const void *p, size_t n) {
  if (c->state == CONN_CLOSING)
    return;
  if (proto_enc_raw(&c->out, p, n) != 0)
    c->broken = 1;
  out_queued(c);
}

/* A connection's output buffer: from the cache of big blocks, as every
 * buffer a write frees (write_out, the loops' batched writes). */
void srv__out_init(proto_enc_t *o) {
  proto_enc_init_alloc(o, lu_big_realloc, lu_big_free);
}

/* DONE bytes of c's output were handed to the kernel, or could not be
 * (FAILED): the accounting, and what waited for it (lock held). */
static void conn_wrote(conn_t *c, size_t done, int failed) {
  c->inflight -= done;
  if (c->state == CONN_CLOSING)
    return;
  if (failed) {
    srv__conn_close(c);
    return;
  }
  out_account(c);
  if (c->close_after_flush && conn_unsent(c) == 0) {
    srv__conn_close(c);
    return;
  }
  /* Paused (perhaps by another loop) while this output counted. */
  if (c->paused && conn_unsent(c) <= c->srv->cfg.max_out_bytes / 2)
    conn_schedule_resume(c);
}

/* Without the lock: a completed write's bytes are counted by the loop's
 * pass (loop_written), which holds it anyway. Taking it here made the
 * loop's poll wait for another loop's piece of large work once per
 * completed write, and a small request read in that poll with it. */
static void write_cb(uv_write_t *req, int status) {
  wreq_t *w = (wreq_t *)req;
  conn_t *c = w->c;
  c->written += w->len;
  if (status < 0)
    c->write_failed = 1;
  if (list_empty(&c->written_link))
    list_insert_tail(&c->lp->writtenq, &c->written_link);
  lu_big_free(w->base);
  free(w);
}

static void loop_written(srv_loop_t *lp) {
  while (!list_empty(&lp->writtenq)) {
    conn_t *c = LIST_ENTRY(lp->writtenq.next, conn_t, written_link);
    size_t done = c->written;
    list_remove(&c->written_link);
    c->written = 0;
    conn_wrote(c, done, c->write_failed);
  }
}

/* Write base[off..len) (base is freed once written). RET 0 or -1. */
static int write_out(conn_t *c, char *base, size_t off, size_t len) {
  wreq_t *w;
  uv_buf_t b;
  if (c->inflight == 0) {
    int r;
    b = uv_buf_init(base + off, (unsigned)(len - off));
    r = uv_try_write(&c->h.stream, &b, 1);
    if (r > 0)
      off += (size_t)r;
    else if (r < 0 && r != UV_EAGAIN) {
      lu_big_free(base);
      return -1;
    }
  }
  if (off == len) {
    lu_big_free(base);
    return 0;
  }
  if ((w = malloc(sizeof(*w))) == NULL) {
    lu_big_free(base);
    return -1;
  }
  w->c = c;
  w->base = base;
  w->len = len - off;
  b = uv_buf_init(base + off, (unsigned)(len - off));
  if (uv_write(&w->req, &c->h.stream, &b, 1, write_cb) != 0) {
    lu_big_free(base);
    free(w);
    return -1;
  }
  c->inflight += w->len;
  return 0;
}

/* Hand what is queued to the kernel (or a write request). may_close: 0
 * inside handlers and store callbacks, where a failure only marks the
 * connection for the next flush. RET 0, or -1 when it is closed/broken. */
static int flush_conn(conn_t *c, int may_close) {
  proto_enc_t *o = &c->out;
  int rc = 0;
  if (c->state == CONN_CLOSING)
    return -1;
  if (c->broken)
    goto fail;
  if (c->tls) {
    char *ct;
    size_t n;
    if (o->len > 0 && tls_write(c->tls, o->data, o->len) != 0)
      goto fail;
    proto_enc_reset(o);
    if (tls_take_alloc(c->tls, &ct, &n, lu_big_alloc, lu_big_free) != 0 ||
        (n && write_out(c, ct, 0, n)))
      goto fail;
  } else if (o->len > 0) {
    /* The write owns the buffer; the next replies start a fresh one. */
    char *base = o->data;
    size_t len = o->len;
    o->data = NULL;
    o->len = o->cap = 0;
    if (write_out(c, base, 0, len) != 0)
      goto fail;
  }
  if (o->cap > SRV_OUT_RESERVE) {
    proto_enc_destroy(o);
    srv__out_init(o);
  }
  out_account(c);
  if (c->close_after_flush && conn_unsent(c) == 0 && may_close)
    srv__conn_close(c);
  return rc;
fail:
  if (may_close) {
    if (c->broken)
      srv__bad_input(c, "could not queue a reply; closing");
    srv__conn_close(c);
  } else {
    c->broken = 1;
    mark_dirty(c);
  }
  return -1;
}

static void conn_resume(conn_t *c);

/* Output taken from a connection to be written outside the lock. */
typedef struct wout_s {
  conn_t *c;
  char *base;
  size_t len, queued;
  int failed;
} wout_t;

/* Connections accepted on loop 0 for this loop: make their handles. */
void srv__adopt_incoming(srv_loop_t *lp) {
  srv_t *s = lp->srv;
  while (!list_empty(&lp->incoming)) {
    conn_t *c = LIST_ENTRY(lp->incoming.next, conn_t, io_link);
    list_remove(&c->io_link);
    if (c->state == CONN_CLOSING) {
      /* Closed on its way here (srv__conn_close counted it). */
      close(c->fd);
      s->closing_conns--;
      srv__conn_free(c);
      continue;
    }
    uv_tcp_init(lp->loop, &c->h.tcp);
    c->h.handle.data = c;
    c->handle_ready = 1;
    if (uv_tcp_open(&c->h.tcp, c->fd) != 0) {
      close(c->fd);
      srv__conn_close(c);
      continue;
    }
    uv_tcp_nodelay(&c->h.tcp, 1);
    srv__conn_start_read(c);
  }
}

/* Has c a large request to decode ahead (only its loop's thread touches a
 * connection's input)? */
static int conn_prepare_due(conn_t *c) {
  return c->dialect != NULL && c->dialect->prepare_due != NULL &&
         c->tls == NULL && c->in_len >= PROTO_HDR && c->dialect->prepare_due(c);
}

/* Read a few KiB at most, nothing to decode ahead: run first. */
static int conn_small(conn_t *c) {
  return c->in_len <= SMALL_IN && !conn_prepare_due(c);
}

/* When due, decode a slice of it as far as it came, before the loop
 * takes the lock (the dialect's prepare); RET 1 when more is due. */
static int conn_prepare(srv_t *s, conn_t *c) {
  if (!conn_prepare_due(c))
    return 0;
  srv__trace_begin(s, "prepare", c);
  c->dialect->prepare(c);
  srv__trace_end(s);
  return conn_prepare_due(c);
}

/* The native dialect waits for the rest of a request's decoding ahead:
 * the loop's next passes decode it, before their lock (the connection
 * was yielded: its work resumes after that). */
void srv__prepare_later(conn_t *c) {
  if (list_empty(&c->prep_link))
    list_insert_tail(&c->lp->prepq, &c->prep_link);
}

/* Before the pass takes the lock: a slice of decoding ahead for each
 * large request read, and for each that waits for more (only this thread
 * touches their input). */
static void loop_prepare(srv_t *s, srv_loop_t *lp, list_t *big) {
  for (list_t *it = big->next; it != big; it = it->next)
    conn_prepare(s, LIST_ENTRY(it, conn_t, read_link));
  for (list_t *it = lp->prepq.next, *next; it != &lp->prepq; it = next) {
    next = it->next;
    if (!conn_prepare(s, LIST_ENTRY(it, conn_t, prep_link)))
      list_remove(it);
  }
}

/* Hand the replies of the loop's dirty connections to the sockets. With
 * several loops they are written without the lock (held on entry and on
 * return), counted as in flight meanwhile. */
static void loop_flush(srv_loop_t *lp) {
  srv_t *s = lp->srv;
  wout_t *wo = lp->wo;
  size_t nwo = 0, capwo = lp->capwo;
  srv__trace_begin(s, "flush", NULL);
  while (!list_empty(&lp->dirty)) {
    conn_t *c = LIST_ENTRY(lp->dirty.next, conn_t, dirty_link);
    proto_enc_t *o = &c->out;
    list_remove(&c->dirty_link);
    if (c->paused && c->reading) {
      uv_read_stop(&c->h.stream);
      c->reading = 0;
    }
    if (s->nloops == 1 || c->tls || c->broken || c->close_after_flush ||
        o->len == 0) {
      flush_conn(c, 1);
      continue;
    }
    if (nwo == capwo) {
      size_t ncap = capwo ? capwo * 2 : 64;
      wout_t *n = realloc(wo, ncap * sizeof(*n));
      if (n == NULL) {
        flush_conn(c, 1);
        continue;
      }
      lp->wo = wo = n;
      lp->capwo = capwo = ncap;
    }
    /* Counted as in flight until written: the accounting, and the
     * connection's order of replies, hold while the lock is dropped. */
    wo[nwo].c = c;
    wo[nwo].base = o->data;
    wo[nwo].len = o->len;
    wo[nwo].queued = 0;
    wo[nwo].failed = 0;
    nwo++;
    c->inflight += o->len;
    o->data = NULL;
    o->len = o->cap = 0;
  }
  if (nwo == 0) {
    srv__trace_end(s);
    return;
  }
  srv__unlock(s);
  /* Only this thread touches these handles, and only its loop closes
   * them: the connections live until the lock is taken again. */
  for (size_t i = 0; i < nwo; i++) {
    wout_t *w = &wo[i];
    uv_buf_t b = uv_buf_init(w->base, (unsigned)w->len);
    int r = uv_try_write(&w->c->h.stream, &b, 1);
    size_t off = r > 0 ? (size_t)r : 0;
    if (r < 0 && r != UV_EAGAIN) {
      w->failed = 1;
    } else if (off < w->len) {
      wreq_t *q = malloc(sizeof(*q));
      b = uv_buf_init(w->base + off, (unsigned)(w->len - off));
      if (q == NULL) {
        w->failed = 1;
      } else {
        q->c = w->c;
        q->base = w->base;
        q->len = w->len - off;
        if (uv_write(&q->req, &w->c->h.stream, &b, 1, write_cb) != 0) {
          free(q);
          w->failed = 1;
        } else {
          w->queued = q->len; /* write_cb frees base */
        }
      }
    }
    if (w->queued == 0)
      lu_big_free(w->base);
  }
  /* A short hold, that this loop's next poll (and the small requests it
   * reads) waits on. */
  srv__lock_urgent(s);
  for (size_t i = 0; i < nwo; i++)
    conn_wrote(wo[i].c, wo[i].len - wo[i].queued, wo[i].failed);
  srv__trace_end(s);
}

/* A connection's piece of a loop's pass: its input, or the work resumed;
 * then, after a large one, a hungry or urgent loop may take the lock (the
 * small ones of a pass run under one hold: they are short, and many loops
 * full of small requests would otherwise hand the lock to each other
 * after every one). A resumed connection whose whole request waits for
 * its decoding ahead (srv__prepare_later) waits for the next pass, which
 * decodes a slice of it before the lock. Any other resumes now: one whose
 * request has not all come must read on (it did not while paused).
 * RET 1 with the lock held, 0 when the loop gave it up (srv__lock_yield). */
enum { PASS_SMALL, PASS_LARGE, PASS_RESUMED };
static int pass_run(srv_loop_t *lp, conn_t *c, int kind) {
  srv_t *s = lp->srv;
  if (kind == PASS_RESUMED && !list_empty(&c->prep_link)) {
    conn_schedule_resume(c); /* its whole request is in: decoded ahead */
    return 1;
  }
  srv__trace_begin(s, kind == PASS_RESUMED ? "resume" : "read", c);
  if (kind == PASS_RESUMED)
    conn_resume(c);
  else
    conn_input(c);
  srv__trace_end(s);
  return kind == PASS_SMALL || srv__lock_yield(lp);
}

/* A pass that gave up the lock: the loop's next iteration polls without
 * blocking and passes again, also while the server closes (srv__wake_loop
 * does nothing then, and this loop's shutdown waits for a pass). */
static void loop_again(srv_loop_t *lp) {
  if (!uv_is_active((uv_handle_t *)&lp->idle))
    uv_idle_start(&lp->idle, srv__idle_cb);
}

/* Run the loop's lists: its new and closed connections, what loop 0 was
 * asked for, deferred work, then output. With several loops, output is
 * written to the sockets without the lock held. */
void srv__check_cb(uv_check_t *h) {
  srv_loop_t *lp = h->data;
  srv_t *s = lp->srv;
  list_t big;
  uint64_t t0;
  int held = 1;
  /* The requests read in this pass, in the order they came: the small
   * ones first (a few KiB read, nothing to decode ahead), and their
   * replies written before the large ones run, so that a client's small
   * request does not wait behind pieces of an attacker's large ones on
   * its loop (issue #11). Only this thread touches the read queue and the
   * connections' input, so they are sorted before the lock, and a pass
   * with a small request to run waits for it as urgent. */
  list_init(&big);
  for (list_t *it = lp->readq.next, *next; it != &lp->readq; it = next) {
    next = it->next;
    if (!conn_small(LIST_ENTRY(it, conn_t, read_link))) {
      list_remove(it);
      list_insert_tail(&big, it);
    }
  }
  loop_prepare(s, lp, &big);
  if (!list_empty(&lp->readq)) {
    srv__lock_urgent(s);
  } else if (!srv__lock_large(lp)) {
    /* Back to the poll: a small request that comes goes first. */
    list_move_front(&lp->readq, &big);
    loop_again(lp);
    return;
  }
  if (lp->stop) {
    list_move_front(&lp->readq, &big); /* big is this frame's */
    srv__loop_shutdown(lp);
    srv__unlock(s);
    return;
  }
  if (lp->idx == 0) {
    if (s->kick_rearm) {
      s->kick_rearm = 0;
      srv__rearm(s);
    }
    if (s->kick_gc_due) {
      uint64_t due = s->kick_gc_due;
      s->kick_gc_due = 0;
      srv__gc_schedule(s, due);
    }
    if (s->kick_rounds && s->rounds_schedule) {
      s->kick_rounds = 0;
      s->rounds_schedule(s);
    }
  }
  loop_written(lp);
  srv__adopt_incoming(lp);
  while (!list_empty(&lp->closeq)) {
    conn_t *c = LIST_ENTRY(lp->closeq.next, conn_t, io_link);
    list_remove(&c->io_link);
    uv_close(&c->h.handle, srv__on_conn_closed);
  }
  while (!list_empty(&lp->readq)) {
    conn_t *c = LIST_ENTRY(lp->readq.next, conn_t, read_link);
    list_remove(&c->read_link);
    pass_run(lp, c, PASS_SMALL);
  }
  if (!list_empty(&lp->dirty) &&
      (!list_empty(&big) || !list_empty(&lp->resume) ||
       !list_empty(&lp->run)))
    loop_flush(lp);
  /* Then the large ones, and the connections resumed during the last
   * pass, for PASS_NS of work or one piece: what is left runs on the
   * next pass, after the poll has read what came meanwhile. */
  t0 = uv_hrtime();
  while (held && !list_empty(&big) && uv_hrtime() - t0 < PASS_NS(s)) {
    conn_t *c = LIST_ENTRY(big.next, conn_t, read_link);
    list_remove(&c->read_link);
    held = pass_run(lp, c, PASS_LARGE);
  }
  list_move_front(&lp->readq, &big);
  /* The resumed connections left from the last pass, then those resumed
   * since (lp->run keeps its order across passes, and only changes under
   * the lock: another loop may close one of them). */
  if (held) {
    list_move_front(&lp->resume, &lp->run);
    list_move(&lp->run, &lp->resume);
  }
  for (int n = 0; held && !list_empty(&lp->run) &&
                  (n == 0 || uv_hrtime() - t0 < PASS_NS(s));
       n++) {
    conn_t *c = LIST_ENTRY(lp->run.next, conn_t, resume_link);
    list_remove(&c->resume_link);
    held = pass_run(lp, c, PASS_RESUMED);
  }
  if (!held) {
    /* The lock went to another loop (srv__lock_yield): the rest, output
     * included, on the next pass, after the poll. */
    loop_again(lp);
    return;
  }
  loop_flush(lp);
  if (!list_empty(&lp->readq) || !list_empty(&lp->resume) ||
      !list_empty(&lp->run) || !list_empty(&lp->dirty) ||
      !list_empty(&lp->prepq))
    srv__wake_loop(lp); /* no blocking poll before the next pass */
  else
    uv_idle_stop(&lp->idle);
  srv__unlock(s);
}

/* ---- input ------------------------------------------------------------------------- */

/* Room left in the input buffer, grown (by doubling) when a request needs
 * more: up to a HELLO-sized frame before authentication, a whole request
 * after. Growth past the reserve counts against --max-input-bytes (when
 * that cannot take it, in_full is set: the connection is closed) and
 * --max-memory (when that cannot, in_memwait: it waits for memory). */
static size_t in_room(conn_t *c) {
  srv_t *s = c->srv;
  size_t limit = c->state == CONN_READY
                     ? (size_t)s->cfg.max_frame + 64
                     : SRV_HELLO_MAX_FRAME + PROTO_HDR + PROTO_MAGIC_LEN;
  if ((c->in_cap - c->in_len < IN_CHUNK || c->in_need > c->in_cap) &&
      c->in_cap < limit) {
    size_t ncap = c->in_cap ? c->in_cap * 2 : IN_CHUNK;
    /* A large request of known size gets a buffer of its size at once:
     * no doublings, nothing unused (which srv__in_take needs). A bound
     * that grows a little at a time (a TCPStore list) doubles. */
    if (c->in_need > ncap)
      ncap = c->in_need;
    size_t charge, add;
    uint8_t *nb;
    if (ncap > limit)
      ncap = limit;
    charge = ncap > SRV_IN_RESERVE ? ncap - SRV_IN_RESERVE : 0;
    add = charge - c->in_charged;
    /* All connections together may buffer max_in_bytes of unfinished
     * requests beyond their reserves; past that, a connection cannot grow
     * (and is closed), so that stalled half-sent requests cannot exhaust
     * memory. */
    c->in_memwait = 0;
    if (add > 0 && s->mem.in + add > s->cfg.max_in_bytes) {
      c->in_full = 1;
    } else if (add > 0 && add > srv__mem_free(s)) {
      c->in_memwait = 1;
    } else if ((nb = lu_big_realloc(c->in, ncap)) != NULL) {
      c->in = nb;
      c->in_cap = ncap;
      s->mem.in += add;
      c->in_charged = charge;
      srv__mem_update(s);
    }
  }
  return c->in_cap - c->in_len;
}

void srv__in_release(conn_t *c) {
  srv_t *s = c->srv;
  s->mem.in -= c->in_charged;
  c->in_charged = 0;
  lu_big_free(c->in);
  c->in = NULL;
  c->in_cap = c->in_len = 0;
}

/* The input's first cut bytes went: the dialect's decoding ahead follows. */
static void conn_pre_shift(conn_t *c, size_t cut) {
  if (c->dialect != NULL && c->dialect->pre_shift != NULL)
    c->dialect->pre_shift(c, cut);
}

#define TAKE_MIN (256u << 10)  /* values this large are taken, not copied */
#define TAKE_TAIL (64u << 10)  /* bytes after the request copied at most */

uint8_t *srv__in_take(conn_t *c, const uint8_t *val, size_t n,
                      const uint8_t *end, size_t *cost) {
  srv_t *s = c->srv;
  uint8_t *buf = c->in, *nb = NULL;
  size_t tail, ncap = 0, charge = 0;
  if (n < TAKE_MIN || buf == NULL || val < buf || end < val + n ||
      end > buf + c->in_len)
    return NULL;
  /* What the buffer holds besides the value counts with it: a sixteenth
   * more at most (buffers sized by in_need hold the request only). */
  if (c->in_cap - n > n / 16)
    return NULL;
  tail = (size_t)(buf + c->in_len - end);
  if (tail > TAKE_TAIL)
    return NULL;
  if (tail > 0) {
    ncap = LU_MAX(tail, (size_t)IN_CHUNK);
    charge = ncap > SRV_IN_RESERVE ? ncap - SRV_IN_RESERVE : 0;
    if ((nb = lu_big_alloc(ncap)) == NULL)
      return NULL;
    memcpy(nb, end, tail);
  }
  conn_pre_shift(c, (size_t)(end - buf));
  /* Counted as input until the request ran (the store's share stays what
   * it was while it decides); conn_process updates the shares after. */
  s->mem.in = s->mem.in - c->in_charged + charge;
  *cost = c->in_cap;
  c->in = nb;
  c->in_cap = ncap;
  c->in_len = tail;
  c->in_charged = charge;
  c->in_need = 0;
  c->in_moved = 1;
  return buf;
}

void srv__in_spent(conn_t *c, uint8_t *buf) {
  lu_big_free(c->in_spent); /* one a request; none is left over */
  c->in_spent = buf;
}

int srv__store_set(conn_t *c, const void *key, size_t klen, const void *val,
                   size_t vlen) {
  store_t *st = c->job->store;
  size_t cost, old = 0, grow;
  uint8_t *buf = NULL;
  int rc;
  /* Not when the store has no room for it (a full store refuses SET after
   * SET): the connection keeps its buffer, warm, for the next request. A
   * value that replaces another needs room for the difference only (a
   * near-full store's 1 MiB SET over 1 MiB was copied, on fresh pages). */
  if (c->req_end != NULL && vlen >= TAKE_MIN) {
    if (store_get(st, key, klen, &old) == NULL)
      old = 0;
    grow = vlen > old ? vlen - old : 0;
    if (store_charge(st, grow) == 0) {
      store_uncharge(st, grow);
      buf = srv__in_take(c, val, vlen, c->req_end, &cost);
    }
  }
  if (buf == NULL)
    return store_set(st, key, klen, val, vlen);
  /* The key lies in buf too: still there while the store copies it. */
  rc = store_set_owned(st, key, klen, buf, cost, val, vlen);
  if (rc == 0)
    return 0;
  /* The buffer's few bytes past the value may be what did not fit. */
  if (rc == RDZV_ETOOBIG)
    rc = store_set(st, key, klen, val, vlen);
  lu_big_free(buf); /* the request is over either way */
  return rc;
}

/* The input buffer cannot take the next request. */
static void in_exhausted(conn_t *c) {
  srv_t *s = c->srv;
  if (c->in_full) {
    srv__bad_input(c, "server input budget (%zu bytes of unfinished "
                      "requests, --max-input-bytes) exhausted; closing",
                   s->cfg.max_in_bytes);
    srv__limit_hit(s, SRV_LIMIT_MAX_INPUT_BYTES, s->cfg.max_in_bytes,
                   c->job ? c->job->name : NULL, c->peer, "a request: the "
                   "connection was closed");
  } else if (c->state == CONN_READY) {
    srv__bad_input(c, "request larger than the %u-byte limit",
                   s->cfg.max_frame);
    srv__limit_hit(s, SRV_LIMIT_MAX_FRAME, s->cfg.max_frame,
                   c->job ? c->job->name : NULL, c->peer, "a request of more "
                   "than %u bytes: the connection was closed",
                   s->cfg.max_frame);
  } else {
    srv__bad_input(c, "%zu bytes before authentication, over the %u-byte "
                      "limit of a HELLO; closing",
                   c->in_len, SRV_HELLO_MAX_FRAME);
  }
  srv__conn_close(c);
}

/* A ClientHello while SRV_TLS_HANDSHAKES handshakes run, or
 * SRV_TLS_HANDSHAKES_PER_ADDR from c's address: closed (the client
 * retries), counted and reported under the cap it hit. */
static void tls_refused(conn_t *c) {
  srv_t *s = c->srv;
  int all = s->tls_handshaking >= SRV_TLS_HANDSHAKES;
  int limit = all ? SRV_LIMIT_TLS_HANDSHAKES
                  : SRV_LIMIT_TLS_HANDSHAKES_PER_ADDR;
  unsigned cap = all ? SRV_TLS_HANDSHAKES : SRV_TLS_HANDSHAKES_PER_ADDR;
  srv__bad_input(c, "%u TLS handshakes in progress (%u from this address), "
                    "the server's limit is %u (%u per address): closing "
                    "(retry)", s->tls_handshaking,
                 c->addr ? c->addr->ntls_hs : 0, SRV_TLS_HANDSHAKES,
                 SRV_TLS_HANDSHAKES_PER_ADDR);
  srv__limit_hit(s, limit, cap, NULL, c->peer, "a TLS connection while %u "
                 "handshakes ran%s: it was closed", cap,
                 all ? "" : " from its address");
  srv__conn_close(c);
}

static void alloc_cb(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  conn_t *c = h->data;
  (void)hint;
  if (c->tls) {
    *buf = uv_buf_init((char *)c->lp->tls_rbuf, TLS_RBUF);
    return;
  }
  if (c->in_cap - c->in_len >= IN_CHUNK) {
    /* Room without growing: only this loop's thread writes these. */
    *buf = uv_buf_init((char *)c->in + c->in_len,
                       (unsigned)(c->in_cap - c->in_len));
    return;
  }
  if (!list_empty(&c->read_link)) {
    /* What was read in this pass waits for the check: read into what is
     * left; when nothing is, read_cb (UV_ENOBUFS) leaves it to the check
     * too, and the next poll reads on. Not run here: libuv reads into the
     * buffer and calls read_cb after this returns, even when this stopped
     * reading. */
    *buf = uv_buf_init((char *)c->in + c->in_len,
                       (unsigned)(c->in_cap - c->in_len));
    return;
  }
  srv__trace_begin(c->srv, "grow input", c);
  srv__lock_urgent(c->srv);
  if (in_room(c) == 0)
    *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
  else
    *buf = uv_buf_init((char *)c->in + c->in_len,
                       (unsigned)(c->in_cap - c->in_len));
  srv__unlock(c->srv);
  srv__trace_end(c->srv);
}

/* Hand the peer the alert that says why its handshake failed (best
 * effort: the connection closes right after). */
static void tls_last_words(conn_t *c) {
  char *ct;
  size_t n;
  if (tls_take_alloc(c->tls, &ct, &n, lu_big_alloc, lu_big_free) == 0 &&
      n > 0) {
    uv_buf_t b = uv_buf_init(ct, (unsigned)n);
    uv_try_write(&c->h.stream, &b, 1);
  }
  lu_big_free(ct);
}

/* Decrypt what TLS holds into the input buffer; runs after the buffered
 * requests ran, so a buffer with no room holds part of a request too large
 * for it. RET 0, or -1 when the connection was closed. */
static int tls_pump(conn_t *c) {
  int got = 0;
  for (;;) {
    size_t room = in_room(c);
    ssize_t r;
    if (room == 0) {
      if (got)
        break;
      if (c->in_memwait) {
        conn_pause(c, 1);
        return 0;
      }
      in_exhausted(c);
      return -1;
    }
    r = tls_read(c->tls, c->in + c->in_len, room);
    if (tls_out_pending(c->tls) > 0)
      mark_dirty(c); /* handshake messages */
    if (c->tls_state == 1 && tls_established(c->tls)) {
      c->tls_state = 2;
      c->srv->tls_handshaking--;
      if (c->addr)
        c->addr->ntls_hs--;
    }
    if (r > 0) {
      c->in_len += (size_t)r;
      got = 1;
      continue;
    }
    if (r == 0)
      break;
    if (r != RDZV_ECLOSED)
      srv__bad_input(c, "%s", tls_error(c->tls));
    tls_last_words(c);
    srv__conn_close(c);
    return -1;
  }
  if (tls_in_pending(c->tls) > TLS_IN_MAX && !got) {
    srv__bad_input(c, "TLS records not consumed; closing");
    srv__conn_close(c);
    return -1;
  }
  return 0;
}

/* Run the buffered requests, then, over TLS, decrypt more and run those,
 * until nothing more comes or the connection is paused. */
static void conn_input(conn_t *c) {
  for (;;) {
    size_t before;
    conn_process(c);
    if (c->dialect != NULL && c->dialect->pre_done != NULL)
      c->dialect->pre_done(c);
    if (c->state == CONN_CLOSING || c->paused || c->close_after_flush ||
        c->tls == NULL)
      return;
    before = c->in_len;
    if (tls_pump(c) != 0 || c->in_len == before)
      return;
  }
}

/* Run the requests that read_cb left for the loop's check (the lock is
 * held): before anything else happens to the connection's input. */
static void conn_run_read(conn_t *c) {
  if (list_empty(&c->read_link))
    return;
  list_remove(&c->read_link);
  conn_input(c);
}

static void read_cb_locked(uv_stream_t *st, ssize_t nread,
                           const uv_buf_t *buf);
static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = st->data;
  srv_t *s = c->srv;
  if (nread > 0 && c->tls == NULL && c->dialect != NULL) {
    /* The common case, without the lock: the bytes join the buffer (only
     * this thread touches it) and the loop's check runs the requests of
     * every connection that read in this pass under one lock. */
    c->in_len += (size_t)nread;
    if (list_empty(&c->read_link))
      list_insert_tail(&c->lp->readq, &c->read_link);
    return;
  }
  if (nread == 0)
    return; /* EAGAIN */
  /* A full buffer, with requests read in this pass: the loop's check
   * runs them (decoded ahead when large) in this iteration, and the poll
   * reports the socket readable again (libuv's is level-triggered). Not
   * here: waiting for the lock in the poll phase would hold up the small
   * requests of this loop's other clients behind the other loops' large
   * work (issue #11). */
  if (nread == UV_ENOBUFS && !list_empty(&c->read_link))
    return;
  srv__trace_begin(s, "read", c);
  /* What came before an error or EOF, a TLS record, a first frame: run
   * now; urgent when small, as a pass with small requests is. */
  if (conn_small(c))
    srv__lock_urgent(s);
  else
    srv__lock(s);
  read_cb_locked(st, nread, buf);
  srv__unlock(s);
  srv__trace_end(s);
}

static void read_cb_locked(uv_stream_t *st, ssize_t nread,
                           const uv_buf_t *buf) {
  conn_t *c = st->data;
  int ran = !list_empty(&c->read_link);
  conn_run_read(c); /* what came before an error, EOF or ENOBUFS */
  if (c->state == CONN_CLOSING)
    return;
  if (nread == UV_ENOBUFS) {
    /* The requests just run may have made room: the poll reports the
     * socket readable again (libuv's is level-triggered). */
    if (ran && in_room(c) > 0)
      return;
    if (!c->in_memwait) {
      in_exhausted(c);
      return;
    }
    /* The request goes on once memory was freed. With several loops the
     * lock was dropped since alloc_cb: memory freed in between woke no
     * one, so look again. */
    conn_pause(c, 1);
    if (in_room(c) > 0 || !c->in_memwait)
      conn_schedule_resume(c);
    return;
  }
  if (nread < 0) {
    srv__conn_close(c);
    return;
  }
  if (nread == 0)
    return;
  c->heard = 1;
  if (c->tls) {
    if (tls_feed(c->tls, buf->base, (size_t)nread) != 0) {
      srv__conn_close(c);
      return;
    }
  } else {
    c->in_len += (size_t)nread;
    if (c->dialect == NULL && c->srv->tls &&
        c->peer_addr.ss_family != AF_UNIX && c->in[0] == 0x16) {
      /* A TLS ClientHello: what follows is decrypted into c->in. OpenSSL's
       * state is charged, and handshakes in progress are capped. */
      srv_t *s = c->srv;
      if (s->tls_handshaking >= SRV_TLS_HANDSHAKES ||
          (c->addr && c->addr->ntls_hs >= SRV_TLS_HANDSHAKES_PER_ADDR)) {
        tls_refused(c);
        return;
      }
      if (!srv__mem_fixed_room(s, SRV_TLS_COST)) {
        srv__bad_input(c, "connections and jobs hold their quarter of "
                          "--max-memory %zu (a TLS connection costs %u KiB "
                          "more): closing", s->cfg.max_memory,
                       (SRV_CONN_COST + SRV_TLS_COST) >> 10);
        srv__limit_hit(s, SRV_LIMIT_MAX_MEMORY, s->cfg.max_memory, NULL,
                       c->peer, "a TLS connection: it was closed");
        srv__conn_close(c);
        return;
      }
      if (tls_new(s->tls, NULL, &c->tls) != 0) {
        srv__conn_close(c);
        return;
      }
      c->tls_state = 1;
      s->tls_handshaking++;
      if (c->addr)
        c->addr->ntls_hs++;
      s->mem.conns += SRV_TLS_COST;
      srv__mem_update(s);
      if (tls_feed(c->tls, c->in, c->in_len) != 0) {
        srv__conn_close(c);
        return;
      }
      c->in_len = 0;
    }
  }
  conn_input(c);
}

void srv__conn_start_read(conn_t *c) {
  if (!c->reading && !c->paused && c->state != CONN_CLOSING &&
      uv_read_start(&c->h.stream, alloc_cb, read_cb) == 0)
    c->reading = 1;
}

void srv__bad_input(conn_t *c, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  srv_t *s = c->srv;
  uint64_t now = srv__now();
  s->stats.bad_input++;
  if (c->bad_logged)
    return;
  c->bad_logged = 1;
  /* A port scan must not flood the log: at most 20 lines a second, then a
   * count of what was left out. */
  if (now - s->bad_window_ms >= 1000) {
    if (s->bad_suppressed > 0)
      LU_WARN(&s->log, "%llu more connections with bad input in the last "
                       "second were not logged",
              (unsigned long long)s->bad_suppressed);
    s->bad_window_ms = now;
    s->bad_in_window = 0;
    s->bad_suppressed = 0;
  }
  if (++s->bad_in_window > 20) {
    s->bad_suppressed++;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  LU_WARN(&c->srv->log, "connection %llu from %s: %s",
          (unsigned long long)c->id, c->peer, msg);
}

static int prefix_match(const uint8_t *a, const uint8_t *b, int bits) {
  int full = bits / 8, rem = bits % 8;
  if (memcmp(a, b, (size_t)full) != 0)
    return 0;
  if (rem == 0)
    return 1;
  return ((a[full] ^ b[full]) & (0xff << (8 - rem))) == 0;
}

/* Is this peer allowed to speak TCPStore, which has neither
 * authentication nor TLS? Only in the allow list while the server has a
 * token or TLS. */
int srv__ts_allowed(const srv_t *s, const conn_t *c) {
  const struct sockaddr_storage *pa = &c->peer_addr;
  uint8_t v4[4];
  const uint8_t *v6 = NULL;
  int have4 = 0;
  if (s->token == NULL && s->tls == NULL)
    return 1;
  if (pa->ss_family == AF_UNIX)
    return 1; /* file permissions guard a unix socket */
  if (pa->ss_family == AF_INET) {
    memcpy(v4, &((const struct sockaddr_in *)pa)->sin_addr, 4);
    have4 = 1;
  } else if (pa->ss_family == AF_INET6) {
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)pa)->sin6_addr;
    v6 = a6->s6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a6)) {
      memcpy(v4, a6->s6_addr + 12, 4);
      have4 = 1;
    }
  }
  for (int i = 0; i < s->nallow; i++) {
    const struct sockaddr_storage *n = &s->allow[i].net;
    if (n->ss_family == AF_INET && have4 &&
        prefix_match(v4,
                     (const uint8_t *)&((const struct sockaddr_in *)n)->sin_addr,
                     s->allow[i].prefix))
      return 1;
    if (n->ss_family == AF_INET6 && v6 &&
        prefix_match(v6, ((const struct sockaddr_in6 *)n)->sin6_addr.s6_addr,
                     s->allow[i].prefix))
      return 1;
  }
  return 0;
}

/* Decide the protocol from the first bytes (of the plaintext, inside TLS).
 * RET bytes consumed, 0 when more are needed, -1 to close. */
static ssize_t sniff(conn_t *c) {
  const uint8_t *b = c->in;
  size_t n = c->in_len;
  srv_t *s = c->srv;
  static const uint8_t ts_magic[4] = {0xCE, 0xF7, 0x85, 0x3C};
  int plain_tcp = s->tls && !c->tls && c->peer_addr.ss_family != AF_UNIX;
  char err[256];
  job_t *j;

  if (b[0] == 'R') {
    if (n < PROTO_MAGIC_LEN)
      return memcmp(b, PROTO_MAGIC, n) == 0 ? 0 : -1;
    if (memcmp(b, PROTO_MAGIC, PROTO_MAGIC_LEN) != 0) {
      srv__bad_input(c, "unknown protocol (first bytes are not \"RDZV\" nor "
                        "a TCPStore request)");
      return -1;
    }
    if (plain_tcp) {
      srv__bad_input(c, "a native client without TLS, and this server "
                        "requires TLS: give the client --tls-ca (or "
                        "LAUNCH_RDZV_TLS_CA)");
      return -1;
    }
    c->dialect = &srv__dialect_native;
    c->state = CONN_HELLO;
    c->dialect->start(c);
    return PROTO_MAGIC_LEN;
  }
  if (c->tls) {
    srv__bad_input(c, "inside TLS only the native protocol is served");
    return -1;
  }
  if (b[0] > 18) {
    srv__bad_input(c, "unknown protocol (first byte 0x%02x): neither a "
                      "launch nor a TCPStore client; closing", b[0]);
    return -1;
  }
  if (b[0] == 0 && n < 5) {
    /* VALIDATE (2.x) and SET (1.13) share byte 0: the magic decides. A
     * 1.13 SET here would carry a key length of over 1 GB, so the two
     * cannot be confused. */
    return 0;
  }
  if (!srv__ts_allowed(s, c)) {
    srv__bad_input(c, "TCPStore client refused: this server requires %s "
                      "and TCPStore has neither (allow trusted addresses "
                      "with --tcpstore-allow)",
                   s->tls ? "TLS" : "a token");
    return -1;
  }
  if (b[0] == 0 && memcmp(b + 1, ts_magic, 4) == 0) {
    c->dialect = &srv__dialect_ts_v2;
  } else if (b[0] > 8) {
    srv__bad_input(c, "TCPStore request without VALIDATE (opcode %u): a 2.x "
                      "client must validate first, and 1.13 has no such op",
                   b[0]);
    return -1;
  } else {
    c->dialect = &srv__dialect_ts_v1;
  }
  if ((j = srv__job(s, c, s->tcpstore_job, strlen(s->tcpstore_job), err,
                    sizeof(err))) == NULL) {
    srv__bad_input(c, "TCPStore client refused: %s", err);
    return -1;
  }
  srv__job_attach(c, j);
  c->dialect->start(c);
  lu_strlcpy(c->role, "tcpstore", sizeof(c->role));
  c->state = CONN_READY;
  srv__conn_authenticated(c);
  if (c->dialect == &srv__dialect_ts_v2)
    SRV_COUNT_TS(s, TS_VALIDATE); /* consumed here, not by ts_input */
  return c->dialect == &srv__dialect_ts_v2 ? 5 : 0;
}

static void conn_process(conn_t *c) {
  size_t off = 0;
  srv_t *s = c->srv;
  size_t store0 = s->mem.store.used;
  int moved = 0;
  c->lp->turn_end = uv_hrtime() + TURN_NS(s);
  c->in_need = 0;
  while (off < c->in_len && c->state != CONN_CLOSING &&
         !c->close_after_flush && !c->paused) {
    ssize_t k;
    if (c->dialect == NULL) {
      /* sniff() reads c->in from its start; off is 0 in this state. */
      k = sniff(c);
      if (k < 0) {
        srv__conn_close(c);
        return;
      }
      if (k == 0 && c->dialect == NULL)
        break;
    } else {
      c->in_need = 0;
      k = c->dialect->input(c, c->in + off, c->in_len - off);
      lu_big_free(c->in_spent);
      c->in_spent = NULL;
      if (k < 0) {
        srv__conn_close(c);
        return;
      }
      if (c->in_moved) {
        /* The buffer went with a value: go on with what followed it. */
        c->in_moved = 0;
        moved = 1;
        off = 0;
        continue;
      }
      if (k == 0)
        break;
    }
    off += (size_t)k;
  }
  if (c->state == CONN_CLOSING)
    return;
  if (off > 0) {
    conn_pre_shift(c, off);
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
  }
  if (c->in_len == 0 && c->in_cap > SRV_IN_RESERVE) {
    srv__in_release(c);
    srv__mem_released(s);
  }
  if (moved || s->mem.store.used < store0)
    srv__mem_released(s);
}

/* A paused connection goes on: replies that waited for room first, then
 * the requests it had sent, then reading. */
static void conn_resume(conn_t *c) {
  srv_t *s = c->srv;
  if (c->state == CONN_CLOSING)
    return;
  if (c->paused) {
    c->paused = 0;
    s->stats.paused--;
  }
  if (c->dialect && c->dialect->resume)
    c->dialect->resume(c);
  if (!c->paused && c->state != CONN_CLOSING)
    conn_input(c);
  if (!c->paused && c->state != CONN_CLOSING)
    srv__conn_start_read(c);
}
