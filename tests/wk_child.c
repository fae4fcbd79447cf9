/* wk_child.c - a worker for the tests of launcher/workers.c. One mode per
 * run:
 *   args ...           argv[2..] to stdout, each followed by a NUL byte
 *   state              what the worker inherited: session, group, parent
 *                      death signal, blocked and ignored signals, open fds
 *   chatty ID N        N lines "ID:seq:<padding>" on stdout and every tenth
 *                      on stderr, each line written in three write() calls
 *   long BYTES         one line of BYTES 'x' on stdout, then "after" with
 *                      no newline
 *   lines N            N lines "line K" on stderr, then exit 7
 *   escape HOW FILE THEN
 *                      start a sleeper outside the worker's process group
 *                      and write its pid to FILE (atomically): HOW setsid
 *                      (a child in a session of its own) or daemon (fork,
 *                      setsid, fork, the middle one exits: the classic
 *                      daemon, orphaned and in its own session); THEN
 *                      wait (sleep until killed) or exit (exit 0) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void put(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t r = write(fd, p, n);
    if (r <= 0)
      exit(90);
    p += r;
    n -= (size_t)r;
  }
}

static int state(void) {
  int pdeath = -1;
  sigset_t blocked;
  unsigned long long bl = 0, ig = 0;
  char fds[512] = "";
  DIR *d;
  struct dirent *e;
  prctl(PR_GET_PDEATHSIG, &pdeath);
  sigprocmask(SIG_SETMASK, NULL, &blocked);
  for (int s = 1; s < 64; s++) {
    struct sigaction sa;
    if (sigismember(&blocked, s) == 1)
      bl |= 1ull << (s - 1);
    if (sigaction(s, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
      ig |= 1ull << (s - 1);
  }
  d = opendir("/proc/self/fd");
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
      continue;
    strncat(fds, " ", sizeof(fds) - strlen(fds) - 1);
    strncat(fds, e->d_name, sizeof(fds) - strlen(fds) - 1);
  }
  if (d)
    closedir(d);
  printf("pid=%d pgid=%d sid=%d pdeathsig=%d blocked=%llx ignored=%llx "
         "fds=%s\n",
         (int)getpid(), (int)getpgrp(), (int)getsid(0), pdeath, bl, ig, fds);
  return 0;
}

static int chatty(const char *id, int n) {
  char line[256];
  for (int i = 0; i < n; i++) {
    int len = snprintf(line, sizeof(line), "%s:%d:%.*s\n", id, i, i % 97,
                       "................................................."
                       "................................................");
    int fd = i % 10 == 9 ? 2 : 1;
    int a = len / 3, b = 2 * len / 3;
    /* Three writes per line: a reader that does not assemble lines would
     * interleave the pieces of two workers. */
    put(fd, line, (size_t)a);
    sched_yield();
    put(fd, line + a, (size_t)(b - a));
    sched_yield();
    put(fd, line + b, (size_t)(len - b));
  }
  return 0;
}

static int long_line(long n) {
  static char buf[65536];
  memset(buf, 'x', sizeof(buf));
  while (n > 0) {
    size_t k = n < (long)sizeof(buf) ? (size_t)n : sizeof(buf);
    put(1, buf, k);
    n -= (long)k;
  }
  put(1, "\nafter", 6);
  return 0;
}

static void write_pid(const char *file, pid_t pid) {
  char tmp[1024];
  FILE *f;
  snprintf(tmp, sizeof(tmp), "%s.tmp", file);
  if ((f = fopen(tmp, "w")) == NULL)
    _exit(91);
  fprintf(f, "%d\n", (int)pid);
  fclose(f);
  if (rename(tmp, file) != 0)
    _exit(92);
}

static int escape(const char *how, const char *file, const char *then) {
  pid_t p = fork();
  if (p < 0)
    return 93;
  if (p == 0) {
    int null = open("/dev/null", O_RDWR);
    /* Hold no pipe of the worker's: a daemon would not. */
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    setsid();
    if (strcmp(how, "daemon") == 0) {
      pid_t q = fork();
      if (q != 0)
        _exit(q < 0 ? 94 : 0);
    }
    write_pid(file, getpid());
    for (;;)
      pause();
  }
  if (strcmp(how, "daemon") == 0)
    waitpid(p, NULL, 0); /* the middle process: gone at once */
  /* The sleeper is up (its pid written) before the worker goes on. */
  for (int i = 0; i < 10000 && access(file, F_OK) != 0; i++)
    usleep(1000);
  if (strcmp(then, "exit") == 0)
    return 0;
  for (;;)
    pause();
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "args") == 0) {
    for (int i = 2; i < argc; i++)
      put(1, argv[i], strlen(argv[i]) + 1);
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "state") == 0)
    return state();
  if (argc >= 4 && strcmp(argv[1], "chatty") == 0)
    return chatty(argv[2], atoi(argv[3]));
  if (argc >= 3 && strcmp(argv[1], "long") == 0)
    return long_line(atol(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "lines") == 0) {
    char line[64];
    for (int i = 1; i <= atoi(argv[2]); i++) {
      int len = snprintf(line, sizeof(line), "line %d\n", i);
      put(2, line, (size_t)len);
    }
    return 7;
  }
  if (argc >= 5 && strcmp(argv[1], "escape") == 0)
    return escape(argv[2], argv[3], argv[4]);
  fprintf(stderr, "wk_child: unknown mode\n");
  return 64;
}
