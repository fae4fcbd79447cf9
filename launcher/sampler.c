/* sampler.c - the agent's side of the GPU sampler (sampler.h): start the
 * child, ask it once a second from the owner's loop and keep its newest
 * reply, serve that at a scrape (asking with a bounded wait only when it
 * is not fresh), reap and restart the child, end it. Everything under one
 * mutex, taken by the scraping thread, the loop (trylock: it never waits)
 * and gs_open, gs_close; gs_pid reads an atomic. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lu.h"
#include "metrics.h"
#include "rdzv.h"
#include "sampler.h"

extern char **environ;

/* Defined in the launch binary only (cmd_gpu_sampler.c): a test program
 * linking this library is not a sampler, and must not run itself as one. */
extern int launch_cmd_gpu_sampler(int argc, char **argv)
    __attribute__((weak));

#define GS_BACKOFF_MAX_MS 320000

struct gs_s {
  pthread_mutex_t mu;
  lu_log_t log;
  char node[256];        /* escaped label value */
  char exe[PATH_MAX];
  atomic_int pid;        /* 0: none runs */
  int fd;                /* the agent's end, -1 with no child */
  int gone;              /* it found no GPU: no sampler from then on */
  int answered;          /* the child running now answered once */
  uint32_t seq;          /* the newest request sent */
  int pending;           /* request seq not answered yet */
  uint64_t sent_ms;      /* when request seq went out */
  uint64_t started_ms, next_ms, backoff_ms;
  /* The block: the newest reply accepted (the GPU families), sampled no
   * earlier than blk_ms (its request's sending). blk_ok: from the child
   * running now; blk_any: one was ever taken (the age gauge). */
  char *blk;
  size_t blk_len, blk_cap;
  uint64_t blk_ms;
  int blk_ok, blk_any;
  uint8_t *rx;           /* bytes read, not yet a whole reply */
  size_t rx_len, rx_cap;
};

void gs_put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

uint32_t gs_get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

long gs_parse_reply(const uint8_t *buf, size_t n, uint32_t *seq,
                    const uint8_t **text, uint32_t *len) {
  uint32_t l;
  if (n < GS_HDR_LEN)
    return 0;
  if (gs_get_u32(buf) != GS_REP_MAGIC)
    return RDZV_EPROTO;
  if ((l = gs_get_u32(buf + 8)) > GS_TEXT_MAX)
    return RDZV_EPROTO;
  if (n - GS_HDR_LEN < l)
    return 0;
  *seq = gs_get_u32(buf + 4);
  *text = buf + GS_HDR_LEN;
  *len = l;
  return (long)(GS_HDR_LEN + l);
}

int gs_parse_request(const uint8_t *buf, size_t n, uint32_t *seq) {
  if (n < GS_REQ_LEN || gs_get_u32(buf) != GS_REQ_MAGIC)
    return RDZV_EPROTO;
  *seq = gs_get_u32(buf + 4);
  return 0;
}

/* NVML could see a GPU here: the same test nvml_open made in the agent. */
static int gs_wanted(void) {
  const char *lib = getenv("LAUNCH_NVML_LIBRARY");
  return (lib && lib[0]) || access("/dev/nvidiactl", F_OK) == 0;
}

static int gs_spawn(gs_t *g) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  sigset_t none, dfl;
  char ppid[24];
  char *argv[] = {(char *)"launch", (char *)"gpu-sampler", ppid, g->node,
                  NULL};
  static const int dfl_sigs[] = {SIGPIPE, SIGINT, SIGQUIT, SIGHUP, SIGTERM,
                                 SIGUSR1, SIGUSR2, SIGCHLD, SIGALRM};
  int sv[2], rc;
  pid_t pid;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return -errno;
  /* dup2(3, 3) in the child would keep FD_CLOEXEC on it. */
  if (sv[1] == GS_FD) {
    int hi = fcntl(sv[1], F_DUPFD_CLOEXEC, GS_FD + 1);
    if (hi < 0) {
      rc = -errno;
      close(sv[0]);
      close(sv[1]);
      return rc;
    }
    close(sv[1]);
    sv[1] = hi;
  }
  snprintf(ppid, sizeof(ppid), "%ld", (long)getpid());
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], GS_FD);
  /* Whatever the agent holds without FD_CLOEXEC stays with the agent. */
  posix_spawn_file_actions_addclosefrom_np(&fa, GS_FD + 1);
  posix_spawnattr_init(&attr);
  sigemptyset(&none);
  sigemptyset(&dfl);
  for (size_t i = 0; i < LU_ARRAY_SIZE(dfl_sigs); i++)
    sigaddset(&dfl, dfl_sigs[i]);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  /* Its own process group: a Ctrl-C at the terminal is the agent's to
   * handle; the sampler goes when the agent ends it or dies. */
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
  rc = posix_spawn(&pid, g->exe, &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(sv[1]);
  g->started_ms = lu_now_ms();
  if (rc != 0) {
    close(sv[0]);
    return -rc;
  }
  g->fd = sv[0];
  g->answered = 0;
  g->pending = 0;
  g->blk_ok = 0;
  g->rx_len = 0;
  atomic_store(&g->pid, (int)pid);
  return 0;
}

