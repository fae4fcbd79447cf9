/* test_aff_gpu_probe.c - on a GPU machine: the agent's GPU discovery from
 * sysfs and /proc/driver/nvidia (AFF_GPUSRC_AUTO, no GPU library) finds the
 * same mapping as hwloc's PCI tree with NVML (AFF_GPUSRC_NVML, what launch
 * did before) and numbers the GPUs as the CUDA runtime does, for
 * CUDA_VISIBLE_DEVICES given by index, reversed and by UUID, with and
 * without CUDA_DEVICE_ORDER=PCI_BUS_ID; and memory sizes and NVLink, which
 * the sysfs discovery takes from what the NVML load recorded for this boot.
 * Exits 77 where there is no NVIDIA
 * GPU; the CUDA runtime part is skipped (said so) where libcudart is
 * missing. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aff.h"
#include "aff_int.h"
#include "lu.h"
#include "test.h"

static aff_topo_t *load(aff_gpusrc_t src, const char *cvd, const char *order) {
  aff_topo_opts_t o = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t = NULL;
  char err[512] = "";
  o.gpu_source = src;
  o.cuda_visible_devices = cvd;
  o.cuda_device_order = order;
  if (aff_topo_load(&o, &t, err, sizeof(err)) != 0)
    TEST_FAIL("load: %s", err);
  return t;
}

/* The CUDA runtime's visible devices under this environment, in a child
 * (the runtime reads it once per process). OUT busids. RET the count, -1
 * when the runtime is absent. */
static int cudart_order(const char *cvd, const char *order, char busids[][16],
                        int max) {
  int fd[2], status, n = 0;
  pid_t pid;
  ASSERT_EQ(0, pipe(fd));
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    aff_gpu_probe_t g[AFF_MAX_GPUS];
    int k;
    close(fd[0]);
    if (cvd)
      setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
    else
      unsetenv("CUDA_VISIBLE_DEVICES");
    if (order)
      setenv("CUDA_DEVICE_ORDER", order, 1);
    else
      unsetenv("CUDA_DEVICE_ORDER");
    k = aff__cudart_gpus(g, AFF_MAX_GPUS);
    if (write(fd[1], &k, sizeof(k)) != sizeof(k))
      _exit(1);
    for (int i = 0; i < k; i++)
      if (write(fd[1], g[i].busid, 16) != 16)
        _exit(1);
    _exit(0);
  }
  close(fd[1]);
  if (read(fd[0], &n, sizeof(n)) != sizeof(n))
    n = -1;
  for (int i = 0; i < n && i < max; i++)
    if (read(fd[0], busids[i], 16) != 16)
      TEST_FAIL("short read from the CUDA runtime child");
  close(fd[0]);
  /* The runtime's init is slow on big machines, never minutes. */
  if ((status = test_wait(pid, test_ms(120000))) == -1) {
    test_kill(pid);
    TEST_FAIL("the CUDA runtime child did not exit");
  }
  return n;
}

static void same_as_cuda(const char *cvd, const char *order) {
  char busids[AFF_MAX_GPUS][16];
  int n = cudart_order(cvd, order, busids, AFF_MAX_GPUS);
  aff_topo_t *t;
  if (n < 0) {
    printf("CUDA runtime absent: CUDA's own numbering not checked\n");
    return;
  }
  t = load(AFF_GPUSRC_AUTO, cvd ? cvd : NULL, order ? order : "");
  if (n != aff_topo_ngpus(t))
    TEST_FAIL("CUDA_VISIBLE_DEVICES=%s CUDA_DEVICE_ORDER=%s: CUDA sees %d GPUs, "
              "sysfs %d", cvd ? cvd : "(unset)", order ? order : "(unset)", n,
              aff_topo_ngpus(t));
  for (int i = 0; i < n; i++)
    if (strcmp(busids[i], aff_topo_gpu(t, i)->busid) != 0)
      TEST_FAIL("CUDA_VISIBLE_DEVICES=%s CUDA_DEVICE_ORDER=%s: CUDA device %d is "
                "%s, sysfs says %s", cvd ? cvd : "(unset)",
                order ? order : "(unset)", i, busids[i], aff_topo_gpu(t, i)->busid);
  printf("CUDA_VISIBLE_DEVICES=%s CUDA_DEVICE_ORDER=%s: %d GPU(s) in CUDA's "
         "order\n", cvd ? cvd : "(unset)", order ? order : "(unset)", n);
  aff_topo_free(t);
}

static void same_as_nvml(const char *cvd) {
  char diff[8192];
  aff_topo_t *b = load(AFF_GPUSRC_NVML, cvd, "PCI_BUS_ID");
  /* After b (NVML), a finds memory sizes and NVLink in the boot's cache. */
  aff_topo_t *a = load(AFF_GPUSRC_AUTO, cvd, "PCI_BUS_ID");
  int nd = aff_topo_compare(a, b, diff, sizeof(diff));
  for (int i = 0; i < aff_topo_ngpus(a) && i < aff_topo_ngpus(b); i++) {
    if (aff_topo_gpu(a, i)->mem_bytes != aff_topo_gpu(b, i)->mem_bytes)
      TEST_FAIL("GPU%d memory: %llu from the cache, %llu from NVML", i,
                (unsigned long long)aff_topo_gpu(a, i)->mem_bytes,
                (unsigned long long)aff_topo_gpu(b, i)->mem_bytes);
    for (int j = 0; j < aff_topo_ngpus(a) && j < aff_topo_ngpus(b); j++)
      if (aff_topo_nvlink_mbps(a, i, j) != aff_topo_nvlink_mbps(b, i, j))
        TEST_FAIL("NVLink GPU%d-GPU%d: %llu MB/s from the cache, %llu from NVML",
                  i, j, (unsigned long long)aff_topo_nvlink_mbps(a, i, j),
                  (unsigned long long)aff_topo_nvlink_mbps(b, i, j));
  }
  ASSERT_EQ(aff_topo_has_nvlink(b), aff_topo_has_nvlink(a));
  printf("sysfs: %s\nnvml:  %s\n", aff_topo_source(a), aff_topo_source(b));
  if (nd != 0)
    TEST_FAIL("CUDA_VISIBLE_DEVICES=%s: sysfs and NVML differ in %d ways:\n%s",
              cvd ? cvd : "(unset)", nd, diff);
  printf("CUDA_VISIBLE_DEVICES=%s: %d GPU(s), %d NIC(s) the same both ways\n",
         cvd ? cvd : "(unset)", aff_topo_ngpus(a), aff_topo_nnics(a));
  aff_topo_free(a);
  aff_topo_free(b);
}

