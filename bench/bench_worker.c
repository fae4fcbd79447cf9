/* bench_worker.c - the worker of the launcher benchmark (run_launch_bench.py).
 * It runs under launch and under torchrun alike: it reads only torchrun's
 * worker environment (RANK, WORLD_SIZE) and writes CLOCK_MONOTONIC stamps
 * ("<nanoseconds> <pid>", one line per file) that the driver compares
 * with its own clock (same clock, same machine). The pid lets the driver
 * end a worker that outlived its agent.
 *
 * The generation is 0 until DIR/fail.0 exists, 1 after: not
 * TORCHELASTIC_RESTART_COUNT, which torchrun counts per agent (an agent
 * restarted because another node failed keeps its count, #135712).
 *
 *   bench_worker stamp DIR
 *       DIR/start.<gen>.<rank> = the time main() was entered; exit 0.
 *   bench_worker respawn DIR FAIL_RANK
 *       start stamp as above. Generation 0: rank FAIL_RANK waits until all
 *       WORLD_SIZE workers of generation 0 wrote theirs, waits 50 ms more
 *       (every agent idle), writes DIR/fail.0 = the time just before it
 *       exits 1; the other ranks sleep until they are stopped (at most
 *       120 s, then exit 3). Generation 1 exits 0 at once.
 *   bench_worker sleep MS
 *       sleep MS milliseconds, exit 0 (the agent's steady state, for RSS).
 *
 * Every file is written to a temporary name and renamed, so that a reader
 * never sees half a number. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  char *end;
  long x;
  if (v == NULL || *v == '\0')
    return dflt;
  x = strtol(v, &end, 10);
  return *end == '\0' ? x : dflt;
}

/* Write "<ns>\n" to dir/name through dir/.name.tmp and rename. */
static int put_stamp(const char *dir, const char *name, uint64_t ns) {
  char tmp[4096], path[4096], buf[48];
  int fd, n;
  snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  n = snprintf(buf, sizeof(buf), "%" PRIu64 " %ld\n", ns, (long)getpid());
  if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0 ||
      write(fd, buf, (size_t)n) != n || close(fd) != 0 ||
      rename(tmp, path) != 0) {
    fprintf(stderr, "bench_worker: cannot write %s: %s\n", path,
            strerror(errno));
    return -1;
  }
  return 0;
}

/* Files named "<prefix>*" in dir. */
static int count_files(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  struct dirent *e;
  size_t pl = strlen(prefix);
  int n = 0;
  if (d == NULL)
    return -1;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, prefix, pl) == 0)
      n++;
  closedir(d);
  return n;
}

static int usage(void) {
  fputs("usage: bench_worker stamp DIR | respawn DIR FAIL_RANK | sleep MS\n",
        stderr);
  return 2;
}

int main(int argc, char **argv) {
  uint64_t t0 = now_ns();
  long rank = env_long("RANK", 0), world = env_long("WORLD_SIZE", 1);
  long gen;
  char name[64], failed[4096];
  if (argc < 2)
    return usage();
  if (strcmp(argv[1], "sleep") == 0) {
    if (argc != 3)
      return usage();
    sleep_ms(atol(argv[2]));
    return 0;
  }
  if (argc < 3)
    return usage();
  snprintf(failed, sizeof(failed), "%s/fail.0", argv[2]);
  gen = access(failed, F_OK) == 0;
  snprintf(name, sizeof(name), "start.%ld.%ld", gen, rank);
  if (put_stamp(argv[2], name, t0) != 0)
    return 4;
  if (strcmp(argv[1], "stamp") == 0)
    return argc == 3 ? 0 : usage();
  if (strcmp(argv[1], "respawn") != 0 || argc != 4)
    return usage();
  if (gen > 0)
    return 0;
  if (rank == atol(argv[3])) {
    uint64_t deadline = t0 + 120ull * 1000000000u;
    while (count_files(argv[2], "start.0.") < world) {
      if (now_ns() > deadline) {
        fprintf(stderr, "bench_worker: the %ld workers of generation 0 did "
                        "not all start\n", world);
        return 5;
      }
      sleep_ms(1);
    }
    sleep_ms(50);
    if (put_stamp(argv[2], "fail.0", now_ns()) != 0)
      return 4;
    return 1;
  }
  /* Until the agent stops us (SIGTERM acts by default). */
  for (int i = 0; i < 1200; i++)
    sleep_ms(100);
  return 3;
}