static void gs_start(gs_t *g) {
  int rc = gs_spawn(g);
  if (rc != 0) {
    g->next_ms = g->started_ms + g->backoff_ms;
    LU_WARN(&g->log, "cannot start the GPU sampler (%s gpu-sampler): %s; "
            "no GPU series, trying again in %.0f s", g->exe, strerror(-rc),
            (double)g->backoff_ms / 1000);
    g->backoff_ms = LU_MIN(g->backoff_ms * 2, GS_BACKOFF_MAX_MS);
  }
}

/* The child exited (status from waitpid; known 0: reaped elsewhere). */
static void gs_died(gs_t *g, pid_t pid, int status, int known) {
  char why[64];
  close(g->fd);
  g->fd = -1;
  g->pending = 0;
  g->blk_ok = 0; /* its samples are not served: up 0 until the next one's */
  atomic_store(&g->pid, 0);
  if (known && WIFEXITED(status) && WEXITSTATUS(status) == GS_EXIT_NO_GPU) {
    g->gone = 1;
    LU_INFO(&g->log, "NVML sees no GPU here: no GPU series");
    return;
  }
  /* Dead before it ever answered, within its first 10 s: a sampler that
   * cannot run here (its NVML crashes), started less and less often. */
  g->backoff_ms = g->answered || lu_now_ms() - g->started_ms >= GS_BACKOFF_MS
                      ? GS_BACKOFF_MS
                      : LU_MIN(g->backoff_ms * 2, GS_BACKOFF_MAX_MS);
  g->next_ms = g->started_ms + g->backoff_ms;
  if (!known)
    snprintf(why, sizeof(why), "ended (reaped elsewhere)");
  else if (WIFSIGNALED(status))
    snprintf(why, sizeof(why), "was killed by signal %d", WTERMSIG(status));
  else
    snprintf(why, sizeof(why), "exited with status %d", WEXITSTATUS(status));
  LU_WARN(&g->log, "the GPU sampler (pid %d) %s; no GPU series until it is "
          "started again, in %.0f s", (int)pid, why,
          (double)(g->next_ms > lu_now_ms() ? g->next_ms - lu_now_ms() : 0) /
              1000);
}

/* Reap the child if it exited, waiting up to wait_ms for it. RET 1 when
 * it is gone. */
static int gs_reap(gs_t *g, int wait_ms) {
  pid_t pid = atomic_load(&g->pid);
  struct timespec ts = {0, 5 * 1000000};
  if (pid <= 0)
    return 1;
  for (int t = 0;; t += 5) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      gs_died(g, pid, status, 1);
      return 1;
    }
    if (r < 0 && errno == ECHILD) {
      gs_died(g, pid, 0, 0);
      return 1;
    }
    if (t >= wait_ms)
      return 0;
    nanosleep(&ts, NULL);
  }
}

/* Kill a child that broke the protocol, and reap it within wait_ms (the
 * loop's prefetch waits for nothing: the next tick reaps it). */
static void gs_kill(gs_t *g, const char *why, int wait_ms) {
  pid_t pid = atomic_load(&g->pid);
  if (pid <= 0)
    return;
  LU_WARN(&g->log, "the GPU sampler (pid %d) %s: killed", (int)pid, why);
  kill(pid, SIGKILL);
  /* Nothing more is taken from it (read next: its end closed). */
  g->rx_len = 0;
  g->pending = 0;
  g->blk_ok = 0;
  gs_reap(g, wait_ms);
}

/* The newest block is served: taken at most GS_FRESH_MS ago from the child
 * running now. */
