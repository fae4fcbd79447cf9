/* cmd_gpu_sampler.c - `launch gpu-sampler PARENT_PID NODE`, the GPU
 * sampler (sampler.h says why and the protocol): NVML loaded at run time
 * in a child process of the agent (or of `launch server`), answering each
 * request on fd 3 with the GPU families rendered as the agent rendered
 * them before (names, labels, HELP texts). The XID counts and the PCIe
 * sample live here. Internal: gs_open starts it; not in the help. */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lu.h"
#include "lu_buf.h"
#include "metrics.h"
#include "sampler.h"

/* ---- NVML, loaded at run time ------------------------------------------------------- */

/* Only the prototypes used, from nvml.h (NVML_API_VERSION 11 and later). */
typedef struct { unsigned gpu, memory; } nvml_util_t;
typedef struct { unsigned long long total, free, used; } nvml_mem_t;
typedef struct {
  void *device;
  unsigned long long type, data;      /* data: the XID */
  unsigned gpu_instance, compute_instance;
} nvml_event_t;

#define NVML_GPUS 64          /* handles kept; more GPUs are not served */
#define NVML_XIDS 64          /* distinct (GPU, XID) pairs counted */
#define NVML_ERROR_TIMEOUT 10
#define NVML_EVENT_XID 0x8ull /* nvmlEventTypeXidCriticalError */

typedef struct nvml_s {
  void *lib;
  int ok;
  unsigned count;             /* GPUs served: handle[0..count) */
  void *handle_of[NVML_GPUS];
  void *events;               /* nvmlEventSet_t, NULL without XID events */
  struct { unsigned gpu; unsigned long long xid, n; } xid[NVML_XIDS];
  unsigned nxid;
  /* PCIe throughput, refreshed after a request is answered (the loop):
   * NVML samples it over 20 ms. */
  unsigned pcie_kbs[NVML_GPUS][2];
  unsigned char pcie_ok[NVML_GPUS];
  int pcie_read;              /* read once at least */
  uint64_t pcie_at_ms;        /* when (lu_now_ms) */
  int (*init)(void);
  int (*shutdown)(void);
  int (*count_fn)(unsigned *);
  int (*handle)(unsigned, void **);
  int (*util)(void *, nvml_util_t *);
  int (*mem)(void *, nvml_mem_t *);
  int (*power)(void *, unsigned *);       /* mW */
  int (*temp)(void *, int, unsigned *);   /* sensor 0: the GPU */
  int (*clock)(void *, int, unsigned *);  /* 0 graphics, 2 memory; MHz */
  int (*pcie)(void *, int, unsigned *);   /* 0 TX, 1 RX; KB/s */
  /* error type 0 corrected, 1 uncorrected; counter 0 volatile, 1 aggregate */
  int (*ecc)(void *, int, int, unsigned long long *);
  int (*reasons)(void *, unsigned long long *);
  int (*ev_create)(void **);
  int (*ev_register)(void *, unsigned long long, void *);
  int (*ev_wait)(void *, nvml_event_t *, unsigned);
  int (*ev_free)(void *);
} nvml_t;

/* An XID event set over every GPU that supports it; none: no XID series. */
static void nvml_events_open(nvml_t *n) {
  unsigned registered = 0;
  if (!n->ev_create || !n->ev_register || !n->ev_wait || !n->ev_free ||
      n->ev_create(&n->events) != 0) {
    n->events = NULL;
    return;
  }
  for (unsigned g = 0; g < n->count; g++)
    registered += n->ev_register(n->handle_of[g], NVML_EVENT_XID,
                                 n->events) == 0;
  if (registered == 0) {
    n->ev_free(n->events);
    n->events = NULL;
  }
}

