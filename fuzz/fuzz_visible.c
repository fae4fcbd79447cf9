/* fuzz_visible.c - what the topology reads about this node's GPUs from
 * outside: CUDA_VISIBLE_DEVICES (aff__visible: indexes, UUIDs and unique
 * UUID prefixes, MIG instances, as the CUDA runtime reads it), a PCI bus
 * id in NVML's or sysfs's spelling (aff__busid_norm) and the driver's
 * /proc/driver/nvidia/version (aff__driver_from_proc, read from a file
 * under a directory of this process).
 *
 * The input is lines: the first byte's low 6 bits are the number of GPUs
 * n, the next n lines their UUIDs ("" unknown), then CUDA_VISIBLE_DEVICES
 * (unset when the first byte's top bit is set), then a bus id; what
 * follows is the version file.
 *
 * Invariants checked: unset picks every GPU in order; otherwise at most n
 * GPUs, each below n and picked once; a normalised bus id is
 * "dddd:bb:dd.f" and normalises to itself; the driver version is
 * NUL-terminated in its buffer and made of digits and dots. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "aff_int.h"
#include "fuzz.h"

static char root[4096], vdir[4200], vfile[4300];

static void cleanup(void) {
  char d[4200];
  if (!root[0])
    return;
  unlink(vfile);
  rmdir(vdir);
  snprintf(d, sizeof(d), "%s/proc/driver", root);
  rmdir(d);
  snprintf(d, sizeof(d), "%s/proc", root);
  rmdir(d);
  rmdir(root);
}

static void make_root(void) {
  const char *tmp = getenv("TMPDIR");
  char d[4200];
  snprintf(root, sizeof(root), "%s/fuzz_visible.XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  FUZZ_CHECK(mkdtemp(root) != NULL);
  snprintf(d, sizeof(d), "%s/proc", root);
  mkdir(d, 0700);
  snprintf(d, sizeof(d), "%s/proc/driver", root);
  mkdir(d, 0700);
  snprintf(vdir, sizeof(vdir), "%s/proc/driver/nvidia", root);
  mkdir(vdir, 0700);
  snprintf(vfile, sizeof(vfile), "%s/version", vdir);
  atexit(cleanup);
}

static char *next_line(char **p) {
  char *line = *p, *nl;
  if (line == NULL)
    return NULL;
  if ((nl = strchr(line, '\n')) != NULL) {
    *nl = '\0';
    *p = nl + 1;
  } else {
    *p = NULL;
  }
  return line;
}

static void check_busid(const char *in) {
  char out[16], again[16];
  if (aff__busid_norm(in, out) != 0)
    return;
  FUZZ_CHECK(strlen(out) == 12 && out[4] == ':' && out[7] == ':' &&
             out[10] == '.');
  FUZZ_CHECK(aff__busid_norm(out, again) == 0 && strcmp(out, again) == 0);
}

static void check_driver(const char *text, size_t len) {
  char ver[32];
  FILE *f;
  if (!root[0])
    make_root();
  if ((f = fopen(vfile, "w")) == NULL)
    return;
  fwrite(text, 1, len, f);
  fclose(f);
  memset(ver, 'x', sizeof(ver));
  ver[sizeof(ver) - 1] = '\0';
  strcpy(ver, "untouched");
  aff__driver_from_proc(root, ver, sizeof(ver));
  FUZZ_CHECK(memchr(ver, '\0', sizeof(ver)) != NULL);
  if (strcmp(ver, "untouched") != 0)
    FUZZ_CHECK(ver[0] && strspn(ver, "0123456789.") == strlen(ver));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf, *p, *cvd, *bus;
  const char *uuids[AFF_MAX_GPUS];
  int n, pick[AFF_MAX_GPUS], got, seen[AFF_MAX_GPUS] = {0};
  if (size == 0)
    return 0;
  n = data[0] & 63;
  buf = malloc(size);
  FUZZ_CHECK(buf != NULL);
  memcpy(buf, data + 1, size - 1);
  buf[size - 1] = '\0';
  p = buf;
  for (int i = 0; i < n; i++) {
    char *u = next_line(&p);
    uuids[i] = u ? u : "";
  }
  cvd = next_line(&p);
  bus = next_line(&p);
  if (data[0] & 128)
    cvd = NULL;
  got = aff__visible(cvd, uuids, n, pick, NULL);
  FUZZ_CHECK(got >= 0 && got <= n);
  for (int j = 0; j < got; j++) {
    FUZZ_CHECK(pick[j] >= 0 && pick[j] < n && !seen[pick[j]]);
    seen[pick[j]] = 1;
    if (cvd == NULL)
      FUZZ_CHECK(pick[j] == j);
  }
  if (cvd == NULL)
    FUZZ_CHECK(got == n);
  if (cvd)
    check_busid(cvd);
  if (bus)
    check_busid(bus);
  if (p)
    check_driver(p, strlen(p));
  free(buf);
  return 0;
}
