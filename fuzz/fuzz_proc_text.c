/* fuzz_proc_text.c - the /proc files launch parses, as text (each parser
 * apart from its read, exposed by its module's header):
 *   0 /proc/PID/stat: hang__stat_state (hang.c proc_state),
 *     wk__stat_start (helpers.c wk_start_time), wk__stat_exit (workers.c
 *     wk_exit_status), wk__stat_proc (containment.c wk_proc_list);
 *   1 /proc/stat and /proc/meminfo: met_parse_stat_cpu, met_parse_meminfo
 *     (metrics.c node_cpu, node_mem);
 *   2 /proc/net/tcp: launch__listen_inode_in (netaddr.c listen_inode,
 *     launch_port_holder), the port from the input's next two bytes;
 *   3 /proc/thread-self/schedstat: srv__schedstat_wait (srv_loop.c
 *     queued_ns);
 *   4 /proc/self/cgroup, then after a NUL byte /proc/self/mountinfo:
 *     wk__cg_dir (containment.c wk_cg_self_dir).
 * The input is the selector byte (mod 5), then the text; every parser
 * runs on what its file would hold, bounded as its read is (1023 bytes
 * for a stat file, 95 for schedstat).
 *
 * Invariants checked: a state letter is the byte after the last ") ";
 * a process's state comes out as hang.c reads it; the cgroup directory
 * is NUL-terminated within its buffer and starts with the mount point. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hang.h"
#include "launch.h"
#include "metrics.h"
#include "srv_int.h"
#include "wk_int.h"

static char *str(const uint8_t *d, size_t n, size_t max) {
  char *s;
  if (n > max)
    n = max;
  if ((s = malloc(n + 1)) == NULL)
    abort();
  memcpy(s, d, n);
  s[n] = '\0';
  return s;
}

static FILE *file_of(const uint8_t *d, size_t n) {
  /* fmemopen of 0 bytes fails on older glibc: an empty file then */
  static const char empty[1];
  return n ? fmemopen((void *)d, n, "r") : fmemopen((void *)empty, 1, "r");
}

static void stat_file(const uint8_t *d, size_t n) {
  char *s = str(d, n, 1023);
  size_t len = strlen(s);
  char st = hang__stat_state(s);
  wk_proc_t x;
  int status = 0;
  (void)wk__stat_start(s, len);
  (void)wk__stat_exit(s, &status);
  if (wk__stat_proc(s, &x) == 0)
    FUZZ_CHECK(st == '?' || x.state == st);
  free(s);
}

static void cpu_mem(const uint8_t *d, size_t n) {
  unsigned long long v[8], total, avail;
  FILE *f = file_of(d, n);
  if (f == NULL)
    return;
  (void)met_parse_stat_cpu(f, v);
  rewind(f);
  met_parse_meminfo(f, &total, &avail);
  fclose(f);
}

static void tcp_table(const uint8_t *d, size_t n) {
  FILE *f;
  int port;
  if (n < 2)
    return;
  port = d[0] << 8 | d[1];
  if ((f = file_of(d + 2, n - 2)) == NULL)
    return;
  (void)launch__listen_inode_in(f, port);
  fclose(f);
}

static void schedstat(const uint8_t *d, size_t n) {
  char *s = str(d, n, 95);
  (void)srv__schedstat_wait(s);
  free(s);
}

static void cgroup(const uint8_t *d, size_t n) {
  const uint8_t *nul = memchr(d, 0, n);
  size_t a = nul ? (size_t)(nul - d) : n;
  char out[PATH_MAX], why[256];
  FILE *cg, *mi;
  if ((cg = file_of(d, a)) == NULL)
    return;
  if ((mi = nul ? file_of(nul + 1, n - a - 1) : file_of(d, 0)) == NULL) {
    fclose(cg);
    return;
  }
  memset(out, 'x', sizeof(out));
  if (wk__cg_dir(cg, mi, out, sizeof(out), why, sizeof(why)) == 0)
    FUZZ_CHECK(memchr(out, 0, sizeof(out)) != NULL);
  fclose(cg);
  fclose(mi);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 65536)
    return 0;
  switch (data[0] % 5) {
  case 0: stat_file(data + 1, size - 1); break;
  case 1: cpu_mem(data + 1, size - 1); break;
  case 2: tcp_table(data + 1, size - 1); break;
  case 3: schedstat(data + 1, size - 1); break;
  default: cgroup(data + 1, size - 1); break;
  }
  return 0;
}
