/* torchver.c - the version of the PyTorch the workers will import, found
 * without importing it (that costs seconds): which interpreter runs the
 * program, then torch/version.py or torch-*.dist-info/METADATA in the
 * directories that interpreter's sys.path would hold.
 *
 * The interpreter is PYTHON_EXEC (or python3) for a .py program or
 * --module, the program itself when it is named python*, or its shebang's.
 * Its sys.path, as CPython builds it: PYTHONPATH, then the virtual
 * environment's site-packages (pyvenv.cfg next to its bin/), the user's
 * ~/.local, the prefix's site-packages and Debian's dist-packages. An
 * interpreter that is a script (pyenv's shims: `exec pyenv exec python3`)
 * has its prefix elsewhere: then, or when no torch is found next to it, the
 * interpreter is asked once for sys.prefix and its version (without site
 * or torch: milliseconds), and that prefix searched the same way. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "launch.h"
#include "lu.h"

static const char *base_of(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* fopen(path, "r") of a regular file only: a FIFO planted in a sys.path
 * directory must not block launch (issue #24). */
static FILE *fopen_regular(const char *path) {
  int fd = lu_open_regular(path, 0, NULL, NULL, 0);
  FILE *f;
  if (fd < 0)
    return NULL;
  if ((f = fdopen(fd, "r")) == NULL)
    close(fd);
  return f;
}

/* The first line of f starting with key (of its first 400 lines, read
 * 511 bytes at a time), after it, into out. RET 1 found, 0 not. */
int tv__line_value(FILE *f, const char *key, char *out, size_t cap) {
  char line[512];
  size_t kl = strlen(key);
  for (int n = 0; n < 400 && fgets(line, sizeof(line), f); n++)
    if (strncmp(line, key, kl) == 0) {
      lu_strlcpy(out, line + kl, cap);
      out[strcspn(out, "\r\n")] = '\0';
      return 1;
    }
  return 0;
}

/* The first line of path starting with key, after it, into out. */
static int line_value(const char *path, const char *key, char *out,
                      size_t cap) {
  FILE *f = fopen_regular(path);
  int found;
  if (f == NULL)
    return 0;
  found = tv__line_value(f, key, out, cap);
  fclose(f);
  return found;
}

/* torch's version in directory dir (a sys.path entry). RET 0 or -1. */
static int torch_in(const char *dir, int *ver, char *where, size_t wl) {
  char p[PATH_MAX], v[128];
  DIR *d;
  struct dirent *de;
  int rc = -1;
  snprintf(p, sizeof(p), "%s/torch/version.py", dir);
  if (line_value(p, "__version__ = ", v, sizeof(v))) {
    char *q = v + strspn(v, "'\"");
    if (cfg_parse_torch_version(q, ver) == 0) {
      snprintf(where, wl, "%s", p);
      return 0;
    }
  }
  if ((d = opendir(dir)) == NULL)
    return -1;
  while (rc != 0 && (de = readdir(d)) != NULL) {
    size_t l = strlen(de->d_name);
    if (strncmp(de->d_name, "torch-", 6) != 0 || l < 16 ||
        strcmp(de->d_name + l - 10, ".dist-info") != 0)
      continue;
    snprintf(p, sizeof(p), "%s/%s/METADATA", dir, de->d_name);
    if (line_value(p, "Version: ", v, sizeof(v)) &&
        cfg_parse_torch_version(v, ver) == 0) {
      snprintf(where, wl, "%s", p);
      rc = 0;
    }
  }
  closedir(d);
  return rc;
}

/* name found on the PATH of envp, into out. */
static int which(char *const *envp, const char *name, char *out, size_t cap) {
  const char *path = sched_getenv(envp, "PATH");
  if (strchr(name, '/')) {
    lu_strlcpy(out, name, cap);
    return access(out, X_OK) == 0 ? 0 : -1;
  }
  if (path == NULL || *path == '\0')
    path = "/usr/local/bin:/usr/bin:/bin";
  while (*path) {
    size_t k = strcspn(path, ":");
    if (k > 0 && (size_t)snprintf(out, cap, "%.*s/%s", (int)k, path, name) <
                     cap && access(out, X_OK) == 0)
      return 0;
    path += k + (path[k] == ':');
  }
  return -1;
}

/* The interpreter a script's first line (as fgets read it into line,
 * which is changed) names after "#!", into out. RET 0 or -1. */
