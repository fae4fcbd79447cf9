/* sampler.h - the GPU sampler: NVML in a child process of the agent
 * (`launch gpu-sampler`, issue #23, docs/monitoring.md#the-gpu-sampler).
 *
 * Why a process: nvmlInit maps libcuda and writes a ~13 MB region of its
 * own (about 19 MB of resident memory on an H200 node, more than the rest
 * of the agent with --metrics-port), none of which can be given back while
 * NVML is loaded; and an NVML call can block for seconds when a GPU fell
 * off the bus (XID 79). In a child, neither reaches the agent: its memory
 * is the sampler's, and a scrape never waits for NVML.
 *
 * Prefetch (a scrape must not wait for another process to be scheduled,
 * as DCGM exporter serves what it sampled on its own interval): once a
 * second the owner's loop (gs_refresh(g, 1)) takes the reply that came,
 * without waiting, and sends a request when none is outstanding. The
 * block, the newest reply accepted, was sampled no earlier than its
 * request went out: a scrape takes what is readable without waiting, and
 * when the block is fresh (sampled at most GS_FRESH_MS ago: two ticks and
 * a margin) serves it at once, asking nothing. Otherwise (the first
 * scrape, a sampler hung or started again) it sends a request and waits
 * GS_WAIT_MS at most; unanswered, it has no GPU series
 * (launch_gpu_sampler_up 0). launch_gpu_sample_age_seconds says how old
 * the newest block is. A sampler that died serves nothing from then on.
 *
 * The agent's side (sampler.c, from metrics.c) starts the child when
 * metrics are served and NVML could be used (LAUNCH_NVML_LIBRARY set, or
 * /dev/nvidiactl exists), asks it as above, reaps it when it died and
 * starts it again, no sooner than GS_BACKOFF_MS after its last start
 * (doubling while it dies young without ever answering), and ends it
 * (SIGTERM, then SIGKILL) at gs_close. The child (cmd_gpu_sampler.c) holds
 * NVML, the XID counts and the PCIe sample, and renders the GPU families.
 *
 * Protocol, over a socketpair (the child's fd 3), little-endian u32s:
 *   request  (agent -> child): magic GS_REQ_MAGIC, seq                8 bytes
 *   reply    (child -> agent): magic GS_REP_MAGIC, seq, len, then len
 *            bytes of Prometheus text (whole families)   12 + len bytes
 * The child answers the newest request it holds (older ones unread are
 * answered by that one reply); the agent keeps only the reply whose seq is
 * the newest request's (the loop's or a scrape's): a late reply to an
 * earlier one is discarded. len over GS_TEXT_MAX or a bad magic: the
 * child is broken, and is killed.
 * The child exits GS_EXIT_NO_GPU when NVML cannot be loaded or sees no
 * GPU: then there is no sampler and no GPU series, as without NVML.
 * Prefix gs_. */
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lu_buf.h"

#define GS_REQ_MAGIC 0x5153474cu /* "LGSQ" */
#define GS_REP_MAGIC 0x5253474cu /* "LGSR" */
#define GS_REQ_LEN 8
#define GS_HDR_LEN 12
#define GS_TEXT_MAX (1u << 20)   /* 64 GPUs' families are ~200 kB */
#define GS_EXIT_NO_GPU 3
#define GS_FD 3                  /* the child's end of the socketpair */
#define GS_WAIT_MS 500           /* a scrape waits this long at most */
#define GS_FRESH_MS 2500         /* a block this old is served (HELP: 2.5 s) */
#define GS_BACKOFF_MS 10000      /* a restart at most this often */

typedef struct gs_s gs_t;

/* Start the sampler for the node label node (escaped: met_label_escape)
 * when NVML could be used here and a sampler binary is known: the file
 * LAUNCH_GPU_SAMPLER names (a `launch` binary: for programs that are not,
 * such as tests), else this program when it is `launch`. OUT *out: NULL
 * when there is no sampler (no error). RET 0, RDZV_ENOMEM. A failed start
 * is logged and retried by gs_refresh(g, 1), not an error. */
int gs_open(const char *node, gs_t **out);
/* A scrape: launch_gpu_sampler_up, launch_gpu_sample_age_seconds and the
 * GPU families (the fresh block) into b; nothing when g is NULL or the
 * sampler found no GPU. At once with a fresh block, else waits GS_WAIT_MS
 * at most. The scraping thread. */
void gs_render(gs_t *g, lu_buf_t *b);
/* Reap a dead sampler (no zombie); start: and start it again when its
 * backoff passed, and prefetch (take a reply, send a request when none is
 * outstanding). Once a second from the owner's event loop with start 1,
 * after a scrape's reply went out with start 0: the sampler is started only
 * by the thread that called gs_open and runs the loop (the process's main
 * thread in the agent and launch server), as PR_SET_PDEATHSIG follows the
 * thread that started it. Never waits: skipped while a scrape holds the
 * sampler. */
void gs_refresh(gs_t *g, int start);
/* The sampler's pid, 0 when none runs. Any thread (the agent's worker
 * containment asks it: that child is not an orphan of a worker). */
pid_t gs_pid(const gs_t *g);
/* End the sampler (SIGTERM, SIGKILL after 1 s), reap it, free. NULL no-op. */
void gs_close(gs_t *g);

/* The wire. gs_parse_reply: a reply at the start of buf[0..n).
 * RET its whole length (> 0; OUT *seq, *text: buf + GS_HDR_LEN, *len),
 * 0 when n does not hold it all yet, RDZV_EPROTO for a bad magic or a len
 * over GS_TEXT_MAX (decided from the header alone). Pure (fuzz_sampler). */
long gs_parse_reply(const uint8_t *buf, size_t n, uint32_t *seq,
                    const uint8_t **text, uint32_t *len);
/* RET 0 (OUT *seq) or RDZV_EPROTO. */
int gs_parse_request(const uint8_t *buf, size_t n, uint32_t *seq);
void gs_put_u32(uint8_t *p, uint32_t v);
uint32_t gs_get_u32(const uint8_t *p);

/* `launch gpu-sampler PARENT_PID NODE`: the child (cmd_gpu_sampler.c,
 * linked into the launch binary only: gs_open knows it runs in `launch`
 * by this symbol). Internal: started by gs_open, never by a user. */
int launch_cmd_gpu_sampler(int argc, char **argv);

#endif /* SAMPLER_H */
