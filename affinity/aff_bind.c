/* aff_bind.c - applying a binding: in a forked child before exec, or to
 * the calling thread around a spawn. Raw system calls only, so that the
 * child path allocates nothing and takes no lock (a libuv agent may fork
 * while another thread holds malloc's lock). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <numaif.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aff.h"

/* set_mempolicy(2) reads maxnode - 1 bits. */
#define MAXNODE (AFF_MAX_CPUS)

static int apply_cpus(const aff_binding_t *b) {
  if (b->bind_cpus &&
      syscall(SYS_sched_setaffinity, 0, sizeof(b->cpus.bits), b->cpus.bits) != 0)
    return -errno;
  return 0;
}

static int apply_mem(const aff_binding_t *b) {
  if (b->mem_policy != 0 &&
      syscall(SYS_set_mempolicy, b->mem_policy, b->nodemask,
              (unsigned long)MAXNODE) != 0)
    return -errno;
  return 0;
}

int aff_apply(const aff_binding_t *b) {
  int rc = apply_cpus(b), mrc = apply_mem(b);
  return rc != 0 ? rc : mrc;
}

/* strerror() may format into a buffer and is not async-signal-safe. */
static const char *errname(int e) {
  switch (e) {
  case EINVAL: return "EINVAL (CPUs or node not allowed to this process)";
  case EPERM: return "EPERM (not permitted)";
  case EFAULT: return "EFAULT";
  case ESRCH: return "ESRCH";
  case ENOSYS: return "ENOSYS (no NUMA support in this kernel)";
  case ENOMEM: return "ENOMEM";
  default: return "error";
  }
}

static void put(int fd, const char *s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    s += w;
    n -= (size_t)w;
  }
}

static void tell(int errfd, const char *msg, int rc) {
  if (rc != 0 && errfd >= 0) {
    put(errfd, msg);
    put(errfd, errname(-rc));
    put(errfd, "\n");
  }
}

int aff_apply_child(const aff_binding_t *b, int errfd) {
  int saved = errno;
  int rc = apply_cpus(b), mrc = apply_mem(b);
  /* the CPUs may hold while the node is refused, and the other way round */
  tell(errfd, b->fail_msg, rc);
  tell(errfd, b->mem_fail_msg, mrc);
  errno = saved;
  return rc != 0 ? rc : mrc;
}