int tv__shebang(char *line, char *out, size_t cap) {
  char *p, *arg;
  if (strncmp(line, "#!", 2) != 0)
    return -1;
  p = line + 2 + strspn(line + 2, " \t");
  p[strcspn(p, "\r\n")] = '\0';
  arg = p + strcspn(p, " \t");
  if (*arg) {
    *arg++ = '\0';
    arg += strspn(arg, " \t");
  }
  /* #!/usr/bin/env python3 */
  if (!strcmp(p, "/usr/bin/env") || !strcmp(p, "/bin/env")) {
    if (!strncmp(arg, "-S", 2))
      arg += 2 + strspn(arg + 2, " \t");
    arg[strcspn(arg, " \t")] = '\0';
    p = arg;
  }
  if (strncmp(base_of(p), "python", 6) != 0)
    return -1;
  lu_strlcpy(out, p, cap);
  return 0;
}

/* The interpreter of a script's "#!" line, into out. RET 0 or -1. */
static int shebang(const char *file, char *out, size_t cap) {
  FILE *f = fopen_regular(file);
  char line[512], *p;
  if (f == NULL)
    return -1;
  p = fgets(line, sizeof(line), f);
  fclose(f);
  if (p == NULL)
    return -1;
  return tv__shebang(line, out, cap);
}

/* torch in the sys.path entries of prefix, in CPython's (and Debian's)
 * order, X.Y (pyver) filled in where the entry has it; the user's site
 * first, unless prefix is a virtual environment, which hides it. RET 0 or
 * -1. */
static int torch_in_prefix(const cfg_t *c, const char *prefix,
                           const char *pyver, int venv, int *ver, char *where,
                           size_t wl) {
  static const struct { const char *head, *tail; } sub[] = {
      {"lib/python", "/site-packages"}, {"local/lib/python", "/dist-packages"},
      {"lib/python", "/dist-packages"}, {"lib/python3/dist-packages", NULL}};
  const char *home = sched_getenv(c->environ, "HOME");
  const char *top = strcmp(prefix, "/") ? prefix : "";
  char dir[PATH_MAX];
  if (!venv && home && pyver[0]) {
    snprintf(dir, sizeof(dir), "%s/.local/lib/python%s/site-packages", home,
             pyver);
    if (torch_in(dir, ver, where, wl) == 0)
      return 0;
  }
  for (size_t i = 0; i < LU_ARRAY_SIZE(sub); i++) {
    if (sub[i].tail && pyver[0] == '\0')
      continue;
    snprintf(dir, sizeof(dir), "%.3000s/%s%s%s", top, sub[i].head,
             sub[i].tail ? pyver : "", sub[i].tail ? sub[i].tail : "");
    if (is_dir(dir) && torch_in(dir, ver, where, wl) == 0)
      return 0;
  }
  return -1;
}

/* What the interpreter asked by ask_prefix printed (out, a string, which
 * is changed): sys.prefix, then X.Y, a line each, into prefix and pyver.
 * RET 0, or -1 when it is not an absolute prefix and a version. */
int tv__prefix_reply(char *out, char *prefix, size_t pl, char *pyver,
                     size_t vl) {
  char *nl;
  if ((nl = strchr(out, '\n')) == NULL || nl == out)
    return -1;
  *nl = '\0';
  lu_strlcpy(prefix, out, pl);
  lu_strlcpy(pyver, nl + 1, vl);
  pyver[strcspn(pyver, "\r\n")] = '\0';
  return prefix[0] == '/' && isdigit((unsigned char)pyver[0]) ? 0 : -1;
}

/* Ask interp for sys.prefix and its X.Y, in the job's environment (a
 * pyenv shim reads PYENV_VERSION and .python-version), within 2 s. -S: no
 * site, no torch; what is asked costs the interpreter's start only. RET 0
 * or -1. */
static int ask_prefix(const cfg_t *c, const char *interp, char *prefix,
                      size_t pl, char *pyver, size_t vl) {
  char *argv[] = {(char *)interp, (char *)"-S", (char *)"-c",
                  (char *)"import sys; print(sys.prefix); "
                          "print('%d.%d' % sys.version_info[:2])",
                  NULL};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  char out[2 * PATH_MAX];
  size_t len = 0;
  uint64_t end = lu_now_ms() + 2000;
  int fds[2], rc, status;
  pid_t pid;
  if (pipe2(fds, O_CLOEXEC) != 0)
    return -1;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_init(&attr);
  /* its own group: a shim's children are killed with it at the deadline */
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  rc = posix_spawn(&pid, interp, &fa, &attr, argv, c->environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return -1;
  }
  for (;;) {
    struct pollfd p = {fds[0], POLLIN, 0};
    uint64_t now = lu_now_ms();
    ssize_t k;
    if (now >= end || (rc = poll(&p, 1, (int)(end - now))) == 0)
      break;
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc < 0 || (k = read(fds[0], out + len, sizeof(out) - 1 - len)) <= 0)
      break;
    len += (size_t)k;
    if (len == sizeof(out) - 1)
      break;
  }
  close(fds[0]);
  kill(-pid, SIGKILL); /* done or late: nothing of it stays */
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  out[len] = '\0';
  return tv__prefix_reply(out, prefix, pl, pyver, vl);
}

