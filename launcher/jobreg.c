/* jobreg.c - the jobs of this node: one JSON file per agent in the user's
 * runtime directory (jobreg.h). */
#include "jobreg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lu.h"
#include "lu_buf.h"
#include "rdzv.h"

#define JOBREG_MAX_FILE (64 << 10)
#define JOBREG_MAX_JOBS 4096

/* A folder that is ours: a real folder (not a link), owned by this user,
 * that no one else may write. */
static int dir_ok(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0)
    return -errno;
  if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() ||
      (sb.st_mode & (S_IWGRP | S_IWOTH)))
    return -EPERM;
  return 0;
}

int jobreg_dir(char *out, size_t n) {
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  const char *tmp = getenv("TMPDIR");
  int w;
  if (xdg && xdg[0] == '/' && dir_ok(xdg) == 0)
    w = snprintf(out, n, "%s/launch", xdg);
  else
    w = snprintf(out, n, "%s/launch-%u", tmp && tmp[0] == '/' ? tmp : "/tmp",
                 (unsigned)geteuid());
  if (w < 0 || (size_t)w >= n)
    return -ENAMETOOLONG;
  if (mkdir(out, 0700) != 0 && errno != EEXIST)
    return -errno;
  return dir_ok(out);
}

/* A job id as a file name: ids are [A-Za-z0-9._:@+=-] (config.c); ':'
 * and '@' are fine in file names, and there is no '/'. */
static int file_for(const jobreg_t *j, char *path, size_t n) {
  char dir[PATH_MAX];
  int rc = jobreg_dir(dir, sizeof(dir));
  if (rc != 0)
    return rc;
  if (strchr(j->job, '/') || j->job[0] == '.' || j->job[0] == '\0')
    return -EINVAL;
  /* the id cut to 200 bytes, so that the name and its ".tmp" fit a file
   * name (255 bytes) whatever the id's length (255 at most): readers take
   * the job from the file's contents, and the pid keeps names apart */
  int w = snprintf(path, n, "%s/%.200s.%d.json", dir, j->job, j->pid);
  return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

static const char *const state_names[] = {"running", "ended", "gone"};

int jobreg_write(const jobreg_t *j, char *path, size_t n) {
  char tmp[PATH_MAX + 8];
  lu_buf_t b = LU_BUF_INIT;
  lu_json_t js;
  char *text;
  size_t len;
  int rc = file_for(j, path, n), fd;
  if (rc != 0)
    return rc;
  lu_json_init(&js, &b, 0);
  lu_json_obj(&js, NULL);
  lu_json_int(&js, "v", 1);
  lu_json_str(&js, "job", j->job);
  lu_json_str(&js, "host", j->host);
  lu_json_str(&js, "endpoint_host", j->ep_host);
  lu_json_int(&js, "endpoint_port", j->ep_port);
  lu_json_int(&js, "pid", j->pid);
  lu_json_bool(&js, "standalone", j->standalone);
  lu_json_bool(&js, "hosting", j->hosting);
  lu_json_int(&js, "round", j->round);
  lu_json_int(&js, "restarts", j->restarts);
  lu_json_int(&js, "nproc", j->nproc);
  lu_json_int(&js, "started", j->started);
  lu_json_str(&js, "state", state_names[j->state == JOBREG_ENDED]);
  if (j->state == JOBREG_ENDED) {
    lu_json_int(&js, "ended", j->ended);
    lu_json_bool(&js, "ok", j->ok);
    lu_json_int(&js, "exit_code", j->exit_code);
    if (j->reason[0])
      lu_json_str(&js, "reason", j->reason);
  }
  lu_json_str(&js, "run_dir", j->run_dir);
  lu_json_str(&js, "program", j->program);
  lu_json_end_obj(&js);
  lu_buf_puts(&b, "\n");
  if ((rc = lu_buf_finish(&b, &text, &len)) != 0)
    return rc;
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    rc = -errno;
  } else {
    ssize_t w = write(fd, text, len);
    rc = w == (ssize_t)len ? 0 : w < 0 ? -errno : -EIO;
    if (close(fd) != 0 && rc == 0)
      rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
      rc = -errno;
    if (rc != 0)
      unlink(tmp);
  }
  free(text);
  return rc;
}