static void nvml_open(nvml_t *n) {
  const char *lib = getenv("LAUNCH_NVML_LIBRARY");
  unsigned count = 0;
  memset(n, 0, sizeof(*n));
  /* A node without the NVIDIA driver's control device has no GPU NVML
   * could see: the library (where installed) is not even mapped. */
  if (!(lib && lib[0]) && access("/dev/nvidiactl", F_OK) != 0)
    return;
  n->lib = dlopen(lib && lib[0] ? lib : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (n->lib == NULL)
    return;
#define SYM(f, name) *(void **)&n->f = dlsym(n->lib, name)
  SYM(init, "nvmlInit_v2");
  SYM(shutdown, "nvmlShutdown");
  SYM(count_fn, "nvmlDeviceGetCount_v2");
  SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
  SYM(util, "nvmlDeviceGetUtilizationRates");
  SYM(mem, "nvmlDeviceGetMemoryInfo");
  SYM(power, "nvmlDeviceGetPowerUsage");
  SYM(temp, "nvmlDeviceGetTemperature");
  SYM(clock, "nvmlDeviceGetClockInfo");
  SYM(pcie, "nvmlDeviceGetPcieThroughput");
  SYM(ecc, "nvmlDeviceGetTotalEccErrors");
  SYM(reasons, "nvmlDeviceGetCurrentClocksEventReasons");
  if (n->reasons == NULL) /* its name before CUDA 12.2's NVML */
    SYM(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  SYM(ev_create, "nvmlEventSetCreate");
  SYM(ev_register, "nvmlDeviceRegisterEvents");
  SYM(ev_wait, "nvmlEventSetWait_v2");
  SYM(ev_free, "nvmlEventSetFree");
#undef SYM
  if (n->init && n->count_fn && n->handle && n->init() == 0) {
    n->ok = n->count_fn(&count) == 0;
    /* Handles once: a GPU whose handle fails ends the list served. */
    for (; n->ok && n->count < count && n->count < NVML_GPUS; n->count++)
      if (n->handle(n->count, &n->handle_of[n->count]) != 0)
        break;
    if (!n->ok && n->shutdown)
      n->shutdown();
  }
  if (!n->ok) {
    dlclose(n->lib);
    n->lib = NULL;
    return;
  }
  nvml_events_open(n);
}

static void nvml_close(nvml_t *n) {
  if (n->events)
    n->ev_free(n->events);
  if (n->ok && n->shutdown)
    n->shutdown();
  if (n->lib)
    dlclose(n->lib);
  memset(n, 0, sizeof(*n));
}

/* Take the XID events that came since the last scrape (never waits). */
static void nvml_poll_xids(nvml_t *n) {
  nvml_event_t e;
  if (n->events == NULL)
    return;
  for (int k = 0; k < 1024; k++) {
    unsigned g, i;
    memset(&e, 0, sizeof(e));
    if (n->ev_wait(n->events, &e, 0) != 0)
      return; /* NVML_ERROR_TIMEOUT: none left */
    if (!(e.type & NVML_EVENT_XID))
      continue;
    for (g = 0; g < n->count && n->handle_of[g] != e.device; g++)
      ;
    if (g == n->count)
      continue;
    for (i = 0; i < n->nxid; i++)
      if (n->xid[i].gpu == g && n->xid[i].xid == e.data)
        break;
    if (i == n->nxid) {
      if (n->nxid == NVML_XIDS)
        continue; /* 64 distinct pairs: a GPU that bad is known already */
      n->xid[n->nxid].gpu = g;
      n->xid[n->nxid].xid = e.data;
      n->xid[n->nxid++].n = 0;
    }
    n->xid[i].n++;
  }
}

static void nvml_read_pcie(nvml_t *n) {
  if (n->pcie == NULL)
    return;
  for (unsigned g = 0; g < n->count; g++)
    n->pcie_ok[g] = n->pcie(n->handle_of[g], 0, &n->pcie_kbs[g][0]) == 0 &&
                    n->pcie(n->handle_of[g], 1, &n->pcie_kbs[g][1]) == 0;
  n->pcie_read = 1;
  n->pcie_at_ms = lu_now_ms();
}


/* ---- the GPU families ----------------------------------------------------------------- */

typedef struct smp_s {
  nvml_t nvml;
  char node[256]; /* escaped label value */
} smp_t;

static void gpu_label(const smp_t *m, unsigned g, char *lab, size_t cap) {
  snprintf(lab, cap, "node=\"%s\",gpu=\"%u\"", m->node, g);
}

static void gpu_basic(smp_t *m, lu_buf_t *b) {
  static const struct { const char *name, *type, *help; } fam[] = {
      {"launch_gpu_utilization_ratio", "gauge",
       "fraction of the last sample period a kernel ran (NVML)"},
      {"launch_gpu_memory_used_bytes", "gauge", "GPU memory in use"},
      {"launch_gpu_memory_total_bytes", "gauge", "GPU memory"},
      {"launch_gpu_power_watts", "gauge", "GPU power draw"},
      {"launch_gpu_temperature_celsius", "gauge", "GPU core temperature"},
      {"launch_gpu_sm_clock_hertz", "gauge", "GPU graphics (SM) clock"}};
  nvml_t *n = &m->nvml;
  for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
    met_family(b, fam[k].name, fam[k].type, fam[k].help);
    for (unsigned g = 0; g < n->count; g++) {
      void *h = n->handle_of[g];
      char lab[320];
      double v = NAN;
      nvml_util_t u;
      nvml_mem_t mem;
      unsigned x;
      if (k == 0 && n->util && n->util(h, &u) == 0)
        v = u.gpu / 100.0;
      else if ((k == 1 || k == 2) && n->mem && n->mem(h, &mem) == 0)
        v = (double)(k == 1 ? mem.used : mem.total);
      else if (k == 3 && n->power && n->power(h, &x) == 0)
        v = x / 1000.0;
      else if (k == 4 && n->temp && n->temp(h, 0, &x) == 0)
        v = x;
      else if (k == 5 && n->clock && n->clock(h, 0, &x) == 0)
        v = x * 1e6;
      if (isnan(v))
        continue;
      gpu_label(m, g, lab, sizeof(lab));
      met_sample(b, fam[k].name, lab, v);
    }
  }
}

/* PCIe throughput as last read (after the previous reply). */
static void gpu_pcie(smp_t *m, lu_buf_t *b) {
  static const char *const name[2] = {
      "launch_gpu_pcie_transmit_bytes_per_second",
      "launch_gpu_pcie_receive_bytes_per_second"};
  nvml_t *n = &m->nvml;
  char lab[320];
  unsigned any = 0;
  if (!n->pcie_read)
    nvml_read_pcie(n);
  for (unsigned g = 0; g < n->count; g++)
    any += n->pcie_ok[g];
  for (int d = 0; d < 2 && any > 0; d++) {
    met_family(b, name[d], "gauge", d == 0
               ? "PCIe bytes sent by the GPU per second (NVML, a 20 ms sample)"
               : "PCIe bytes received by the GPU per second (NVML, a 20 ms "
                 "sample)");
    for (unsigned g = 0; g < n->count; g++)
      if (n->pcie_ok[g]) {
        gpu_label(m, g, lab, sizeof(lab));
        met_sample(b, name[d], lab, (double)n->pcie_kbs[g][d] * 1024);
      }
  }
}

/* ECC errors: corrected and uncorrected, since the driver loaded
 * (volatile) and over the GPU's life (aggregate). ECC off: no series. */
static void gpu_ecc(smp_t *m, lu_buf_t *b) {
  static const char *const type[2] = {"corrected", "uncorrected"};
  static const char *const scope[2] = {"volatile", "aggregate"};
  nvml_t *n = &m->nvml;
  int header = 0;
  if (n->ecc == NULL)
    return;
  for (unsigned g = 0; g < n->count; g++)
    for (int t = 0; t < 2; t++)
      for (int c = 0; c < 2; c++) {
        unsigned long long v;
        char lab[400];
        if (n->ecc(n->handle_of[g], t, c, &v) != 0)
          continue;
        if (!header++)
          met_family(b, "launch_gpu_ecc_errors_total", "counter",
                     "GPU memory ECC errors (NVML), by type and scope");
        snprintf(lab, sizeof(lab), "node=\"%s\",gpu=\"%u\",type=\"%s\","
                 "scope=\"%s\"", m->node, g, type[t], scope[c]);
        met_sample(b, "launch_gpu_ecc_errors_total", lab, (double)v);
      }
}

/* XID critical errors seen since the sampler started (the HELP says the
 * agent: one restart of the sampler is a counter reset), by GPU and code. */
static void gpu_xids(smp_t *m, lu_buf_t *b) {
  nvml_t *n = &m->nvml;
  nvml_poll_xids(n);
  if (n->events == NULL)
    return;
  met_family(b, "launch_gpu_xid_errors_total", "counter",
             "XID critical errors of the GPU since the agent started "
             "(NVML events), by XID code");
  for (unsigned i = 0; i < n->nxid; i++) {
    char lab[400];
    snprintf(lab, sizeof(lab), "node=\"%s\",gpu=\"%u\",xid=\"%llu\"",
             m->node, n->xid[i].gpu, n->xid[i].xid);
    met_sample(b, "launch_gpu_xid_errors_total", lab, (double)n->xid[i].n);
  }
}

/* Why the clocks are held down now: 1 per active reason (nvml.h's
 * nvmlClocksEventReason* bits). */
static void gpu_reasons(smp_t *m, lu_buf_t *b) {
  static const struct { unsigned long long bit; const char *name; } r[] = {
      {0x1, "gpu_idle"},
      {0x2, "applications_clocks_setting"},
      {0x4, "sw_power_cap"},
      {0x8, "hw_slowdown"},
      {0x10, "sync_boost"},
      {0x20, "sw_thermal_slowdown"},
      {0x40, "hw_thermal_slowdown"},
      {0x80, "hw_power_brake_slowdown"},
      {0x100, "display_clock_setting"}};
  nvml_t *n = &m->nvml;
  int header = 0;
  if (n->reasons == NULL)
    return;
  for (unsigned g = 0; g < n->count; g++) {
    unsigned long long v;
    if (n->reasons(n->handle_of[g], &v) != 0)
      continue;
    if (!header++)
      met_family(b, "launch_gpu_throttle_reason", "gauge",
                 "1 while this reason holds the GPU's clocks down (NVML "
                 "clocks event reasons)");
    for (size_t k = 0; k < sizeof(r) / sizeof(r[0]); k++) {
      char lab[400];
      snprintf(lab, sizeof(lab), "node=\"%s\",gpu=\"%u\",reason=\"%s\"",
               m->node, g, r[k].name);
      met_sample(b, "launch_gpu_throttle_reason", lab, (v & r[k].bit) != 0);
    }
  }
}

/* NVML samples PCIe throughput for ~20 ms per GPU and direction (42 ms
 * for one H200): after a reply, so read at most every SMP_PCIE_EVERY_MS:
 * scrapes in a row (a dashboard, a benchmark) would otherwise each wait
 * for the one before's sample. */
#define SMP_PCIE_EVERY_MS 10000

static void smp_render(smp_t *m, lu_buf_t *b) {
  gpu_basic(m, b);
  gpu_pcie(m, b);
  gpu_ecc(m, b);
  gpu_xids(m, b);
  gpu_reasons(m, b);
}

/* ---- the loop ------------------------------------------------------------------------- */

/* RET 1 all n bytes read, 0 end of file, -1 error. */
static int smp_read(int fd, uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r == 0)
      return 0;
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += r;
    n -= (size_t)r;
  }
  return 1;
}

