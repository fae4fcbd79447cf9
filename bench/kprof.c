/* kprof: where a CUDA program's GPU time goes, per kernel (issue #26).
 *
 *   LD_PRELOAD=build/lib/libkprof.so KPROF_SKIP_S=5 build/bin/train_gpt ...
 *
 * A preloaded library that turns on CUPTI's activity records for kernels,
 * copies and memsets and, when the program exits, prints one table to
 * stderr: each kernel's share of the GPU time, its total, its calls and its
 * mean. nsys does the same with more; this is for machines without Nsight
 * Systems (the GPU machine has PyPI's libcupti only). CUPTI is loaded at run
 * time (KPROF_CUPTI names the library; otherwise libcupti.so.13, .12, .so),
 * so the library builds without CUDA.
 *
 * KPROF_SKIP_S   seconds after the first GPU activity that are not counted
 *                (start-up, autotuning, warm-up steps); default 0
 * KPROF_TOP      rows printed (default 30)
 * KPROF_OUT      a file to write the table to instead of stderr
 * KPROF_GAPS     rows of the idle table (default 10; 0: none)
 *
 * Only the fields every CUPTI since CUDA 9 puts first in its kernel, memcpy
 * and memset records are read (kind, start, end, the kernel's name and a
 * memset's size: memsets are rows of their size, "[memset 4 B]"): the
 * layout below is that common prefix, so the records of any newer version
 * parse the same. Times are GPU time: kernels that overlap on several
 * streams each count in full (the "busy" line says how far that went).
 *
 * Then the GPU's idle time: the window less the union of all the spans,
 * and where it falls, as gaps (no kernel or copy running on any stream)
 * summed by the pair of names around them: the span that ran last before
 * the gap and the one that starts it. A host that synchronizes and then
 * launches shows here as the gap between the work before and after. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

enum { K_MEMCPY = 1, K_MEMSET = 2, K_KERNEL = 3, K_CONC_KERNEL = 10 };

/* the common prefix of CUpti_ActivityKernel4..13 (PACKED_ALIGNMENT: packed,
 * 8-byte aligned) */
typedef struct __attribute__((packed, aligned(8))) {
  uint32_t kind;
  uint8_t cache_config, shared_memory_config;
  uint16_t registers;
  uint32_t pgc_requested, pgc_executed;
  uint64_t start, end, completed;
  uint32_t device, context, stream;
  int32_t grid[3], block[3], static_smem, dynamic_smem;
  uint32_t local_per_thread, local_total, correlation;
  int64_t grid_id;
  const char *name;
} kernel_rec_t;

/* memcpy and memset records: kind, 4 bytes, bytes, start, end */
typedef struct __attribute__((packed, aligned(8))) {
  uint32_t kind;
  uint32_t what;
  uint64_t bytes, start, end;
} copy_rec_t;

_Static_assert(offsetof(kernel_rec_t, start) == 16, "CUPTI kernel layout");
_Static_assert(offsetof(kernel_rec_t, name) == 104, "CUPTI kernel layout");
_Static_assert(offsetof(copy_rec_t, start) == 16, "CUPTI memcpy layout");

typedef void (*req_fn)(uint8_t **buf, size_t *size, size_t *max_records);
typedef void (*done_fn)(void *ctx, uint32_t stream, uint8_t *buf, size_t size,
                        size_t valid);

static struct {
  int (*register_callbacks)(req_fn, done_fn);
  int (*enable)(int kind);
  int (*next_record)(uint8_t *buf, size_t valid, void **rec);
  int (*flush_all)(uint32_t flag);
  int (*flush_period)(uint32_t ms);
} cupti;

typedef struct {
  char *name;
  uint64_t ns, calls;
} row_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static row_t *rows;
static size_t nrows, cap_rows;
static uint64_t first_ns, skip_ns, win_lo, win_hi, total_ns;
static uint64_t buffers, records, skipped;
static int ready;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void report(void);
/* atexit from the first buffer CUPTI asks for, not from the constructor:
 * handlers run in reverse order, and CUPTI's and the CUDA runtime's own,
 * registered by then, would otherwise finish before the table is read */
static void at_exit(void) { atexit(report); }

#define BUF_SIZE (8u << 20)

static void on_request(uint8_t **buf, size_t *size, size_t *max_records) {
  pthread_once(&exit_once, at_exit);
  *buf = aligned_alloc(8, BUF_SIZE);
  *size = *buf ? BUF_SIZE : 0;
  *max_records = 0;
}

/* Room for one more element in *arr (n used of *cap, each size bytes),
 * doubling from first. RET 0, or -1 out of memory (*arr unchanged). */
static int room(void *arr, size_t n, size_t *cap, size_t first, size_t size) {
  if (n < *cap) return 0;
  size_t c = *cap ? *cap * 2 : first;
  void *p = realloc(*(void **)arr, c * size);
  if (p == NULL) return -1;
  *(void **)arr = p;
  *cap = c;
  return 0;
}