static void get_str(const lu_jv_t *o, const char *key, char *out, size_t n) {
  const lu_jv_t *v = lu_jv_get(o, key);
  if (v && v->type == LU_JV_STR)
    lu_strlcpy(out, v->s, n);
}

static int64_t get_int(const lu_jv_t *o, const char *key, int64_t min,
                       int64_t max, int64_t dflt) {
  int64_t x;
  return lu_jv_int(lu_jv_get(o, key), min, max, &x) == 0 ? x : dflt;
}

static int get_bool(const lu_jv_t *o, const char *key) {
  const lu_jv_t *v = lu_jv_get(o, key);
  return v && v->type == LU_JV_BOOL && v->b;
}

int jobreg_parse(const char *buf, size_t len, jobreg_t *j) {
  lu_jdoc_t *doc = NULL;
  const lu_jv_t *root;
  const lu_jv_t *st;
  memset(j, 0, sizeof(*j));
  if (lu_jv_parse(buf, len, 0, &doc, &root, NULL, 0) != 0)
    return RDZV_EPROTO;
  if (root->type != LU_JV_OBJ || get_int(root, "v", 1, 1, 0) != 1 ||
      (st = lu_jv_get(root, "state")) == NULL || st->type != LU_JV_STR) {
    lu_jv_free(doc);
    return RDZV_EPROTO;
  }
  get_str(root, "job", j->job, sizeof(j->job));
  get_str(root, "host", j->host, sizeof(j->host));
  get_str(root, "endpoint_host", j->ep_host, sizeof(j->ep_host));
  j->ep_port = (int)get_int(root, "endpoint_port", 0, 65535, 0);
  j->pid = (int)get_int(root, "pid", 1, INT32_MAX, 0);
  j->standalone = get_bool(root, "standalone");
  j->hosting = get_bool(root, "hosting");
  j->round = get_int(root, "round", 0, INT64_MAX, 0);
  j->restarts = get_int(root, "restarts", 0, INT64_MAX, 0);
  j->nproc = (int)get_int(root, "nproc", 0, INT32_MAX, 0);
  j->started = get_int(root, "started", 0, INT64_MAX, 0);
  j->state = strcmp(st->s, "ended") == 0 ? JOBREG_ENDED : JOBREG_RUNNING;
  j->ended = get_int(root, "ended", 0, INT64_MAX, 0);
  j->ok = get_bool(root, "ok");
  j->exit_code = (int)get_int(root, "exit_code", -255, 255, 0);
  get_str(root, "reason", j->reason, sizeof(j->reason));
  get_str(root, "run_dir", j->run_dir, sizeof(j->run_dir));
  get_str(root, "program", j->program, sizeof(j->program));
  int known = j->state == JOBREG_ENDED || strcmp(st->s, "running") == 0;
  lu_jv_free(doc);
  return j->job[0] == '\0' || j->pid == 0 || !known ? RDZV_EPROTO : 0;
}

static int by_state_then_start(const void *x, const void *y) {
  const jobreg_t *a = x, *b = y;
  int ra = a->state == JOBREG_RUNNING, rb = b->state == JOBREG_RUNNING;
  if (ra != rb)
    return rb - ra;
  return (a->started > b->started) - (a->started < b->started);
}

/* Is pid's process gone (or a zombie no one reaped)? */
static int pid_gone(int pid) {
  char path[64], st[512];
  if (kill(pid, 0) != 0)
    return errno == ESRCH;
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  if (lu_read_line(NULL, path, st, sizeof(st)) > 0) {
    const char *p = strrchr(st, ')');
    return p && p[1] == ' ' && p[2] == 'Z';
  }
  return 0;
}

