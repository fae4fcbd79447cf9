/* fuzz_sysfs_tree.c - what the agent, `launch topo`, `launch doctor` and the
 * metrics read from /sys and /proc, through a fake root directory (their
 * root prefix, as tests/test_aff_sysfs.c does):
 *   - doc_collect: check_host, check_kernel_settings, check_ib,
 *     check_nics, ... and aff_facts_probe (probe_gpus, PCIe links, IB ports);
 *   - aff_topo_load with a small hwloc XML and io_from_root: the sysfs
 *     discovery (parse_chain, read_hex, read_driver_gpus, gpu_from_sysfs,
 *     aff__nic_ports, aff__pcie_sysfs) and aff__cache_apply over the NVML
 *     cache file ($XDG_RUNTIME_DIR, private to this process);
 *   - aff_gpu_count (the driver's GPU list, CUDA_VISIBLE_DEVICES);
 *   - the metrics' node_ib (met_set_sysfs_root).
 *
 * The input is lines, each one entry of the tree:
 *   f REL TEXT    a file REL (under the root) holding TEXT, where \n, \t,
 *                 \\ and \xHH are unescaped;
 *   l REL TARGET  a symbolic link (relative, never out of the root);
 *   c TEXT        the NVML cache file (escaped as for f);
 *   v CVD         CUDA_VISIBLE_DEVICES (unset when there is no v line).
 * Files are written before links, so no write goes through a link; REL
 * has no "." or ".." component.
 *
 * Invariants checked: nothing crashes or leaks; the GPU count is at most
 * the topology's GPUs limit; the doctor report has a host. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aff.h"
#include "aff_int.h"
#include "doctor.h"
#include "fuzz.h"
#include "lu.h"
#include "lu_buf.h"
#include "metrics.h"

static const char xml_text[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
    "<topology version=\"2.0\">\n"
    " <object type=\"Machine\" os_index=\"0\" cpuset=\"0x00000003\" "
    "complete_cpuset=\"0x00000003\" allowed_cpuset=\"0x00000003\" "
    "nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" "
    "allowed_nodeset=\"0x00000001\" gp_index=\"1\">\n"
    "  <object type=\"Package\" os_index=\"0\" cpuset=\"0x00000003\" "
    "complete_cpuset=\"0x00000003\" nodeset=\"0x00000001\" "
    "complete_nodeset=\"0x00000001\" gp_index=\"3\">\n"
    "   <object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x00000003\" "
    "complete_cpuset=\"0x00000003\" nodeset=\"0x00000001\" "
    "complete_nodeset=\"0x00000001\" gp_index=\"14\" "
    "local_memory=\"7208128512\"/>\n"
    "   <object type=\"Core\" os_index=\"0\" cpuset=\"0x00000001\" "
    "complete_cpuset=\"0x00000001\" nodeset=\"0x00000001\" "
    "complete_nodeset=\"0x00000001\" gp_index=\"4\">\n"
    "    <object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\" "
    "complete_cpuset=\"0x00000001\" nodeset=\"0x00000001\" "
    "complete_nodeset=\"0x00000001\" gp_index=\"5\"/>\n"
    "   </object>\n"
    "   <object type=\"Core\" os_index=\"1\" cpuset=\"0x00000002\" "
    "complete_cpuset=\"0x00000002\" nodeset=\"0x00000001\" "
    "complete_nodeset=\"0x00000001\" gp_index=\"6\">\n"
    "    <object type=\"PU\" os_index=\"1\" cpuset=\"0x00000002\" "
    "complete_cpuset=\"0x00000002\" nodeset=\"0x00000001\" "
    "complete_nodeset=\"0x00000001\" gp_index=\"7\"/>\n"
    "   </object>\n"
    "  </object>\n"
    " </object>\n"
    "</topology>\n";

static char base[4096], root[4200], xml[4200], cache[4300], xdg[4200];

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw) {
  (void)sb;
  (void)ftw;
  if (flag == FTW_DP)
    rmdir(p);
  else
    unlink(p);
  return 0;
}

static void clear_root(void) {
  if (root[0])
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Everything under base: the libraries' cache files in xdg included
 * (launch-topo-UID.topo as well as the .cache named here). */