/* One library's version both ways, where both found the same file (dladdr
 * names the file the loader mapped; realpath the file found). */
static void same_lib(const char *what, const char *loaded, int vl,
                     const char *found, int vf) {
  char ra[4096], rb[4096];
  if (vl <= 0 || found[0] == '\0')
    return;
  if (realpath(loaded, ra) && realpath(found, rb) && strcmp(ra, rb) == 0) {
    if (vl != vf)
      TEST_FAIL("%s %s: version %d loaded, %d from the file", what, ra, vl, vf);
  } else {
    printf("%s: the loader found %s, the file search %s: not compared\n", what,
           loaded, found);
  }
}

/* The fingerprint's facts read from files (the agent's way) against the
 * loaded libraries (NVML, libcudart, libnccl): the same wherever both
 * found the same library file. */
static void same_versions(void) {
  aff_sysinfo_t f, p;
  aff_sysinfo_files(&f, NULL);
  aff_sysinfo_probe(&p, NULL);
  printf("files: driver %s, CUDA %d, runtime %d (%s), NCCL %d (%s), %d GPU(s), %s\n",
         f.driver, f.cuda_driver, f.cuda_runtime, f.cudart_path, f.nccl,
         f.nccl_path, f.ngpus, f.gpu_model);
  printf("libs:  driver %s, CUDA %d, runtime %d (%s), NCCL %d (%s), %d GPU(s), %s\n",
         p.driver, p.cuda_driver, p.cuda_runtime, p.cudart_path, p.nccl,
         p.nccl_path, p.ngpus, p.gpu_model);
  ASSERT_STR_EQ(p.driver, f.driver);
  if (f.cuda_driver == 0)
    TEST_FAIL("driver %s: its branch is not in aff_libs.c's table (NVML says "
              "CUDA %d): add it", f.driver, p.cuda_driver);
  ASSERT_EQ(p.cuda_driver, f.cuda_driver);
  if (p.nvml) {
    ASSERT_EQ(p.ngpus, f.ngpus);
    ASSERT_STR_EQ(p.gpu_model, f.gpu_model);
  }
  same_lib("libcudart", p.cudart_path, p.cuda_runtime, f.cudart_path,
           f.cuda_runtime);
  same_lib("libnccl", p.nccl_path, p.nccl, f.nccl_path, f.nccl);
  if ((p.cuda_runtime > 0) != (f.cuda_runtime > 0) ||
      (p.nccl > 0) != (f.nccl > 0))
    TEST_FAIL("one way found a library the other did not (runtime %d vs %d, "
              "NCCL %d vs %d)", p.cuda_runtime, f.cuda_runtime, p.nccl, f.nccl);
}

int main(void) {
  aff_topo_t *t;
  aff_sysinfo_t si;
  char cvd[256];
  int n;
  unsetenv("CUDA_VISIBLE_DEVICES");
  /* The NVML loads record what they learn for the boot: here, not in the
   * user's own $XDG_RUNTIME_DIR. */
  setenv("XDG_RUNTIME_DIR", test_tmpdir(), 1);
  t = load(AFF_GPUSRC_AUTO, NULL, "PCI_BUS_ID");
  n = aff_topo_ngpus(t);
  if (n == 0) {
    printf("SKIP: no NVIDIA GPU here\n");
    aff_topo_free(t);
    return 77;
  }
  /* As many GPUs as NVML counts (it sees every GPU the driver runs). */
  aff_sysinfo_probe(&si, NULL);
  if (si.nvml)
    ASSERT_EQ(si.ngpus, n);
  same_versions();
  same_as_nvml(NULL);
  same_as_cuda(NULL, NULL);
  same_as_cuda(NULL, "PCI_BUS_ID");
  snprintf(cvd, sizeof(cvd), "%d", n - 1);
  same_as_nvml(cvd);
  same_as_cuda(cvd, NULL);
  if (aff_topo_gpu(t, n - 1)->uuid[0]) {
    /* by UUID, and by a prefix of it */
    snprintf(cvd, sizeof(cvd), "%s", aff_topo_gpu(t, n - 1)->uuid);
    same_as_nvml(cvd);
    same_as_cuda(cvd, NULL);
    snprintf(cvd, sizeof(cvd), "%.12s", aff_topo_gpu(t, n - 1)->uuid);
    same_as_cuda(cvd, NULL);
  }
  if (n >= 2) {
    /* reversed */
    size_t at = 0;
    for (int i = n - 1; i >= 0; i--)
      at += (size_t)snprintf(cvd + at, sizeof(cvd) - at, "%s%d",
                             i == n - 1 ? "" : ",", i);
    same_as_nvml(cvd);
    same_as_cuda(cvd, NULL);
    same_as_cuda(cvd, "PCI_BUS_ID");
  }
  aff_topo_free(t);
  test_cleanup();
  printf("test_aff_gpu_probe: ok\n");
  return 0;
}
