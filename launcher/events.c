/* events.c - the job's event log (events.h): JSON Lines written with the
 * util JSON writer, one write and flush per event so that a reader
 * tailing the file sees whole lines. A file renamed or removed (logrotate)
 * is opened again by its path before the next line. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "events.h"
#include "lu.h"

struct ev_log_s {
  int fd;        /* the file, -1 none */
  int torn;      /* the file's last line was cut short (a full disk) */
  char path[PATH_MAX]; /* its path, "" none */
  int console;
  char job[256];
  char node[256];
  lu_buf_t b;
  lu_json_t j;
};

static const char *const names[EV_COUNT] = {
#define EV_NAME(k, d) #k,
    EV_KINDS(EV_NAME)
#undef EV_NAME
};

const char *ev_name(ev_kind_t kind) {
  return (unsigned)kind < EV_COUNT ? names[kind] : "unknown";
}

int ev_open(const char *path, int console, const char *job, const char *node,
            ev_log_t **out) {
  ev_log_t *e;
  *out = NULL;
  if ((path == NULL || path[0] == '\0') && !console)
    return 0;
  if ((e = calloc(1, sizeof(*e))) == NULL)
    return -ENOMEM;
  e->fd = -1;
  e->console = console;
  lu_strlcpy(e->job, job, sizeof(e->job));
  lu_strlcpy(e->node, node, sizeof(e->node));
  if (path && path[0]) {
    if (strlen(path) >= sizeof(e->path)) {
      free(e);
      return -ENAMETOOLONG;
    }
    lu_strlcpy(e->path, path, sizeof(e->path));
    if ((e->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                      0644)) < 0) {
      int rc = -errno;
      free(e);
      return rc;
    }
  }
  *out = e;
  return 0;
}

/* The path no longer names the file open (logrotate renamed it, with or
 * without a new one in its place; removed): open the path again. The old
 * file is kept when the path cannot be opened (a line in the rotated file
 * beats a lost one). */
static void reopen_if_moved(ev_log_t *e) {
  struct stat now, open_;
  int fd;
  if (e->fd < 0 || e->path[0] == '\0' || fstat(e->fd, &open_) != 0)
    return;
  if (stat(e->path, &now) == 0 && now.st_dev == open_.st_dev &&
      now.st_ino == open_.st_ino)
    return;
  if ((fd = open(e->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                 0644)) < 0)
    return;
  close(e->fd);
  e->fd = fd;
  e->torn = 0; /* the torn line, if any, stays with the old file */
}

void ev_close(ev_log_t *e) {
  if (e == NULL)
    return;
  if (e->fd >= 0)
    close(e->fd);
  lu_buf_free(&e->b);
  free(e);
}

static lu_json_t *begin_job(ev_log_t *e, ev_kind_t kind, const char *job) {
  if (e == NULL)
    return NULL;
  lu_buf_free(&e->b);
  lu_json_init(&e->j, &e->b, 0);
  lu_json_obj(&e->j, NULL);
  lu_json_int(&e->j, "v", EV_VERSION);
  lu_buf_printf(&e->b, ",\"time\":%.3f", lu_wall_s());
  lu_json_str(&e->j, "event", ev_name(kind));
  lu_json_str(&e->j, "job", job);
  lu_json_str(&e->j, "node", e->node);
  return &e->j;
}

lu_json_t *ev_begin(ev_log_t *e, ev_kind_t kind) {
  return e ? begin_job(e, kind, e->job) : NULL;
}

/* RET the bytes written: n, or fewer where a write failed */
static size_t write_all(int fd, const char *p, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, p + done, n - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      break; /* a full disk loses events, never the job */
    done += (size_t)w;
  }
  return done;
}

void ev_end(ev_log_t *e) {
  char *line;
  size_t n;
  if (e == NULL)
    return;
  lu_json_end_obj(&e->j);
  lu_buf_put(&e->b, "\n", 1);
  if (lu_buf_finish(&e->b, &line, &n) != 0)
    return;
  reopen_if_moved(e);
  if (e->fd >= 0) {
    /* A line cut short ends before this one, which would else run on
     * from it and be lost too: the torn part is a line of its own that
     * readers skip (it does not parse), and this one is whole. */
    if (e->torn && write_all(e->fd, "\n", 1) == 1)
      e->torn = 0;
    if (!e->torn) {
      size_t w = write_all(e->fd, line, n);
      e->torn = w > 0 && w < n;
    }
  }
  if (e->console) {
    fflush(stderr);
    (void)write_all(STDERR_FILENO, line, n);
  }
  free(line);
}

void ev_server_cb(void *arg, const srv_event_t *ev) {
  static const ev_kind_t kinds[] = {EV_node_joined, EV_node_left,
                                    EV_node_refused, EV_limit_hit};
  ev_log_t *e = arg;
  lu_json_t *j;
  if (ev->kind < 0 || ev->kind >= (int)LU_ARRAY_SIZE(kinds) ||
      (j = begin_job(e, kinds[ev->kind], ev->job ? ev->job : "")) == NULL)
    return;
  if (ev->kind == SRV_EV_LIMIT_HIT) {
    lu_json_str(j, "limit", srv_limit_name(ev->limit));
    lu_json_int(j, "value", (int64_t)LU_MIN(ev->value, (uint64_t)INT64_MAX));
    lu_json_str(j, "refused", ev->reason ? ev->reason : "");
    lu_json_int(j, "count", (int64_t)LU_MIN(ev->count, (uint64_t)INT64_MAX));
    if (ev->addr)
      lu_json_str(j, "peer", ev->addr);
  } else {
    lu_json_str(j, "source", "server");
    lu_json_str(j, "host", ev->host ? ev->host : "");
    lu_json_str(j, "addr", ev->addr ? ev->addr : "");
    if (ev->kind == SRV_EV_NODE_JOINED)
      lu_json_int(j, "nproc", ev->nproc);
    else
      lu_json_str(j, "reason", ev->reason ? ev->reason : "");
    if (ev->kind == SRV_EV_NODE_LEFT)
      lu_json_int(j, "round", ev->round);
  }
  ev_end(e);
}

int ev_manifest_stats(const char *buf, size_t len, uint64_t *bytes,
                      double *write_s) {
  lu_jdoc_t *doc = NULL;
  const lu_jv_t *root, *sh;
  uint64_t sum = 0;
  int64_t slowest = 0;
  int rc = -1, all_timed = 1;
  *bytes = 0;
  *write_s = 0;
  if (lu_jv_parse(buf, len, 0, &doc, &root, NULL, 0) != 0)
    return -1;
  sh = root->type == LU_JV_OBJ ? lu_jv_get(root, "shards") : NULL;
  if (sh == NULL || sh->type != LU_JV_ARR || sh->n == 0)
    goto out;
  for (const lu_jv_t *s = sh->first; s; s = s->next) {
    int64_t size, ms;
    if (s->type != LU_JV_OBJ ||
        lu_jv_int(lu_jv_get(s, "size"), 0, INT64_MAX, &size) != 0 ||
        (uint64_t)size > UINT64_MAX - sum)
      goto out;
    sum += (uint64_t)size;
    if (lu_jv_int(lu_jv_get(s, "write_ms"), 0, INT64_MAX, &ms) == 0)
      slowest = LU_MAX(slowest, ms);
    else
      all_timed = 0;
  }
  *bytes = sum;
  *write_s = all_timed ? (double)slowest / 1000.0 : 0;
  rc = 0;
out:
  lu_jv_free(doc);
  return rc;
}
