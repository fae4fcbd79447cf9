/* bench_timeit.c - run a command N times and time each run with
 * CLOCK_MONOTONIC from just before fork to the return of wait4, so that
 * the figure is the command's launch-to-exit and nothing of the driver's
 * (a Python driver adds a millisecond or more of its own per run).
 *
 *   bench_timeit [-n RUNS] [-w WARMUP] [-o FILE] -- COMMAND [ARGS...]
 *
 * The command's stdin is /dev/null, its stdout and stderr go to FILE
 * (default /dev/null; the same file for every run, appended). One line per
 * measured run on stdout: "<wall_ms> <exit status> <maxrss_kb>", where
 * exit status is the code or 128+signal and maxrss_kb is wait4's
 * ru_maxrss (the largest resident set of the command or of any descendant
 * it waited for). Warm-up runs are not printed. Exit 0 when every run
 * exited 0, else 1. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int run_once(char **cmd, int out_fd, double *ms, long *maxrss) {
  struct rusage ru;
  int status;
  pid_t pid, r;
  double t0 = now_ms();
  if ((pid = fork()) < 0) {
    perror("bench_timeit: fork");
    return -1;
  }
  if (pid == 0) {
    int in = open("/dev/null", O_RDONLY);
    if (in < 0 || dup2(in, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0)
      _exit(126);
    execvp(cmd[0], cmd);
    dprintf(out_fd, "bench_timeit: cannot execute %s: %s\n", cmd[0],
            strerror(errno));
    _exit(127);
  }
  do
    r = wait4(pid, &status, 0, &ru);
  while (r < 0 && errno == EINTR);
  *ms = now_ms() - t0;
  if (r < 0) {
    perror("bench_timeit: wait4");
    return -1;
  }
  *maxrss = ru.ru_maxrss;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv) {
  int runs = 10, warmup = 1, opt, out_fd, failed = 0;
  const char *out = "/dev/null";
  while ((opt = getopt(argc, argv, "+n:w:o:")) != -1) {
    switch (opt) {
    case 'n': runs = atoi(optarg); break;
    case 'w': warmup = atoi(optarg); break;
    case 'o': out = optarg; break;
    default:
      fputs("usage: bench_timeit [-n RUNS] [-w WARMUP] [-o FILE] -- COMMAND "
            "[ARGS...]\n", stderr);
      return 2;
    }
  }
  if (optind >= argc || runs < 1 || warmup < 0) {
    fputs("bench_timeit: no command, or a bad -n/-w\n", stderr);
    return 2;
  }
  out_fd = open(out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out_fd < 0) {
    fprintf(stderr, "bench_timeit: %s: %s\n", out, strerror(errno));
    return 2;
  }
  for (int i = 0; i < warmup + runs; i++) {
    double ms;
    long rss = 0;
    int rc = run_once(argv + optind, out_fd, &ms, &rss);
    if (rc < 0)
      return 1;
    if (rc != 0)
      failed = 1;
    if (i >= warmup) {
      printf("%.3f %d %ld\n", ms, rc, rss);
      fflush(stdout);
    }
  }
  close(out_fd);
  return failed;
}
