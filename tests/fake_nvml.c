/* fake_nvml.c - a libnvidia-ml.so stand-in for test_metrics_text
 * (LAUNCH_NVML_LIBRARY): two GPUs with fixed readings, ECC on GPU 0 only,
 * three XID events queued (GPU 0: 79 twice, GPU 1: 48) that
 * nvmlEventSetWait_v2 hands out once each, then NVML_ERROR_TIMEOUT.
 * FAKE_NVML_HANG_MS=N: each nvmlDeviceGetUtilizationRates blocks N ms, as
 * NVML does for a GPU fallen off the bus (XID 79); FAKE_NVML_HANG_CALLS=K:
 * only the first K calls do. GPU 1's power reads 90 W, then 1 W more at
 * each read: a reading that tells one answer from another. Only the entry points
 * the GPU sampler (launcher/cmd_gpu_sampler.c) resolves, with nvml.h's
 * signatures. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { unsigned gpu, memory; } util_t;
typedef struct { unsigned long long total, free, used; } mem_t;
typedef struct {
  void *device;
  unsigned long long type, data;
  unsigned gpu_instance, compute_instance;
} event_t;

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned *n);
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h);
int nvmlDeviceGetUtilizationRates(void *h, util_t *u);
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m);
int nvmlDeviceGetPowerUsage(void *h, unsigned *mw);
int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *c);
int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz);
int nvmlDeviceGetPcieThroughput(void *h, int counter, unsigned *kbs);
int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter,
                                unsigned long long *n);
int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *r);
int nvmlEventSetCreate(void **set);
int nvmlDeviceRegisterEvents(void *h, unsigned long long types, void *set);
int nvmlEventSetWait_v2(void *set, event_t *e, unsigned timeout_ms);
int nvmlEventSetFree(void *set);

enum { OK = 0, INVALID = 2, NOT_SUPPORTED = 3, TIMEOUT = 10 };

static int gpus[2];       /* the handles: &gpus[i] */
static int inited;
static int next_event;    /* events handed out so far */
static int event_set;     /* the one set: &event_set */
static unsigned registered;  /* bit i: GPU i registered for events */

static int idx(void *h) {
  return h == &gpus[0] ? 0 : h == &gpus[1] ? 1 : -1;
}

int nvmlInit_v2(void) { inited = 1; return OK; }
int nvmlShutdown(void) { inited = 0; return OK; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 2; return inited ? OK : 1; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) {
  if (i >= 2)
    return INVALID;
  *h = &gpus[i];
  return OK;
}
int nvmlDeviceGetUtilizationRates(void *h, util_t *u) {
  static long calls;
  const char *hang = getenv("FAKE_NVML_HANG_MS");
  const char *upto = getenv("FAKE_NVML_HANG_CALLS");
  if (hang && atol(hang) > 0 && (upto == NULL || calls++ < atol(upto))) {
    struct timespec ts = {atol(hang) / 1000, (atol(hang) % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
      ;
  }
  u->gpu = idx(h) == 0 ? 97 : 12;
  u->memory = 40;
  return OK;
}
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) {
  (void)h;
  m->total = 80ull << 30;
  m->used = 60ull << 30;
  m->free = m->total - m->used;
  return OK;
}
int nvmlDeviceGetPowerUsage(void *h, unsigned *mw) {
  static unsigned reads1; /* GPU 1's */
  *mw = idx(h) == 0 ? 650500 : 90000 + 1000 * reads1++;
  return OK;
}
int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *c) {
  (void)h;
  *c = 71;
  return sensor == 0 ? OK : INVALID;
}
int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz) {
  (void)h;
  *mhz = type == 0 ? 1980 : 2619;
  return OK;
}
/* counter 0 TX, 1 RX; KB/s */
int nvmlDeviceGetPcieThroughput(void *h, int counter, unsigned *kbs) {
  *kbs = (unsigned)(idx(h) * 1000 + (counter == 0 ? 1500 : 250));
  return OK;
}
int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter,
                                unsigned long long *n) {
  if (idx(h) != 0)
    return NOT_SUPPORTED; /* GPU 1: ECC off */
  *n = (unsigned long long)(type == 0 ? 5 : 1) * (counter == 0 ? 1 : 10);
  return OK;
}
int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *r) {
  *r = idx(h) == 0 ? 0x4 | 0x40 : 0x1; /* power cap + HW thermal; idle */
  return OK;
}
int nvmlEventSetCreate(void **set) {
  *set = &event_set;
  return OK;
}
int nvmlDeviceRegisterEvents(void *h, unsigned long long types, void *set) {
  if (set != &event_set || idx(h) < 0 || !(types & 0x8))
    return INVALID;
  registered |= 1u << idx(h);
  return OK;
}
int nvmlEventSetWait_v2(void *set, event_t *e, unsigned timeout_ms) {
  static const struct { int gpu; unsigned long long xid; } q[] = {
      {0, 79}, {1, 48}, {0, 79}};
  (void)timeout_ms;
  if (set != &event_set)
    return INVALID;
  if (next_event >= 3 || !(registered & (1u << q[next_event].gpu)))
    return TIMEOUT;
  memset(e, 0, sizeof(*e));
  e->device = &gpus[q[next_event].gpu];
  e->type = 0x8;
  e->data = q[next_event++].xid;
  return OK;
}
int nvmlEventSetFree(void *set) { return set == &event_set ? OK : INVALID; }
