/* rt_standby.c - a standby worker (rt.h: rt_standby_wait): pay the
 * start-up, say ready, wait for a rank's environment. The agent's side is
 * workers/standby.c; the handover is a uint32_t length in host order, then
 * NUL-terminated KEY=VALUE strings. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt.h"
#include "rt_int.h"

#define SB_ENV_MAX (16u << 20) /* a rank's environment is far smaller */

/* RET 0, -EPIPE at EOF, -errno. */
static int sb_read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -errno;
    if (r == 0)
      return -EPIPE;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

int rt__standby_check(const char *blob, size_t len, char *why, size_t wn) {
  if (len == 0 || blob[len - 1] != '\0') {
    snprintf(why, wn, "%zu bytes, not NUL-terminated", len);
    return RDZV_EINVAL;
  }
  for (size_t at = 0; at < len; at += strlen(blob + at) + 1)
    if (strchr(blob + at, '=') == NULL || blob[at] == '=') {
      snprintf(why, wn, "it holds '%.60s', no KEY=VALUE", blob + at);
      return RDZV_EINVAL;
    }
  return 0;
}

/* Replace the environment with blob's strings. RET 0 or RDZV_EINVAL. */
static int sb_set_env(const rt_who_t *who, char *blob, size_t len) {
  char why[128];
  if (rt__standby_check(blob, len, why, sizeof(why)) != 0) {
    rt__logf(who, "the agent's rank environment is malformed: %s", why);
    return RDZV_EINVAL;
  }
  if (clearenv() != 0)
    return -ENOMEM;
  for (size_t at = 0, n; at < len; at += n + 1) {
    char *kv = blob + at, *eq = strchr(kv, '=');
    n = strlen(kv);
    *eq = '\0';
    if (setenv(kv, eq + 1, 1) != 0)
      return -errno;
  }
  return 0;
}

int rt_standby_wait(const rt_options_t *opt, rt_standby_warm_fn warm,
                    void *arg) {
  const char *v = getenv("LAUNCH_STANDBY_FD"), *lr = getenv("LOCAL_RANK");
  rt_who_t who;
  rt_gpu_t *gpu = NULL;
  struct stat st;
  uint32_t n32;
  char *end, *blob;
  long fd;
  int rc, device = -1, cc = 0, local_rank = 0;
  if (v == NULL || v[0] == '\0')
    return 0;
  memset(&who, 0, sizeof(who));
  who.rank = -1;
  if (lr && lr[0])
    local_rank = atoi(lr);
  snprintf(who.text, sizeof(who.text), "standby of local rank %d",
           local_rank);
  fd = strtol(v, &end, 10);
  if (*end != '\0' || fd < 0 || fd > 1 << 20 || fstat((int)fd, &st) != 0 ||
      !S_ISSOCK(st.st_mode)) {
    rt__logf(&who, "LAUNCH_STANDBY_FD=%s is not launch's socket: start the "
             "program under launch --standby, or unset the variable", v);
    return RDZV_EINVAL;
  }
  /* Nothing this process starts inherits it. */
  (void)unsetenv("LAUNCH_STANDBY_FD");
  if (opt == NULL || opt->device != RT_DEVICE_CPU) {
    const char *why = "";
    rc = rt__gpu_open(&who, local_rank, &gpu, &why);
    if (rc == 0) {
      device = rt__gpu_device(gpu);
      cc = rt__gpu_cc(gpu);
    } else if (!(rc == RDZV_ENOTSUP && (opt == NULL ||
                                         opt->device == RT_DEVICE_AUTO))) {
      if (rc == RDZV_ENOTSUP)
        rt__logf(&who, "a GPU was asked for, but %s", why);
      close((int)fd);
      return rc;
    }
  }
  if (warm && (rc = warm(arg, device, cc)) != 0) {
    rt__gpu_close(gpu);
    close((int)fd);
    return rc;
  }
  /* Ready: the agent may hand this process a rank from now on. */
  do
    rc = (int)write((int)fd, "R", 1);
  while (rc < 0 && errno == EINTR);
  if (rc != 1 || (rc = sb_read_all((int)fd, &n32, sizeof(n32))) != 0) {
    rt__gpu_close(gpu);
    close((int)fd);
    return rc == 0 || rc == 1 ? -EPIPE : rc;
  }
  if (n32 == 0 || n32 > SB_ENV_MAX || (blob = malloc(n32)) == NULL) {
    rt__logf(&who, "the agent's rank environment has a bad size (%u bytes)",
             (unsigned)n32);
    rt__gpu_close(gpu);
    close((int)fd);
    return RDZV_EINVAL;
  }
  rc = sb_read_all((int)fd, blob, n32);
  close((int)fd);
  if (rc == 0)
    rc = sb_set_env(&who, blob, n32);
  free(blob);
  /* rt_init opens the device again; the context the trainer made stays
   * (the CUDA runtime holds the primary context). */
  rt__gpu_close(gpu);
  return rc == 0 ? 1 : rc;
}
