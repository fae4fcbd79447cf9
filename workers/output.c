/* output.c - the workers' stdout and stderr: split into prefixed lines
 * for the console, written to log files, the stderr tail kept. */
#include "wk_int.h"

/* ---- output ----------------------------------------------------------------------- */

void wk_tail_push(wk_worker_t *w, const char *p, size_t n) {
  wk_group_t *g = w->g;
  int slot;
  if (g->tail_lines <= 0)
    return;
  if (w->tail == NULL) {
    w->tail = malloc((size_t)g->tail_lines * (WK_TAIL_LINE_MAX + 1));
    w->tail_len = calloc((size_t)g->tail_lines, sizeof(size_t));
    if (w->tail == NULL || w->tail_len == NULL) {
      free(w->tail);
      free(w->tail_len);
      w->tail = NULL;
      w->tail_len = NULL;
      return;
    }
  }
  if (n > 0 && p[n - 1] == '\r')
    n--;
  if (n > WK_TAIL_LINE_MAX)
    n = WK_TAIL_LINE_MAX;
  if (w->tail_n < g->tail_lines) {
    slot = (w->tail_head + w->tail_n) % g->tail_lines;
    w->tail_n++;
  } else {
    slot = w->tail_head;
    w->tail_head = (w->tail_head + 1) % g->tail_lines;
  }
  memcpy(w->tail + (size_t)slot * (WK_TAIL_LINE_MAX + 1), p, n);
  w->tail_len[slot] = n;
  w->tail_dirty = 1;
}

/* One line (without its '\n') of a stream: to the console with the
 * worker's prefix in a single write, and to the stderr tail. */
static void wk_console(wk_stream_t *st, const char *p, size_t n, char end) {
  wk_worker_t *w = st->w;
  wk_group_t *g = w->g;
  size_t plen = g->prefix_len[w->local_rank];
  if (st->console_fd < 0)
    return;
  memcpy(g->obuf, g->prefix[w->local_rank], plen);
  memcpy(g->obuf + plen, p, n);
  g->obuf[plen + n] = end;
  /* A console that is gone (EPIPE, EBADF) silently loses the line; the
   * files and the tail still have it. */
  (void)wk_write_all(st->console_fd, g->obuf, plen + n + 1);
}

static void wk_emit(wk_stream_t *st, const char *p, size_t n) {
  /* the last redraw of a progress line ends with this newline: the
   * console shows it already */
  if (st->at_cr && (n == 0 || n == st->shown) && st->console_fd >= 0)
    (void)wk_write_all(st->console_fd, "\n", 1);
  else
    wk_console(st, p, n, '\n');
  st->at_cr = 0;
  st->redraw = 0;
  st->shown = 0;
  if (st->bit == WK_STDERR)
    wk_tail_push(st->w, p, n);
}

/* A segment ended by '\r' (tqdm redraws its bar so): to the console at
 * once, with the prefix, ending in '\r' so that the next one overwrites
 * it; not to the tail, which keeps whole lines. */
static void wk_emit_cr(wk_stream_t *st, const char *p, size_t n) {
  size_t shown = st->shown;
  st->redraw = 1;
  st->shown = 0;
  if (n == 0 || n == shown)
    return; /* nothing new to show */
  wk_console(st, p, n, '\r');
  st->at_cr = 1;
}

void wk_file_write(wk_stream_t *st, const char *p, size_t n) {
  int rc;
  if (st->file_fd < 0)
    return;
  if ((rc = wk_write_all(st->file_fd, p, n)) != 0) {
    LU_ERR(&st->w->g->log, "write(%s.log of local rank %d) failed: %s; the "
           "rest of this stream is not saved",
           st->bit == WK_STDOUT ? "stdout" : "stderr", st->w->local_rank,
           strerror(-rc));
    close(st->file_fd);
    st->file_fd = -1;
  }
}

/* Feed bytes read from a worker: the file gets them as they are, the
 * console and the tail get whole lines; a line longer than WK_LINE_MAX is
 * cut into chunks, so memory per stream stays bounded. */