/* "NAME.PID.json", not a temporary file */
static int ours(const char *name) {
  size_t n = strlen(name);
  return n > 5 && strcmp(name + n - 5, ".json") == 0 && name[0] != '.';
}

/* One registry file, dir/name: OUT *j its job, with a running job whose
 * agent is gone marked GONE. A job that ended (or went) more than
 * JOBREG_KEEP_S before now has its file removed. RET 1 kept (*j filled),
 * 0 removed, -1 not one of ours (left alone). */
static int load_one(const char *dir, const char *name, time_t now,
                    jobreg_t *j) {
  char path[PATH_MAX + 256];
  char *data = NULL;
  size_t len;
  struct stat sb;
  int rc;
  if (!ours(name))
    return -1;
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
    return -1;
  if (lu_read_file(path, JOBREG_MAX_FILE, &data, &len) != 0)
    return -1;
  rc = jobreg_parse(data, len, j);
  free(data);
  if (rc != 0)
    return -1; /* not one of ours: left alone */
  if (j->state == JOBREG_RUNNING && pid_gone(j->pid)) {
    /* its agent died without saying how the job ended (kill -9): gone
     * since the file was last written */
    j->state = JOBREG_GONE;
    j->ended = (int64_t)sb.st_mtime;
  }
  if (j->state != JOBREG_RUNNING && now - (time_t)j->ended > JOBREG_KEEP_S) {
    unlink(path);
    return 0;
  }
  return 1;
}

int jobreg_list(jobreg_t **out, size_t *n) {
  char dir[PATH_MAX];
  DIR *d;
  struct dirent *e;
  jobreg_t *v = NULL;
  size_t cnt = 0, cap = 0;
  time_t now = time(NULL);
  int rc = jobreg_dir(dir, sizeof(dir));
  *out = NULL;
  *n = 0;
  if (rc != 0)
    return rc;
  if ((d = opendir(dir)) == NULL)
    return -errno;
  while ((e = readdir(d)) != NULL && cnt < JOBREG_MAX_JOBS) {
    jobreg_t j;
    if (load_one(dir, e->d_name, now, &j) != 1)
      continue;
    if (cnt == cap) {
      size_t nc = cap ? cap * 2 : 16;
      jobreg_t *nv = realloc(v, nc * sizeof(*nv));
      if (nv == NULL) {
        closedir(d);
        free(v);
        return -ENOMEM;
      }
      v = nv;
      cap = nc;
    }
    v[cnt++] = j;
  }
  closedir(d);
  if (cnt)
    qsort(v, cnt, sizeof(*v), by_state_then_start);
  *out = v;
  *n = cnt;
  return 0;
}

int jobreg_prune(void) {
  char dir[PATH_MAX], mark[PATH_MAX + 16];
  DIR *d;
  struct dirent *e;
  struct stat sb;
  time_t now = time(NULL);
  int rc = jobreg_dir(dir, sizeof(dir)), fd, removed = 0;
  if (rc != 0)
    return rc;
  snprintf(mark, sizeof(mark), "%s/.pruned", dir);
  if (stat(mark, &sb) == 0 && now - sb.st_mtime >= 0 &&
      now - sb.st_mtime < JOBREG_PRUNE_EVERY_S)
    return 0; /* another agent of this node pruned a moment ago */
  if ((fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
    return -errno;
  (void)futimens(fd, NULL);
  close(fd);
  if ((d = opendir(dir)) == NULL)
    return -errno;
  while ((e = readdir(d)) != NULL) {
    char path[PATH_MAX + 256];
    jobreg_t j;
    if (!ours(e->d_name))
      continue;
    /* A file written within JOBREG_KEEP_S cannot hold an expired job: an
     * ended job's file is written at its end, and a gone one counts from
     * its last write. Only the older ones are read. */
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    if (lstat(path, &sb) != 0 || now - sb.st_mtime <= JOBREG_KEEP_S)
      continue;
    removed += load_one(dir, e->d_name, now, &j) == 0;
  }
  closedir(d);
  return removed;
}