static int gs_fresh(const gs_t *g, uint64_t now) {
  return g->blk_ok && now - g->blk_ms <= GS_FRESH_MS;
}

/* Send request seq + 1. RET 1 sent, 0 not (its socket is full: it is
 * hung), -1 its end is closed or the child was killed. */
static int gs_send(gs_t *g, int kill_wait_ms) {
  uint8_t req[GS_REQ_LEN];
  ssize_t n;
  gs_put_u32(req, GS_REQ_MAGIC);
  gs_put_u32(req + 4, g->seq + 1);
  n = send(g->fd, req, sizeof(req), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == (ssize_t)sizeof(req)) {
    g->seq++;
    g->sent_ms = lu_now_ms();
    g->pending = 1;
    return 1;
  }
  if (n < 0)
    return errno == EAGAIN ? 0 : -1;
  /* Part of a request: the stream is cut, a hung child never read it. */
  gs_kill(g, "reads no requests (its socket is full)", kill_wait_ms);
  return -1;
}

/* Take the whole replies in rx: the newest request's becomes the block,
 * the others are late and discarded. RET 0, -1 malformed (killed). */
static int gs_take(gs_t *g, int kill_wait_ms) {
  uint32_t seq, len;
  const uint8_t *text;
  long r;
  while ((r = gs_parse_reply(g->rx, g->rx_len, &seq, &text, &len)) > 0) {
    if (seq == g->seq && g->pending) {
      if (len > g->blk_cap) {
        char *nb = realloc(g->blk, len);
        if (nb == NULL)
          len = 0; /* a block without GPU families; the next is whole */
        else
          g->blk = nb, g->blk_cap = len;
      }
      if (len > 0)
        memcpy(g->blk, text, len);
      g->blk_len = len;
      g->blk_ms = g->sent_ms; /* sampled after the request went out */
      g->blk_ok = g->blk_any = 1;
      g->pending = 0;
      g->answered = 1;
      g->backoff_ms = GS_BACKOFF_MS;
    }
    memmove(g->rx, g->rx + r, g->rx_len - (size_t)r);
    g->rx_len -= (size_t)r;
  }
  if (r < 0) {
    gs_kill(g, "sent a malformed reply", kill_wait_ms);
    return -1;
  }
  return 0;
}

/* Read and take what the child sent, without waiting. RET 0, -1 its end
 * closed or failed (it is exiting: the caller reaps it) or it was killed. */