static row_t *row_for(const char *name) {
  for (size_t i = 0; i < nrows; i++)
    if (strcmp(rows[i].name, name) == 0) return &rows[i];
  if (room(&rows, nrows, &cap_rows, 256, sizeof *rows) != 0) return NULL;
  char *copy = strdup(name);
  if (copy == NULL) return NULL;
  rows[nrows] = (row_t){copy, 0, 0};
  return &rows[nrows++];
}

/* every record, kept until the end: buffers arrive out of order, so the
 * window (after KPROF_SKIP_S) is known only then */
typedef struct {
  uint32_t row;
  uint64_t start, end;
} span_t;
static span_t *spans;
static size_t nspans, cap_spans;

static void count(const char *name, uint64_t start, uint64_t end) {
  if (end <= start) return;
  row_t *r = row_for(name);
  if (r == NULL) return;
  if (room(&spans, nspans, &cap_spans, 65536, sizeof *spans) != 0) return;
  spans[nspans++] = (span_t){(uint32_t)(r - rows), start, end};
}

static void tally(void) {
  for (size_t i = 0; i < nspans; i++)
    if (first_ns == 0 || spans[i].start < first_ns) first_ns = spans[i].start;
  for (size_t i = 0; i < nspans; i++) {
    const span_t *p = &spans[i];
    if (p->start < first_ns + skip_ns) {
      skipped++;
      continue;
    }
    rows[p->row].ns += p->end - p->start;
    rows[p->row].calls++;
    total_ns += p->end - p->start;
    if (win_lo == 0 || p->start < win_lo) win_lo = p->start;
    if (p->end > win_hi) win_hi = p->end;
  }
}

static void on_done(void *ctx, uint32_t stream, uint8_t *buf, size_t size,
                    size_t valid) {
  (void)ctx, (void)stream, (void)size;
  void *rec = NULL;
  pthread_mutex_lock(&mu);
  buffers++;
  while (valid > 0 && cupti.next_record(buf, valid, &rec) == 0) {
    uint32_t kind = *(const uint32_t *)rec;
    records++;
    if (kind == K_KERNEL || kind == K_CONC_KERNEL) {
      const kernel_rec_t *k = rec;
      count(k->name ? k->name : "(unnamed kernel)", k->start, k->end);
    } else if (kind == K_MEMCPY || kind == K_MEMSET) {
      const copy_rec_t *c = rec;
      /* a memset by its size: which library's buffer it clears */
      char nm[48];
      if (kind == K_MEMSET)
        snprintf(nm, sizeof nm, "[memset %llu B]", (unsigned long long)c->bytes);
      count(kind == K_MEMCPY ? "[memcpy]" : nm, c->start, c->end);
    }
  }
  pthread_mutex_unlock(&mu);
  free(buf);
}