static void cleanup(void) {
  if (base[0])
    nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void) {
  const char *tmp = getenv("TMPDIR");
  FILE *f;
  snprintf(base, sizeof(base), "%s/fuzz_sysfs.XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  FUZZ_CHECK(mkdtemp(base) != NULL);
  snprintf(root, sizeof(root), "%s/root", base);
  snprintf(xml, sizeof(xml), "%s/topo.xml", base);
  snprintf(xdg, sizeof(xdg), "%s/xdg", base);
  snprintf(cache, sizeof(cache), "%s/launch-topo-%u.cache", xdg,
           (unsigned)geteuid());
  FUZZ_CHECK(mkdir(xdg, 0700) == 0);
  FUZZ_CHECK((f = fopen(xml, "w")) != NULL);
  fputs(xml_text, f);
  fclose(f);
  setenv("XDG_RUNTIME_DIR", xdg, 1);
  unsetenv("LAUNCH_GPU_SAMPLER");
  atexit(cleanup);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Unescape s in place. RET its length. */
static size_t unescape(char *s) {
  char *o = s;
  for (char *p = s; *p; p++) {
    if (*p != '\\' || p[1] == '\0') {
      *o++ = *p;
      continue;
    }
    p++;
    if (*p == 'n')
      *o++ = '\n';
    else if (*p == 't')
      *o++ = '\t';
    else if (*p == 'x' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
      *o++ = (char)(hexval(p[1]) * 16 + hexval(p[2]));
      p += 2;
    } else
      *o++ = *p;
  }
  *o = '\0';
  return (size_t)(o - s);
}

/* A relative path of plain components. RET its depth in directories (the
 * components before the last), -1 when it is not one. */
static int rel_ok(const char *rel) {
  int depth = 0;
  const char *c = rel;
  if (rel[0] == '\0' || rel[0] == '/' || strlen(rel) > 300)
    return -1;
  for (;;) {
    size_t n = strcspn(c, "/");
    if (n == 0 || (n == 1 && c[0] == '.') ||
        (n == 2 && c[0] == '.' && c[1] == '.'))
      return -1;
    if (c[n] == '\0')
      return depth;
    depth++;
    c += n + 1;
  }
}

/* mkdir -p of the directory part of root/rel. RET 0 or -1. */
static int parents(const char *rel) {
  char p[4600];
  size_t at = strlen(root);
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  for (char *s = p + at + 1; (s = strchr(s, '/')) != NULL; s++) {
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
      return -1;
    *s = '/';
  }
  return 0;
}

static void put(const char *path, const char *text, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                0600);
  if (fd < 0)
    return;
  if (n && write(fd, text, n) < 0) {
    /* a short file is as good an input */
  }
  close(fd);
}

/* Does a link at rel to target stay under the root? */
static int target_ok(int depth, const char *target) {
  const char *c = target;
  if (target[0] == '\0' || target[0] == '/')
    return 0;
  for (;;) {
    size_t n = strcspn(c, "/");
    if (n == 2 && c[0] == '.' && c[1] == '.') {
      if (--depth < 0)
        return 0;
    } else if (n > 0 && !(n == 1 && c[0] == '.')) {
      depth++;
    }
    if (c[n] == '\0')
      return 1;
    c += n + 1;
  }
}

static const char *build(char *s) {
  const char *cvd = NULL;
  char *save = NULL, *line;
  char p[4600];
  FUZZ_CHECK(mkdir(root, 0700) == 0);
  /* files first, then links: a write never goes through a link */
  for (int pass = 0; pass < 2; pass++) {
    char *copy = strdup(s);
    FUZZ_CHECK(copy != NULL);
    save = NULL;
    for (line = strtok_r(copy, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
      char kind = line[0], *rel, *arg;
      int depth;
      if (kind == '\0' || line[1] != ' ')
        continue;
      rel = line + 2;
      if (kind == 'c' && pass == 0) {
        put(cache, rel, unescape(rel));
        continue;
      }
      if (kind == 'v' && pass == 0) {
        static char v[512];
        lu_strlcpy(v, rel, sizeof(v));
        cvd = v;
        continue;
      }
      if ((arg = strchr(rel, ' ')) != NULL)
        *arg++ = '\0';
      else
        arg = rel + strlen(rel);
      if ((depth = rel_ok(rel)) < 0 || parents(rel) != 0)
        continue;
      snprintf(p, sizeof(p), "%s/%s", root, rel);
      if (kind == 'f' && pass == 0)
        put(p, arg, unescape(arg));
      else if (kind == 'l' && pass == 1 && target_ok(depth, arg))
        if (symlink(arg, p) != 0)
          continue; /* taken, or not makeable: no link */
    }
    free(copy);
  }
  return cvd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static met_t *met;
  char *s, err[512];
  const char *cvd;
  aff_topo_opts_t o = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t = NULL;
  doc_opts_t dopt = DOC_OPTS_INIT;
  doc_report_t *r = NULL;
  lu_buf_t b = LU_BUF_INIT;
  int n;
  if (size > 16384)
    return 0;
  if (!base[0])
    setup();
  if ((s = malloc(size + 1)) == NULL)
    return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  unlink(cache);
  cvd = build(s);

  dopt.root = root;
  dopt.probe_libs = 0;
  if (doc_collect(&dopt, &r) == 0) {
    FUZZ_CHECK(doc_host(r) != NULL);
    doc_free(r);
  }

  o.xml = xml;
  o.root = root;
  o.io_from_root = 1;
  o.cuda_visible_devices = cvd;
  if (aff_topo_load(&o, &t, err, sizeof(err)) == 0) {
    FUZZ_CHECK(aff_topo_ngpus(t) >= 0 && aff_topo_ngpus(t) <= AFF_MAX_GPUS);
    aff_topo_free(t);
  }
  n = aff_gpu_count(root, cvd);
  FUZZ_CHECK(n >= -1 && n <= AFF_MAX_GPUS);

  if (met == NULL)
    FUZZ_CHECK(met_local("fuzz", &met) == 0);
  met_set_sysfs_root(met, root);
  met_node(met, &b);
  lu_buf_free(&b);

  clear_root();
  free(s);
  return 0;
}