static int gs_drain(gs_t *g, int kill_wait_ms) {
  for (;;) {
    ssize_t n;
    if (gs_take(g, kill_wait_ms) < 0)
      return -1;
    if (g->rx_cap - g->rx_len < 65536) {
      size_t cap = LU_MIN(g->rx_len + 65536, (size_t)GS_HDR_LEN + GS_TEXT_MAX);
      uint8_t *nb = cap > g->rx_cap ? realloc(g->rx, cap) : g->rx;
      if (nb == NULL)
        return 0; /* read later */
      g->rx = nb;
      g->rx_cap = LU_MAX(cap, g->rx_cap);
    }
    n = recv(g->fd, g->rx + g->rx_len, g->rx_cap - g->rx_len, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
      return -1;
    if (n < 0 && errno == EAGAIN)
      return 0; /* all read */
    if (n > 0)
      g->rx_len += (size_t)n;
  }
}

/* A scrape without a fresh block: ask, and wait GS_WAIT_MS at most for
 * the reply. RET 1 answered, 0 late, -1 its end closed or it was killed. */
static int gs_ask(gs_t *g) {
  uint64_t deadline = lu_now_ms() + GS_WAIT_MS, now;
  int r = gs_send(g, 2000);
  if (r <= 0)
    return r; /* 0: hung with a full socket */
  for (;;) {
    struct pollfd p = {g->fd, POLLIN, 0};
    if (gs_drain(g, 2000) < 0)
      return -1;
    if (!g->pending)
      return 1;
    if ((now = lu_now_ms()) >= deadline ||
        poll(&p, 1, (int)(deadline - now)) == 0)
      return 0; /* late: this scrape goes without */
  }
}

int gs_open(const char *node, gs_t **out) {
  gs_t *g;
  const char *exe = getenv("LAUNCH_GPU_SAMPLER");
  *out = NULL;
  if (!gs_wanted())
    return 0; /* no NVML here: no child at all */
  if (!(exe && exe[0]) && launch_cmd_gpu_sampler == NULL)
    return 0; /* not `launch`, and no sampler named */
  if ((g = calloc(1, sizeof(*g))) == NULL)
    return RDZV_ENOMEM;
  pthread_mutex_init(&g->mu, NULL);
  lu_log_init(&g->log, "launch metrics");
  lu_strlcpy(g->node, node, sizeof(g->node));
  lu_strlcpy(g->exe, exe && exe[0] ? exe : "/proc/self/exe", sizeof(g->exe));
  g->fd = -1;
  g->backoff_ms = GS_BACKOFF_MS;
  pthread_mutex_lock(&g->mu);
  gs_start(g);
  pthread_mutex_unlock(&g->mu);
  *out = g;
  return 0;
}


void gs_render(gs_t *g, lu_buf_t *b) {
  char lab[300];
  uint64_t now;
  int up;
  if (g == NULL)
    return;
  pthread_mutex_lock(&g->mu);
  /* One that died since is reaped: this scrape is without. None is
   * started here: gs_refresh(g, 1) does, on the owner's loop. */
  if (atomic_load(&g->pid) > 0 && !gs_reap(g, 0)) {
    /* The prefetch's reply when it came; without a fresh block (the first
     * scrape, a sampler hung or started again), a request of our own. */
    int r = gs_drain(g, 2000);
    if (r == 0 && !gs_fresh(g, lu_now_ms()))
      r = gs_ask(g);
    /* Its end closed: reaped now (an exit takes a moment); late: kept. */
    if (r < 0) {
      g->blk_ok = 0;
      gs_reap(g, 100);
    }
  }
  now = lu_now_ms();
  up = atomic_load(&g->pid) > 0 && gs_fresh(g, now);
  if (!g->gone) {
    snprintf(lab, sizeof(lab), "node=\"%s\"", g->node);
    met_family(b, "launch_gpu_sampler_up", "gauge",
               "1 when the GPU sampler (NVML in a child process of launch) "
               "gave the GPU series of this scrape, sampled at most 2.5 s "
               "ago; 0 when it was late or not running: then no GPU series");
    met_sample(b, "launch_gpu_sampler_up", lab, up);
    if (g->blk_any) {
      met_family(b, "launch_gpu_sample_age_seconds", "gauge",
                 "age of the newest GPU sample the GPU sampler gave (at "
                 "most): its series are served while it is 2.5 s at most");
      met_sample(b, "launch_gpu_sample_age_seconds", lab,
                 (double)(now - g->blk_ms) / 1000);
    }
    if (up && g->blk_len > 0)
      lu_buf_put(b, g->blk, g->blk_len);
  }
  pthread_mutex_unlock(&g->mu);
}

void gs_refresh(gs_t *g, int start) {
  if (g == NULL || pthread_mutex_trylock(&g->mu) != 0)
    return;
  if (atomic_load(&g->pid) > 0)
    gs_reap(g, 0);
  if (start && !g->gone && atomic_load(&g->pid) == 0 &&
      lu_now_ms() >= g->next_ms)
    gs_start(g);
  /* The prefetch, once a second: take the reply that came, ask for the
   * next sample unless a request is outstanding (a hung sampler gets one
   * request, not one a second). Nothing here waits. */
  if (start && atomic_load(&g->pid) > 0) {
    int r = gs_drain(g, 0);
    if (r == 0 && !g->pending)
      r = gs_send(g, 0);
    if (r < 0) {
      g->blk_ok = 0;
      gs_reap(g, 0);
    }
  }
  pthread_mutex_unlock(&g->mu);
}

pid_t gs_pid(const gs_t *g) {
  return g ? (pid_t)atomic_load(&((gs_t *)g)->pid) : 0;
}

void gs_close(gs_t *g) {
  pid_t pid;
  if (g == NULL)
    return;
  pthread_mutex_lock(&g->mu);
  if ((pid = atomic_load(&g->pid)) > 0) {
    /* The warning of gs_died is not for an end we asked for. */
    g->log.level = LU_LOG_ERROR;
    kill(pid, SIGTERM);
    if (!gs_reap(g, 1000)) {
      kill(pid, SIGKILL);
      gs_reap(g, 2000); /* a process in the driver (D state) may stay */
    }
  }
  if (g->fd >= 0)
    close(g->fd);
  pthread_mutex_unlock(&g->mu);
  pthread_mutex_destroy(&g->mu);
  free(g->rx);
  free(g->blk);
  free(g);
}
