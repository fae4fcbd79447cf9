/* srv_timers.c - the rendezvous server's deadlines: a heap of waiting
 * native requests, and the handshake deadlines of new connections. Moved
 * out of server.c (issue #25). */
#include <stdlib.h>

#include "srv_int.h"


/* ---- deadlines: a binary heap of pending native ops -------------------------------- */

static void heap_swap(srv_t *s, size_t a, size_t b) {
  pend_t *t = s->heap[a];
  s->heap[a] = s->heap[b];
  s->heap[b] = t;
  s->heap[a]->heap_idx = a;
  s->heap[b]->heap_idx = b;
}

static void heap_up(srv_t *s, size_t i) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (s->heap[p]->deadline_ms <= s->heap[i]->deadline_ms)
      break;
    heap_swap(s, i, p);
    i = p;
  }
}

static void heap_down(srv_t *s, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < s->heap_len && s->heap[l]->deadline_ms < s->heap[m]->deadline_ms)
      m = l;
    if (r < s->heap_len && s->heap[r]->deadline_ms < s->heap[m]->deadline_ms)
      m = r;
    if (m == i)
      break;
    heap_swap(s, i, m);
    i = m;
  }
}

static void timer_cb(uv_timer_t *t);
void srv__rearm(srv_t *s) {
  uint64_t now = srv__now();
  if (s->closing)
    return;
  if (!srv__on_main(s)) {
    s->kick_rearm = 1;
    srv__kick_main(s);
    return;
  }
  if (s->heap_len == 0) {
    uv_timer_stop(&s->timer);
    return;
  }
  uv_timer_start(&s->timer, timer_cb,
                 s->heap[0]->deadline_ms > now ? s->heap[0]->deadline_ms - now
                                               : 0,
                 0);
}

int srv__pend_arm(srv_t *s, pend_t *p, int64_t wait_ms) {
  p->heap_idx = SIZE_MAX;
  if (wait_ms < 0) {
    p->deadline_ms = 0;
    return 0;
  }
  if (s->heap_len == s->heap_cap) {
    size_t ncap = s->heap_cap ? s->heap_cap * 2 : 64;
    pend_t **nh = realloc(s->heap, ncap * sizeof(*nh));
    if (nh == NULL)
      return RDZV_ENOMEM;
    s->heap = nh;
    s->heap_cap = ncap;
  }
  p->deadline_ms = srv__now() + (uint64_t)wait_ms;
  p->heap_idx = s->heap_len;
  s->heap[s->heap_len++] = p;
  heap_up(s, p->heap_idx);
  if (p->heap_idx == 0)
    srv__rearm(s);
  return 0;
}

void srv__pend_disarm(srv_t *s, pend_t *p) {
  size_t i = p->heap_idx;
  if (i == SIZE_MAX)
    return;
  p->heap_idx = SIZE_MAX;
  s->heap_len--;
  if (i != s->heap_len) {
    s->heap[i] = s->heap[s->heap_len];
    s->heap[i]->heap_idx = i;
    heap_down(s, i);
    heap_up(s, s->heap[i]->heap_idx);
  }
  if (i == 0)
    srv__rearm(s);
}

static void timer_cb(uv_timer_t *t) {
  srv_t *s = t->data;
  uint64_t now = srv__now();
  srv__trace_begin(s, "deadlines", NULL);
  srv__lock(s);
  while (s->heap_len > 0 && s->heap[0]->deadline_ms <= now) {
    pend_t *p = s->heap[0];
    srv__pend_disarm(s, p);
    p->c->dialect->pend_timeout(p);
  }
  srv__rearm(s);
  srv__unlock(s);
  srv__trace_end(s);
}

/* ---- handshake deadlines: connections in accept order -------------------------------- */

static void hs_timer_cb_locked(uv_timer_t *t);
void srv__hs_timer_cb(uv_timer_t *t) {
  srv_t *s = t->data;
  srv__trace_begin(s, "handshake deadlines", NULL);
  srv__lock(s);
  hs_timer_cb_locked(t);
  srv__unlock(s);
  srv__trace_end(s);
}

/* Room for more connections: below three quarters of --max-conns, of the
 * peer's --max-conns-per-addr and of the memory for connections. */
static int conns_roomy(const srv_t *s, const srv_addr_t *a) {
  if ((uint64_t)s->stats.conns_open * 4 >= (uint64_t)s->cfg.max_conns * 3)
    return 0;
  if (a && (uint64_t)a->nconns * 4 >= (uint64_t)s->cfg.max_conns_per_addr * 3)
    return 0;
  return srv__mem_fixed_room(s, 4 * SRV_CONN_COST);
}

/* Close the oldest connection that sent nothing by its handshake deadline
 * (of address a when a is not NULL), making room for a new one.
 * RET 1 when one was closed. */
int srv__evict_silent(srv_t *s, const srv_addr_t *a) {
  list_t *it;
  for (it = s->silent.next; it != &s->silent; it = it->next) {
    conn_t *c = LIST_ENTRY(it, conn_t, silent_link);
    if (a != NULL && c->addr != a)
      continue;
    srv__bad_input(c, "no handshake within %.1f s (--handshake-timeout), "
                      "closed to make room for a new connection (the "
                      "connection limits are near)",
                   s->cfg.handshake_ms / 1000.0);
    srv__conn_close(c);
    return 1;
  }
  return 0;
}

static void hs_timer_cb_locked(uv_timer_t *t) {
  srv_t *s = t->data;
  uint64_t now = srv__now();
  while (!list_empty(&s->preauth)) {
    conn_t *c = LIST_ENTRY(s->preauth.next, conn_t, preauth_link);
    uint64_t due = c->accepted_ms + s->cfg.handshake_ms;
    if (due > now) {
      uv_timer_start(&s->hs_timer, srv__hs_timer_cb, due - now, 0);
      return;
    }
    if (!c->heard && conns_roomy(s, c->addr)) {
      /* Silent, and there is room: an idle PyTorch 1.13 client, or an
       * attacker that costs nothing yet. Looked at again one timeout
       * later (accepted_ms is now its last look); closed first when
       * room runs short (srv__evict_silent). */
      c->accepted_ms = now;
      list_remove(&c->preauth_link);
      list_insert_tail(&s->preauth, &c->preauth_link);
      if (list_empty(&c->silent_link))
        list_insert_tail(&s->silent, &c->silent_link);
      continue;
    }
    srv__bad_input(c, c->heard ? "no handshake within %.1f s "
                                 "(--handshake-timeout); closing"
                               : "silent for %.1f s (--handshake-timeout) "
                                 "while the connection limits are near; "
                                 "closing",
                   s->cfg.handshake_ms / 1000.0);
    srv__conn_close(c);
  }
}

void srv__conn_authenticated(conn_t *c) {
  list_unlink(&c->preauth_link);
  list_unlink(&c->silent_link);
}