int launch_torch_version(const cfg_t *c, char *where, size_t wl) {
  char interp[PATH_MAX], real[PATH_MAX], dir[PATH_MAX], p[PATH_MAX + 64];
  char pyver[16] = "", *slash;
  const char *prog = c->prog_argc > 0 ? c->prog_argv[0] : NULL, *env;
  size_t len = prog ? strlen(prog) : 0;
  int ver = 0;
  where[0] = '\0';
  if (prog == NULL)
    return 0;
  if (c->prog_mode == CFG_PROG_MODULE || c->prog_mode == CFG_PROG_RUN_PATH ||
      (c->prog_mode == CFG_PROG_AUTO && len > 3 &&
       !strcmp(prog + len - 3, ".py"))) {
    if (which(c->environ, c->python, interp, sizeof(interp)) != 0)
      return 0;
  } else if (!strncmp(base_of(prog), "python", 6)) {
    if (which(c->environ, prog, interp, sizeof(interp)) != 0)
      return 0;
  } else {
    char file[PATH_MAX], named[PATH_MAX];
    if (which(c->environ, prog, file, sizeof(file)) != 0 ||
        shebang(file, named, sizeof(named)) != 0 ||
        which(c->environ, named, interp, sizeof(interp)) != 0)
      return 0;
  }
  /* python3 -> python3.11: the X.Y of lib/pythonX.Y */
  if (realpath(interp, real) == NULL)
    lu_strlcpy(real, interp, sizeof(real));
  {
    const char *b = base_of(real);
    if (!strncmp(b, "python", 6) && isdigit((unsigned char)b[6]) &&
        strchr(b + 6, '.'))
      lu_strlcpy(pyver, b + 6, sizeof(pyver));
  }
  /* PYTHONPATH first, as sys.path */
  if ((env = sched_getenv(c->environ, "PYTHONPATH")) != NULL) {
    while (*env) {
      size_t k = strcspn(env, ":");
      if (k > 0 && k < sizeof(dir)) {
        snprintf(dir, sizeof(dir), "%.*s", (int)k, env);
        if (torch_in(dir, &ver, where, wl) == 0)
          return ver;
      }
      env += k + (env[k] == ':');
    }
  }
  /* <venv>/bin/python: <venv>/pyvenv.cfg, <venv>/lib/pythonX.Y/... */
  for (int pass = 0; pass < 2; pass++) {
    const char *from = pass == 0 ? interp : real;
    char prefix[PATH_MAX];
    lu_strlcpy(prefix, from, sizeof(prefix));
    if ((slash = strrchr(prefix, '/')) == NULL)
      continue;
    *slash = '\0';
    if ((slash = strrchr(prefix, '/')) == NULL)
      continue;
    *slash = '\0';
    if (prefix[0] == '\0')
      lu_strlcpy(prefix, "/", sizeof(prefix));
    snprintf(p, sizeof(p), "%s/pyvenv.cfg", prefix);
    if (pass == 1 || is_file(p)) {
      if (torch_in_prefix(c, prefix, pyver, pass == 0, &ver, where, wl) == 0)
        return ver;
      if (pass == 0) /* include-system-site-packages is rare: stop here */
        break;
    }
  }
  /* A script (a pyenv shim), or an interpreter whose prefix holds no
   * torch here: its own word for where its prefix is. */
  {
    char asked[PATH_MAX], asked_ver[16];
    if (ask_prefix(c, interp, asked, sizeof(asked), asked_ver,
                   sizeof(asked_ver)) == 0) {
      snprintf(p, sizeof(p), "%s/pyvenv.cfg", asked);
      if (torch_in_prefix(c, asked, asked_ver, is_file(p), &ver, where, wl) == 0)
        return ver;
    }
  }
  return 0;
}