static int smp_write(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* The newest request: one read blocking, then those queued behind it. RET
 * 1 (OUT *seq), 0 the agent closed its end, -1 a malformed request. */
static int smp_next(int fd, uint32_t *seq) {
  uint8_t req[GS_REQ_LEN];
  int r = smp_read(fd, req, sizeof(req));
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (r <= 0)
      return r;
    if (gs_parse_request(req, sizeof(req), seq) != 0)
      return -1;
    if (poll(&p, 1, 0) != 1)
      return 1;
    r = smp_read(fd, req, sizeof(req));
  }
}

int launch_cmd_gpu_sampler(int argc, char **argv) {
  smp_t m;
  struct stat st;
  char *end;
  long parent;
  uint32_t seq;
  int r;
  if (argc != 3 || (parent = strtol(argv[1], &end, 10)) <= 1 || *end ||
      fstat(GS_FD, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    fputs("launch gpu-sampler: internal, started by the agent with "
          "--metrics-port (docs/monitoring.md)\n", stderr);
    return 2;
  }
  /* Never outlive the agent: killed when it (the thread that started
   * this) ends; gone already when it died before this line. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != (pid_t)parent)
    return 0;
  /* Hold no mount busy: the agent's directory may be a job's. */
  if (chdir("/") != 0)
    return 1;
  memset(&m, 0, sizeof(m));
  lu_strlcpy(m.node, argv[2], sizeof(m.node));
  nvml_open(&m.nvml);
  if (!m.nvml.ok || m.nvml.count == 0) {
    nvml_close(&m.nvml);
    return GS_EXIT_NO_GPU;
  }
  while ((r = smp_next(GS_FD, &seq)) == 1) {
    lu_buf_t b = LU_BUF_INIT;
    uint8_t hdr[GS_HDR_LEN];
    char *text;
    size_t len;
    int rc;
    smp_render(&m, &b);
    if (lu_buf_finish(&b, &text, &len) != 0)
      break;
    if (len > GS_TEXT_MAX)
      len = 0; /* never here: 64 GPUs' families are ~200 kB */
    gs_put_u32(hdr, GS_REP_MAGIC);
    gs_put_u32(hdr + 4, seq);
    gs_put_u32(hdr + 8, (uint32_t)len);
    rc = smp_write(GS_FD, hdr, sizeof(hdr)) == 0 &&
         smp_write(GS_FD, text, len) == 0;
    free(text);
    if (!rc)
      break;
    /* The slow values, for the next request: after this reply. */
    if (!m.nvml.pcie_read ||
        lu_now_ms() - m.nvml.pcie_at_ms >= SMP_PCIE_EVERY_MS)
      nvml_read_pcie(&m.nvml);
  }
  nvml_close(&m.nvml);
  return r < 0 ? 1 : 0;
}