static int by_time(const void *a, const void *b) {
  const row_t *x = a, *y = b;
  return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

/* ---- idle time ------------------------------------------------------------ */
typedef struct {
  uint32_t before, after; /* rows */
  uint64_t ns, count;
} gap_t;

static int by_start(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start ? 1 : 0;
}
static int by_gap(const void *a, const void *b) {
  const gap_t *x = a, *y = b;
  return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

/* The window's gaps, by the pair of rows around them; 1 us and shorter
 * counted in the total only (a launch's own latency). */
static void idle_report(FILE *out, char *const *name) {
  const char *t = getenv("KPROF_GAPS");
  size_t top = t ? (size_t)atoi(t) : 10;
  size_t n = 0;
  for (size_t i = 0; i < nspans; i++)
    if (spans[i].start >= first_ns + skip_ns) spans[n++] = spans[i];
  if (top == 0 || n < 2) return;
  qsort(spans, n, sizeof *spans, by_start);
  gap_t *gaps = NULL;
  size_t ngaps = 0, cap = 0;
  uint64_t idle = 0, idle_small = 0, end = spans[0].end;
  uint32_t last = spans[0].row;
  for (size_t i = 1; i < n; i++) {
    const span_t *p = &spans[i];
    if (p->start > end) {
      const uint64_t g = p->start - end;
      idle += g;
      if (g <= 1000) {
        idle_small += g;
      } else {
        size_t k = 0;
        while (k < ngaps && !(gaps[k].before == last && gaps[k].after == p->row)) k++;
        if (k == ngaps) {
          if (room(&gaps, ngaps, &cap, 64, sizeof *gaps) != 0) break;
          gaps[ngaps++] = (gap_t){last, p->row, 0, 0};
        }
        gaps[k].ns += g;
        gaps[k].count++;
      }
    }
    if (p->end > end) {
      end = p->end;
      last = p->row;
    }
  }
  const double span = (double)(win_hi - win_lo);
  fprintf(out, "kprof: idle %.3f s of the window (%.2f %%), %.3f s of it in gaps of "
          "1 us or less; the longer gaps by the spans around them:\n",
          (double)idle / 1e9, span > 0 ? 100.0 * (double)idle / span : 0.0,
          (double)idle_small / 1e9);
  qsort(gaps, ngaps, sizeof *gaps, by_gap);
  fprintf(out, "%7s %10s %9s %10s  %s\n", "share", "total ms", "gaps", "mean us",
          "after -> before");
  for (size_t i = 0; i < ngaps && i < top; i++)
    fprintf(out, "%6.2f%% %10.3f %9llu %10.2f  %.60s -> %.60s\n",
            span > 0 ? 100.0 * (double)gaps[i].ns / span : 0.0, (double)gaps[i].ns / 1e6,
            (unsigned long long)gaps[i].count,
            (double)gaps[i].ns / 1e3 / (double)gaps[i].count, name[gaps[i].before],
            name[gaps[i].after]);
  free(gaps);
}

static void report(void) {
  if (!ready) return;
  cupti.flush_all(1 /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */);
  pthread_mutex_lock(&mu);
  const char *path = getenv("KPROF_OUT");
  FILE *f = path && *path ? fopen(path, "w") : NULL;
  FILE *out = f ? f : stderr;
  tally();
  const char *t = getenv("KPROF_TOP");
  size_t top = t && atoi(t) > 0 ? (size_t)atoi(t) : 30;
  /* the spans name their rows by index: keep the names in that order */
  char **name = malloc((nrows ? nrows : 1) * sizeof *name);
  for (size_t i = 0; name && i < nrows; i++) name[i] = rows[i].name;
  qsort(rows, nrows, sizeof *rows, by_time);
  double span = win_hi > win_lo ? (double)(win_hi - win_lo) : 0;
  fprintf(out,
          "kprof: %zu kernels/copies, %.3f s of GPU time in a window of "
          "%.3f s (busy %.1f %%; the first %.1f s skipped: %llu records of "
          "%llu in %llu buffers)\n",
          nrows, (double)total_ns / 1e9, span / 1e9,
          span > 0 ? 100.0 * (double)total_ns / span : 0.0,
          (double)skip_ns / 1e9, (unsigned long long)skipped,
          (unsigned long long)records, (unsigned long long)buffers);
  fprintf(out, "%7s %10s %9s %10s  %s\n", "share", "total ms", "calls",
          "mean us", "kernel");
  for (size_t i = 0; i < nrows && i < top; i++) {
    const row_t *r = &rows[i];
    if (r->calls == 0) break;
    fprintf(out, "%6.2f%% %10.2f %9llu %10.2f  %.110s\n",
            total_ns ? 100.0 * (double)r->ns / (double)total_ns : 0.0,
            (double)r->ns / 1e6, (unsigned long long)r->calls,
            (double)r->ns / 1e3 / (double)r->calls, r->name);
  }
  if (name) idle_report(out, name);
  free(name);
  if (f) fclose(f);
  pthread_mutex_unlock(&mu);
}

static void *sym(void *h, const char *name) {
  void *p = dlsym(h, name);
  if (p == NULL) fprintf(stderr, "kprof: %s has no %s\n", "libcupti", name);
  return p;
}

__attribute__((constructor)) static void kprof_init(void) {
  const char *names[] = {getenv("KPROF_CUPTI"), "libcupti.so.13",
                         "libcupti.so.12", "libcupti.so"};
  void *h = NULL;
  for (size_t i = 0; i < sizeof names / sizeof *names && h == NULL; i++)
    if (names[i] && *names[i]) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "kprof: no libcupti (%s): put its folder on "
            "LD_LIBRARY_PATH or name it in KPROF_CUPTI; not profiling\n",
            dlerror());
    return;
  }
  *(void **)&cupti.register_callbacks =
      sym(h, "cuptiActivityRegisterCallbacks");
  *(void **)&cupti.enable = sym(h, "cuptiActivityEnable");
  *(void **)&cupti.next_record = sym(h, "cuptiActivityGetNextRecord");
  *(void **)&cupti.flush_all = sym(h, "cuptiActivityFlushAll");
  *(void **)&cupti.flush_period = dlsym(h, "cuptiActivityFlushPeriod");
  if (!cupti.register_callbacks || !cupti.enable || !cupti.next_record ||
      !cupti.flush_all)
    return;
  const char *s = getenv("KPROF_SKIP_S");
  skip_ns = s ? (uint64_t)(atof(s) * 1e9) : 0;
  int rc = cupti.register_callbacks(on_request, on_done);
  if (rc == 0) rc = cupti.enable(K_CONC_KERNEL);
  if (rc == 0) rc = cupti.enable(K_MEMCPY);
  if (rc == 0) rc = cupti.enable(K_MEMSET);
  if (rc != 0) {
    fprintf(stderr, "kprof: CUPTI refused (error %d): not profiling\n", rc);
    return;
  }
  if (cupti.flush_period) cupti.flush_period(500);
  ready = 1;
}
