/* torchver.c - the version of the PyTorch the workers will import, found
 * without importing it (that costs seconds): which interpreter runs the
 * program, then torch/version.py or torch-*.dist-info/METADATA in the
 * directories that interpreter's sys.path would hold.
 *
 * The interpreter is PYTHON_EXEC (or python3) for a .py program or
 * --module, the program itself when it is named python*, or its shebang's.
 * Its sys.path, as CPython builds it: PYTHONPATH, then the virtual
 * environment's site-packages (pyvenv.cfg next to its bin/), the user's
 * ~/.local, the prefix's site-packages and Debian's dist-packages. */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* The first line of path starting with key, after it, into out. */
static int line_value(const char *path, const char *key, char *out,
                      size_t cap) {
  FILE *f = fopen_regular(path);
  char line[512];
  size_t kl = strlen(key);
  int found = 0;
  if (f == NULL)
    return 0;
  for (int n = 0; n < 400 && fgets(line, sizeof(line), f); n++)
    if (strncmp(line, key, kl) == 0) {
      lu_strlcpy(out, line + kl, cap);
      out[strcspn(out, "\r\n")] = '\0';
      found = 1;
      break;
    }
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

/* The interpreter of a script's "#!" line, into out. RET 0 or -1. */
static int shebang(const char *file, char *out, size_t cap) {
  FILE *f = fopen_regular(file);
  char line[512], *p, *arg;
  if (f == NULL)
    return -1;
  p = fgets(line, sizeof(line), f);
  fclose(f);
  if (p == NULL || strncmp(line, "#!", 2) != 0)
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
      /* the sys.path entries of a prefix, in CPython's (and Debian's)
       * order: X.Y filled in where the entry has it */
      static const struct { const char *head, *tail; } sub[] = {
          {"lib/python", "/site-packages"}, {"local/lib/python", "/dist-packages"},
          {"lib/python", "/dist-packages"}, {"lib/python3/dist-packages", NULL}};
      const char *home = sched_getenv(c->environ, "HOME");
      const char *top = strcmp(prefix, "/") ? prefix : "";
      int venv = pass == 0;
      /* the user's site, unless a virtual environment hides it */
      if (!venv && home && pyver[0]) {
        snprintf(dir, sizeof(dir), "%s/.local/lib/python%s/site-packages",
                 home, pyver);
        if (torch_in(dir, &ver, where, wl) == 0)
          return ver;
      }
      for (size_t i = 0; i < LU_ARRAY_SIZE(sub); i++) {
        if (sub[i].tail && pyver[0] == '\0')
          continue;
        snprintf(dir, sizeof(dir), "%.3000s/%s%s%s", top, sub[i].head,
                 sub[i].tail ? pyver : "", sub[i].tail ? sub[i].tail : "");
        if (is_dir(dir) && torch_in(dir, &ver, where, wl) == 0)
          return ver;
      }
      if (venv) /* include-system-site-packages is rare: stop here */
        break;
    }
  }
  return 0;
}
