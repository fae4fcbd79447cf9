/* fuzz_run_cfg.c - cfg_parse() as the agent (`launch [options] PROGRAM`),
 * `launch status`, `launch doctor` and `launch topo` call it: every option
 * value of config.c's rows (node counts MIN:MAX, sizes, durations, ports,
 * endpoints, --rdzv-conf KEY=VALUE lists, cpu lists, signals, log specs)
 * and the scheduler's environment that sched.c decodes (launch's own
 * LAUNCH_*, torchrun's PET_*, Kubeflow, Slurm's SLURM_* with its host and
 * task lists, Volcano's VC_*_HOSTS and its svc plugin's host files).
 * fuzz_server_cfg drives `launch server` and `launch ckpt`, which read
 * launch's own variables only.
 *
 * The input is lines: the first byte picks the command; each line is an
 * argument, except NAME=VALUE lines (the environment) and %NAME=LIST lines:
 * the Volcano host file NAME.host, ';' for its newlines, in a directory of
 * this process that LAUNCH_VOLCANO_ROOT names (first in the environment, so
 * that the input's own LAUNCH_VOLCANO_ROOT is never read). `launch env` is
 * left out: its --topology loads whatever file it names. --torch-version
 * is given first (the input may give another), so that no Python is run.
 *
 * Invariants checked: the result is -1 with a one-line message, 0 or 1
 * (--help, --version); on success the node counts and nproc are in range
 * and strings are NUL-terminated in their arrays. */
#include "config.h"
#include "fuzz.h"

#include <dirent.h>
#include <unistd.h>

#define MAXARGS 32
#define MAXFILES 4

static const unsigned cmds[] = {CFG_NEED_PROGRAM, 0, CFG_STATUS_CMD,
                                CFG_DOCTOR_CMD, CFG_TOPO_CMD};

static char root[4096];
static char files[MAXFILES][4200];
static int nfiles;

static void make_root(void) {
  const char *tmp = getenv("TMPDIR");
  if (root[0])
    return;
  snprintf(root, sizeof(root), "%s/fuzz_run_cfg.XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  FUZZ_CHECK(mkdtemp(root) != NULL);
}

static void clean(void) {
  for (int i = 0; i < nfiles; i++)
    unlink(files[i]);
  nfiles = 0;
}

static void atexit_clean(void) {
  clean();
  if (root[0])
    rmdir(root);
}

/* "%NAME=a;b;c": root/NAME.host holding "a\nb\nc". */
static void host_file(char *line) {
  char *eq = strchr(line + 1, '=');
  size_t nlen;
  FILE *f;
  if (eq == NULL || nfiles == MAXFILES)
    return;
  nlen = (size_t)(eq - line - 1);
  if (nlen == 0 || nlen > 64 || memchr(line + 1, '/', nlen) ||
      line[1] == '.')
    return;
  snprintf(files[nfiles], sizeof(files[nfiles]), "%s/%.*s.host", root,
           (int)nlen, line + 1);
  for (char *p = eq + 1; *p; p++)
    if (*p == ';')
      *p = '\n';
  if ((f = fopen(files[nfiles], "w")) == NULL)
    return;
  fputs(eq + 1, f);
  fclose(f);
  nfiles++;
}

static int terminated(const char *s, size_t n) { return memchr(s, '\0', n) != NULL; }

static void check_ok(const cfg_t *c, unsigned flags) {
  FUZZ_CHECK(terminated(c->endpoint_host, sizeof(c->endpoint_host)));
  FUZZ_CHECK(terminated(c->run_id, sizeof(c->run_id)));
  FUZZ_CHECK(terminated(c->endpoint_raw, sizeof(c->endpoint_raw)));
  FUZZ_CHECK(terminated(c->etcd_prefix, sizeof(c->etcd_prefix)));
  FUZZ_CHECK(terminated(c->cpu_bind, sizeof(c->cpu_bind)));
  FUZZ_CHECK(terminated(c->host, sizeof(c->host)));
  FUZZ_CHECK(c->metrics_port >= -1 && c->metrics_port <= 65535);
  FUZZ_CHECK(c->endpoint_port >= 0 && c->endpoint_port <= 65535);
  if (flags & (CFG_STATUS_CMD | CFG_DOCTOR_CMD | CFG_TOPO_CMD))
    return;
  FUZZ_CHECK(c->min_nodes >= 1 && c->min_nodes <= c->max_nodes);
  FUZZ_CHECK(c->nproc >= 1 && c->nproc <= CFG_MAX_NPROC);
  FUZZ_CHECK(c->prog_argc >= 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf, *argv[MAXARGS + 3], *envp[MAXARGS + 2], err[1024], vroot[4200];
  int argc = 2, nenv = 1, rc;
  unsigned flags;
  cfg_t *c;
  if (size == 0)
    return 0;
  if (!root[0]) {
    make_root();
    atexit(atexit_clean);
  }
  flags = cmds[data[0] % (sizeof(cmds) / sizeof(cmds[0]))];
  buf = malloc(size);
  c = malloc(sizeof(*c));
  FUZZ_CHECK(buf != NULL && c != NULL);
  memcpy(buf, data + 1, size - 1);
  buf[size - 1] = '\0';
  argv[0] = (char *)"launch";
  argv[1] = (char *)"--torch-version=2.5";
  snprintf(vroot, sizeof(vroot), "LAUNCH_VOLCANO_ROOT=%s", root);
  envp[0] = vroot;
  for (char *line = buf, *nl; line && argc <= MAXARGS && nenv <= MAXARGS;
       line = nl) {
    if ((nl = strchr(line, '\n')) != NULL)
      *nl++ = '\0';
    /* --help and --version print; their text is not fuzzed */
    if (strncmp(line, "--he", 4) == 0 || strncmp(line, "--ve", 4) == 0 ||
        strcmp(line, "-h") == 0 || strcmp(line, "--h") == 0 ||
        strcmp(line, "--v") == 0)
      continue;
    if (line[0] == '%')
      host_file(line);
    else if (line[0] != '-' && strchr(line, '=') != NULL)
      envp[nenv++] = line;
    else
      argv[argc++] = line;
  }
  argv[argc] = NULL;
  envp[nenv] = NULL;
  err[0] = '\0';
  rc = cfg_parse(argc, argv, envp, flags, c, err, sizeof(err));
  FUZZ_CHECK(rc == -1 || rc == 0 || rc == 1);
  if (rc == -1)
    FUZZ_CHECK(err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL &&
               strchr(err, '\n') == NULL);
  else if (rc == 0)
    check_ok(c, flags);
  cfg_free(c);
  free(c);
  free(buf);
  clean();
  return 0;
}