void wk_feed(wk_stream_t *st, const char *p, size_t n) {
  wk_file_write(st, p, n);
  if (st->console_fd < 0 &&
      (st->bit != WK_STDERR || st->w->g->tail_lines == 0))
    return; /* nobody wants lines of it */
  if (st->cr_pend && n > 0) {
    st->cr_pend = 0;
    if (p[0] == '\n') { /* "\r\n" split across two reads: a line */
      wk_emit(st, st->line, st->len);
      st->len = 0;
      p++;
      n--;
    } else { /* a redraw, shown already */
      st->len = 0;
      st->redraw = 1;
      st->shown = 0;
    }
  }
  while (n > 0) {
    const char *nl = memchr(p, '\n', n);
    const char *cr = memchr(p, '\r', nl ? (size_t)(nl - p) : n);
    size_t take = nl ? (size_t)(nl - p) : n;
    size_t room = WK_LINE_MAX - st->len;
    /* "\r\n" ends a line; a lone '\r' a redrawn segment */
    if (cr && !(cr + 1 == nl)) {
      size_t k = (size_t)(cr - p);
      if (k <= room && k + 1 == n) {
        /* the read's last byte: "\r\n" may have been cut in two. The
         * console shows the segment now; the line keeps it for the tail
         * until the next read (or the end of the stream) decides. */
        if (st->line == NULL && (st->line = malloc(WK_LINE_MAX)) == NULL)
          return;
        memcpy(st->line + st->len, p, k);
        st->len += k;
        if (st->len != 0 && st->len != st->shown) {
          wk_console(st, st->line, st->len, '\r');
          st->at_cr = 1;
        }
        st->shown = st->len;
        st->cr_pend = 1;
        return;
      }
      if (k <= room) {
        if (st->len == 0) {
          wk_emit_cr(st, p, k);
        } else {
          memcpy(st->line + st->len, p, k);
          wk_emit_cr(st, st->line, st->len + k);
          st->len = 0;
        }
        p += k + 1;
        n -= k + 1;
        continue;
      }
    }
    if (take > room) {
      /* The line is full: emit a chunk. */
      if (st->len == 0) {
        wk_emit(st, p, WK_LINE_MAX);
      } else {
        memcpy(st->line + st->len, p, room);
        wk_emit(st, st->line, WK_LINE_MAX);
        st->len = 0;
      }
      p += room;
      n -= room;
      continue;
    }
    if (nl == NULL) {
      if (st->line == NULL && (st->line = malloc(WK_LINE_MAX)) == NULL)
        return; /* out of memory: the partial line is lost, not the loop */
      memcpy(st->line + st->len, p, take);
      st->len += take;
      /* a progress line is shown as it grows, not when it ends */
      if (st->redraw && st->len > st->shown) {
        wk_console(st, st->line, st->len, '\r');
        st->at_cr = 1;
        st->shown = st->len;
      }
      return;
    }
    if (st->len == 0) {
      wk_emit(st, p, take);
    } else {
      memcpy(st->line + st->len, p, take);
      wk_emit(st, st->line, st->len + take);
      st->len = 0;
    }
    p += take + 1;
    n -= take + 1;
  }
}

static void wk_on_stream_closed(uv_handle_t *h) {
  wk_stream_t *st = h->data;
  wk_worker_t *w = st->w;
  wk_group_t *g = w->g;
  w->nopen--;
  g->nopen--;
  wk_unguard(w);
  if (g->closing)
    wk_maybe_free(g);
  else
    wk_maybe_done(g);
}

/* End of a stream (EOF, error, or given up on): flush the partial line,
 * close the file and the pipe. */
void wk_stream_end(wk_stream_t *st) {
  if (!st->active)
    return;
  st->active = 0;
  st->cr_pend = 0; /* a last "text\r" is kept as a line */
  if (st->len > 0) {
    wk_emit(st, st->line, st->len);
    st->len = 0;
  }
  if (st->file_fd >= 0) {
    close(st->file_fd);
    st->file_fd = -1;
  }
  uv_close((uv_handle_t *)&st->pipe, wk_on_stream_closed);
}

void wk_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  wk_stream_t *st = h->data;
  (void)hint;
  buf->base = st->w->g->rbuf;
  buf->len = WK_READ_BUF;
}

void wk_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  wk_stream_t *st = s->data;
  if (nread > 0) {
    wk_feed(st, buf->base, (size_t)nread);
    return;
  }
  if (nread == 0)
    return;
  if (nread != UV_EOF)
    LU_WARN(&st->w->g->log, "reading %s of local rank %d failed: %s",
            st->bit == WK_STDOUT ? "stdout" : "stderr", st->w->local_rank,
            uv_strerror((int)nread));
  wk_stream_end(st);
  if (nread == UV_EOF)
    wk_maybe_exiting(st->w);
}

/* Read what a reaped worker left in its pipe before its exit is reported,
 * so that its last lines are printed first and its tail is complete. The
 * pipe may still be held by the worker's children: read at most
 * WK_DRAIN_MAX, stop at EAGAIN. */
void wk_stream_drain(wk_stream_t *st) {
  size_t total = 0;
  uv_os_fd_t fd;
  if (!st->active || uv_fileno((uv_handle_t *)&st->pipe, &fd) != 0)
    return;
  while (total < WK_DRAIN_MAX) {
    ssize_t r = read(fd, st->w->g->rbuf, WK_READ_BUF);
    if (r > 0) {
      wk_feed(st, st->w->g->rbuf, (size_t)r);
      total += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    wk_stream_end(st); /* EOF or error */
    return;
  }
}
