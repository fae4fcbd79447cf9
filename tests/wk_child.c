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
 *                      daemon, orphaned and in its own session), cgdaemon
 *                      (a daemon that moves itself to the root cgroup) or
 *                      subcg (a daemon in sub-cgroups it made under its
 *                      worker's, their top written to FILE.cg); THEN
 *                      wait (sleep until killed) or exit (exit 0) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
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

/* The cgroup2 mount point and this process's cgroup under it. RET 0. */
static int my_cgroup(char *root, size_t rn, char *dir, size_t dn) {
  char line[4096], cg[4096] = "";
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (f == NULL)
    return -1;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "0::", 3) == 0) {
      line[strcspn(line, "\n")] = '\0';
      snprintf(cg, sizeof(cg), "%s", line + 3);
    }
  fclose(f);
  if ((f = fopen("/proc/self/mounts", "r")) == NULL || cg[0] == '\0')
    return -1;
  root[0] = '\0';
  while (fgets(line, sizeof(line), f)) {
    char dev[256], mnt[2048], type[64];
    if (sscanf(line, "%255s %2047s %63s", dev, mnt, type) == 3 &&
        strcmp(type, "cgroup2") == 0) {
      snprintf(root, rn, "%s", mnt);
      break;
    }
  }
  fclose(f);
  if (root[0] == '\0')
    return -1;
  snprintf(dir, dn, "%s%s", root, strcmp(cg, "/") ? cg : "");
  return 0;
}

static int write_str(const char *path, const char *s) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t r;
  if (fd < 0)
    return -1;
  r = write(fd, s, strlen(s));
  close(fd);
  return r == (ssize_t)strlen(s) ? 0 : -1;
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
    if (strcmp(how, "daemon") == 0 || strcmp(how, "cgdaemon") == 0 ||
        strcmp(how, "subcg") == 0) {
      pid_t q = fork();
      if (q != 0)
        _exit(q < 0 ? 94 : 0);
    }
    if (strcmp(how, "cgdaemon") == 0 || strcmp(how, "subcg") == 0) {
      /* A root worker's daemon that leaves its cgroup: to the root one
       * (cgdaemon), or into sub-cgroups it makes two levels down (subcg,
       * whose top directory is written to FILE.cg). */
      char root[2048], dir[4096], sub[4200], cgf[4300];
      if (my_cgroup(root, sizeof(root), dir, sizeof(dir)) != 0)
        _exit(95);
      if (strcmp(how, "cgdaemon") == 0) {
        snprintf(sub, sizeof(sub), "%s", root);
      } else {
        char top[4200];
        FILE *f;
        snprintf(top, sizeof(top), "%s/sub", dir);
        snprintf(sub, sizeof(sub), "%s/sub/deeper", dir);
        if ((mkdir(top, 0755) != 0 && errno != EEXIST) ||
            (mkdir(sub, 0755) != 0 && errno != EEXIST))
          _exit(96);
        snprintf(cgf, sizeof(cgf), "%s.cg", file);
        if ((f = fopen(cgf, "w")) == NULL)
          _exit(97);
        fprintf(f, "%s\n", top);
        fclose(f);
      }
      snprintf(cgf, sizeof(cgf), "%s/cgroup.procs", sub);
      if (write_str(cgf, "0") != 0)
        _exit(98);
    }
    write_pid(file, getpid());
    for (;;)
      pause();
  }
  if (strcmp(how, "setsid") != 0)
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
