/* rdzv.h - client library of the launch rendezvous service (librdzv).
 *
 * A trainer links librdzv to talk to the launch server (standalone
 * `launch server`, or the one embedded in node 0's agent): a key/value store
 * per job with blocking waits, atomic add, compare-and-set and barriers.
 *
 * Threads: a client handle is used by one thread at a time. Open one
 * connection per thread; the library keeps no global mutable state.
 *
 * Errors: every call returns 0 (or a documented non-negative value) on
 * success and a negative code on failure: -errno for system errors
 * (-ETIMEDOUT when a timeout expires, -ECONNREFUSED, ...), or one of the
 * RDZV_E* codes below. rdzv_strerror() describes either kind;
 * rdzv_last_error() gives the server's message for the last failed call.
 *
 * Timeouts: every call that talks to the server takes timeout_ms, the most
 * it may block in total. RDZV_FOREVER (-1, or any negative value) blocks
 * without limit; 0 means "do not wait": for get/wait/multi_get, for keys
 * to appear, and for every call, one round trip bounded by the
 * connection's io timeout. The calls
 * that wait on the server (get, wait, multi_get, barrier) give the server's
 * answer up to min(io_timeout_ms, 5 s) more, so that its -ETIMEDOUT and
 * message arrive rather than the client's own: a server that stopped
 * answering is noticed that much later. A send that times out partway
 * closes the connection (the next calls return RDZV_ECLOSED).
 *
 * Keys are NUL-terminated strings of at most RDZV_MAX_KEY bytes. Values are
 * byte strings. PyTorch's TCPStore clients prefix every key with "/": a key
 * set by torch as store.set("x", ...) is "/x" here.
 */
#ifndef RDZV_H
#define RDZV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RDZV_EXTERN __attribute__((visibility("default")))
#else
#define RDZV_EXTERN
#endif

#define RDZV_VERSION_MAJOR 0
#define RDZV_VERSION_MINOR 1
#define RDZV_PROTOCOL_VERSION 1

#define RDZV_FOREVER (-1)
#define RDZV_MAX_KEY 8192
#define RDZV_DEFAULT_PORT 29400

/* Our error codes, from -1000 down. System errors are -errno. */
#define RDZV_ERRNO_MAP(XX)                                                     \
  XX(EPROTO, -1000, "malformed or unexpected message")                         \
  XX(ENOKEY, -1001, "key not found")                                           \
  XX(EAUTH, -1002, "authentication failed: check that every node uses the "    \
                   "same token file")                                          \
  XX(EVERSION, -1003, "protocol version not supported by the peer")            \
  XX(ETOOBIG, -1004, "request over a server limit (key, value, frame or "      \
                     "key count)")                                             \
  XX(ENOTNUM, -1005, "value is not a decimal integer")                         \
  XX(ECLOSED, -1006, "connection closed by the server")                        \
  XX(ELIMIT, -1007, "too many pending waits or connections")                   \
  XX(ECANCELED, -1008, "operation canceled")                                   \
  XX(EADDR, -1009, "endpoint does not parse: use HOST:PORT, [IPV6]:PORT or "   \
                   "unix:/PATH")                                               \
  XX(ENOENV, -1010, "required environment variable is not set (was the "      \
                    "process started by launch?)")                             \
  XX(ESTALE, -1011, "stale: the job moved on to a newer round")      \
  XX(EMISMATCH, -1012, "node configuration differs from node 0")               \
  XX(ERDZVCLOSED, -1013, "rendezvous is closed for this job")                  \
  XX(EINVAL, -1014, "invalid argument")                                        \
  XX(ENOMEM, -1015, "out of memory")                                           \
  XX(EEXIST, -1016, "already exists")                                          \
  XX(ENOTSUP, -1017, "not supported by this build or peer")                    \
  XX(ERESOLVE, -1018, "host name does not resolve")                            \
  XX(EFULL, -1019, "rendezvous is full (max nodes joined)")                   \
  XX(EDEFERRED, -1020, "a set sent without waiting (rdzv_set_nowait) "        \
                       "failed: rdzv_last_error says which and why")       \
  XX(ENOTREG, -1021, "not a regular file (a FIFO, device, socket or "         \
                     "directory): refused rather than waited on")

typedef enum {
#define RDZV_XX_ENUM(name, val, msg) RDZV_##name = (val),
  RDZV_ERRNO_MAP(RDZV_XX_ENUM)
#undef RDZV_XX_ENUM
  RDZV_E_LAST_ = -1100
} rdzv_errno_t;

/* RET a static string for any code (ours or -errno). Thread-safe. */
RDZV_EXTERN const char *rdzv_strerror(int err);
/* RET the symbolic name: "RDZV_ENOKEY", "ETIMEDOUT", ... */
RDZV_EXTERN const char *rdzv_err_name(int err);

typedef struct rdzv_client_s rdzv_client_t;

typedef struct rdzv_options_s {
  size_t size;          /* sizeof(rdzv_options_t) */
  unsigned version;     /* 1 */
  const char *endpoint; /* "host:port", "[v6addr]:port", "unix:/path" */
  const char *job;      /* job (run) id; NULL = "default" */
  const void *token;    /* shared secret, or NULL for none */
  size_t token_len;
  const char *role;     /* "worker", "agent" or "admin"; NULL = "worker" */
  int connect_timeout_ms; /* retry connecting until this passes; -1 forever;
                             0: one attempt, bounded by io_timeout_ms */
  int io_timeout_ms;      /* bound of one round trip for non-blocking ops */
  /* TLS (docs/protocol.md#tls): set tls_ca to speak TLS; the server's
   * certificate must be signed by it and name the endpoint's host. */
  const char *tls_ca;     /* PEM CA certificates, or NULL: no TLS */
  const char *tls_cert;   /* PEM certificate of this client (mutual TLS) */
  const char *tls_key;    /* its private key (NULL: in tls_cert) */
  /* OUT (optional): why rdzv_connect failed, one line, NUL-terminated
   * (a refused certificate, a wrong token, an unreachable server). */
  char *error;
  size_t error_len;
} rdzv_options_t;

#define RDZV_OPTIONS_INIT                                                      \
  { sizeof(rdzv_options_t), 1, NULL, NULL, NULL, 0, NULL, 30000, 30000,       \
    NULL, NULL, NULL, NULL, 0 }

/* Connect, authenticate and bind to a job. The token is the server's
 * token or the key of this job (`launch server --issue-key JOB`).
 * IN opt: copied, may be freed after the call.
 * OUT *out: a client; close it with rdzv_close().
 * RET 0, -ETIMEDOUT when the server did not answer within
 * connect_timeout_ms (connection refused is retried until then),
 * RDZV_EAUTH (token, or a TLS certificate refused: rdzv_last_error says
 * which), RDZV_EVERSION, RDZV_EADDR, RDZV_ERESOLVE, RDZV_EINVAL (a TLS file
 * that does not load). */
RDZV_EXTERN int rdzv_connect(const rdzv_options_t *opt, rdzv_client_t **out);

/* Connect as the launcher tells a worker to:
 *   LAUNCH_RDZV_ENDPOINT   endpoint (else MASTER_ADDR:MASTER_PORT)
 *   LAUNCH_RDZV_ID         job id (else TORCHELASTIC_RUN_ID, else "default")
 *   LAUNCH_RDZV_TOKEN_FILE file holding the job's key or the token (optional)
 *   LAUNCH_RDZV_TLS_CA, LAUNCH_RDZV_TLS_CERT, LAUNCH_RDZV_TLS_KEY
 *                          TLS, as tls_ca, tls_cert, tls_key (optional)
 * Other variables of the worker's environment (RANK, ...) are not judged.
 * RET as rdzv_connect, RDZV_ENOENV when no endpoint is set, RDZV_EINVAL
 * for a MASTER_PORT that is not a port; rdzv_last_error(NULL) says why,
 * on the calling thread. */
RDZV_EXTERN int rdzv_connect_from_env(rdzv_client_t **out);

/* Close the connection and free the handle. NULL is a no-op. */
RDZV_EXTERN void rdzv_close(rdzv_client_t *c);

/* The server's message for the last failed call on c ("" if none). The
 * string lives until the next call on c. NULL: why this thread's last
 * rdzv_connect_from_env failed. */
RDZV_EXTERN const char *rdzv_last_error(const rdzv_client_t *c);

/* Free a value returned by rdzv_get/rdzv_compare_set/rdzv_multi_get. */
RDZV_EXTERN void rdzv_free(void *p);

RDZV_EXTERN int rdzv_set(rdzv_client_t *c, const char *key, const void *val,
                         size_t len, int timeout_ms);

/* ---- pipelining: sets that do not wait for their reply -------------------
 *
 * rdzv_set_nowait queues a set and returns at once, without a round trip.
 * Queued sets go out in the same write as the next request on c (any call
 * that talks to the server), in front of it, and the server runs requests of
 * one connection in the order they were sent: rdzv_set_nowait(c, "k", ...)
 * then rdzv_get(c, "k", ...) costs one round trip and the get sees the
 * value (as PyTorch's TCPStore client writes SET and GET back to back).
 *
 * The server answers such a set only when it fails (SETQ, when the server
 * offers it; older servers answer each SET, read by the next call before
 * its own reply). When one of the sets failed (a full store, a value over
 * the limit), the next call returns
 * RDZV_EDEFERRED and rdzv_last_error names the key and the server's reason;
 * its own request was still sent and carried out by the server, but its
 * outputs are not set. One failure is reported once; later sets are not
 * undone. rdzv_flush sends the queue and waits until the server has run
 * every set (a PING behind them, or every set's reply).
 *
 * At most 256 sets (or 64 KiB of them) are queued: the set that passes
 * either bound flushes (as rdzv_flush with the io timeout) and returns its
 * result. When the connection fails, the call returns its error and the
 * queued sets may or may not have been stored (rdzv_last_error says how
 * many were unanswered). rdzv_close flushes first (bounded by the io
 * timeout). */

/* Queue a set. RET 0, RDZV_EINVAL, RDZV_ECLOSED, RDZV_ENOMEM, or the
 * result of the flush it triggered (RDZV_EDEFERRED, -ETIMEDOUT, ...). */
RDZV_EXTERN int rdzv_set_nowait(rdzv_client_t *c, const char *key,
                                const void *val, size_t len);

/* Send the queued sets and wait up to timeout_ms until the server ran them.
 * RET 0, RDZV_EDEFERRED (one failed: rdzv_last_error says which), or the
 * connection's error (-ETIMEDOUT, RDZV_ECLOSED, RDZV_EPROTO). */
RDZV_EXTERN int rdzv_flush(rdzv_client_t *c, int timeout_ms);

/* Wait up to timeout_ms for key to exist, then return its value.
 * OUT *val (malloc'd, NUL-terminated for convenience, free with rdzv_free),
 * *len. RET 0, -ETIMEDOUT, or RDZV_ENOKEY when timeout_ms is 0 and the key
 * is absent. */
RDZV_EXTERN int rdzv_get(rdzv_client_t *c, const char *key, void **val,
                         size_t *len, int timeout_ms);

/* RET 1 when every key exists, 0 when one is missing, <0 on error. */
RDZV_EXTERN int rdzv_check(rdzv_client_t *c, const char *const *keys,
                           size_t n, int timeout_ms);

/* Add delta to the decimal integer at key (absent = 0); the value is
 * stored as ASCII decimal, as TCPStore does.
 * OUT *result (may be NULL). RET 0 or RDZV_ENOTNUM. */
RDZV_EXTERN int rdzv_add(rdzv_client_t *c, const char *key, int64_t delta,
                         int64_t *result, int timeout_ms);

/* Atomically: if the key's value equals expected (expected == NULL: the key
 * is absent), set it to desired.
 * OUT *current (malloc'd; NULL when the key is absent), *cur_len: the value
 * after the operation; *swapped: 1 if desired was stored. Any OUT may be
 * NULL. RET 0. */
RDZV_EXTERN int rdzv_compare_set(rdzv_client_t *c, const char *key,
                                 const void *expected, size_t exp_len,
                                 const void *desired, size_t des_len,
                                 void **current, size_t *cur_len,
                                 int *swapped, int timeout_ms);

/* Block until every key exists. RET 0 or -ETIMEDOUT. Woken by the server
 * the moment the last key is written; never polls. */
RDZV_EXTERN int rdzv_wait(rdzv_client_t *c, const char *const *keys, size_t n,
                          int timeout_ms);

/* RET 1 if the key existed and was deleted, 0 if it was absent. */
RDZV_EXTERN int rdzv_delete(rdzv_client_t *c, const char *key, int timeout_ms);

/* OUT *n: number of keys in the job's store. RET 0. */
RDZV_EXTERN int rdzv_num_keys(rdzv_client_t *c, int64_t *n, int timeout_ms);

/* Create the key or append to its value. */
RDZV_EXTERN int rdzv_append(rdzv_client_t *c, const char *key, const void *val,
                            size_t len, int timeout_ms);

typedef struct rdzv_value_s {
  void *data; /* malloc'd, free with rdzv_free */
  size_t len;
} rdzv_value_t;

/* Wait up to timeout_ms for every key, then return all values at once.
 * OUT vals[n]. RET 0, -ETIMEDOUT (vals untouched). */
RDZV_EXTERN int rdzv_multi_get(rdzv_client_t *c, const char *const *keys,
                               size_t n, rdzv_value_t *vals, int timeout_ms);

RDZV_EXTERN int rdzv_multi_set(rdzv_client_t *c, const char *const *keys,
                               const void *const *vals, const size_t *lens,
                               size_t n, int timeout_ms);

/* Block until `count` clients entered the barrier `name`. The barrier
 * resets once it opens and can be used again. A client whose timeout
 * expires leaves the barrier (it no longer counts). RET 0 or -ETIMEDOUT. */
RDZV_EXTERN int rdzv_barrier(rdzv_client_t *c, const char *name,
                             uint32_t count, int timeout_ms);

/* Keys of the job's store that start with prefix ("" = all).
 * OUT *keys: malloc'd array of malloc'd NUL-terminated keys (free with
 * rdzv_free_keys), *n. RET 0. */
RDZV_EXTERN int rdzv_list(rdzv_client_t *c, const char *prefix, char ***keys,
                          size_t *n, int timeout_ms);
RDZV_EXTERN void rdzv_free_keys(char **keys, size_t n);

/* ---- the worker's environment -------------------------------------------
 *
 * What launch gives every worker (torchrun's contract and launch's own
 * variables; docs/launcher.md#environment), parsed in one pass with one
 * rule: an unset or empty variable is unset (its fallback name is read
 * then: LAUNCH_ROUND falls back to TORCHELASTIC_RESTART_COUNT,
 * LAUNCH_RDZV_ID to TORCHELASTIC_RUN_ID, GROUP_RANK to LAUNCH_NODE_RANK,
 * GROUP_WORLD_SIZE to LAUNCH_NNODES); a value that does not parse is an
 * error that names the variable. Unset fields are -1 (numbers, booleans)
 * or NULL (strings). The table is env/contract.h. */
typedef struct rdzv_env_s {
  int local_rank, rank, node_rank, role_rank;
  const char *role_name;
  int local_world_size, world_size, nnodes, role_world_size;
  const char *master_addr;
  int master_port;
  int64_t restart_count;   /* TORCHELASTIC_RESTART_COUNT */
  int max_restarts;
  const char *run_id;      /* TORCHELASTIC_RUN_ID */
  int use_agent_store;     /* TORCHELASTIC_USE_AGENT_STORE: 1, 0, -1 */
  const char *error_file, *signals;
  /* as the user may set them too: OMP_NUM_THREADS can be a list */
  const char *nccl_async_eh, *torch_nccl_async_eh, *omp_num_threads;
  const char *endpoint;    /* LAUNCH_RDZV_ENDPOINT: the server */
  const char *rdzv_id;     /* LAUNCH_RDZV_ID: the job */
  const char *token_file, *tls_ca, *tls_cert, *tls_key;
  int64_t round;           /* LAUNCH_ROUND: the generation */
  int launch_node_rank, launch_nnodes;
  const char *hostname, *attempt_dir;
  const char *progress_tag; /* LAUNCH_PROGRESS_TAG: this worker's secret */
  const char *ckpt_dir;    /* LAUNCH_CKPT_DIR (--ckpt-dir) */
  int ckpt_keep;
  int64_t resume_step;     /* LAUNCH_RESUME_STEP: the agreed step */
  int64_t ckpt_verified;   /* LAUNCH_CKPT_VERIFIED */
  /* the binding (as written: "" when the node has none, LAUNCH_NUMA_NODE
   * "-1" when unknown) and the NCCL profile's name */
  const char *cpus;        /* LAUNCH_CPUS: a cpulist */
  const char *numa_node;   /* LAUNCH_NUMA_NODE */
  const char *gpu_busid;   /* LAUNCH_GPU_BUSID */
  const char *hca, *hca_port, *netdev; /* the closest NIC */
  const char *hcas;        /* LAUNCH_HCAS: every GPU-attached HCA */
  const char *nccl_profile; /* LAUNCH_NCCL_PROFILE */
} rdzv_env_t;

/* Parse envp (NULL-terminated "NAME=VALUE" strings; NULL: the process's
 * environ, read now) into *out: the one reader of the contract, called
 * where a library starts (rdzv_connect_from_env, ckpt_open, rt_init, the
 * NCCL bootstrap). String fields point into envp's strings. RET 0, or RDZV_EINVAL
 * when a value does not parse: err says which ("RANK='x' is not a number
 * >= 0"), that field is unset and the others are parsed. */
RDZV_EXTERN int rdzv_env_parse(char *const *envp, rdzv_env_t *out, char *err,
                               size_t errcap);

/* ---- progress (hang detection) ------------------------------------------
 *
 * A trainer reports that it is making progress by setting the key
 * RDZV_PROGRESS_PREFIX "<rank>" (launch/progress/<rank>) to
 * "<step> <unix time in ms> <LAUNCH_PROGRESS_TAG>" (the tag: the agent's
 * secret for this worker and round, in its environment). The agent started
 * with --hang-timeout S reads its local ranks' keys every second; a rank
 * that reported once with its tag and then reports nothing new for S
 * seconds is taken for hung (docs/launcher.md#hangs). A PyTorch trainer
 * sets the same key through its TCPStore client, which stores it as
 * "/launch/progress/<rank>" in its round's namespace (RDZV_TORCH_NS); the
 * agent reads both, every time. */
#define RDZV_PROGRESS_PREFIX "launch/progress/"

/* A job under agents gives every round's TCPStore clients a store of their
 * own, as torchrun gives every retry a fresh store: a TCPStore client that
 * connects during round R reads and writes its keys under
 * RDZV_TORCH_NS "<R>/" (its key "/k" is the native key
 * "launch/torch/R//k"), never sees an earlier round's, and the server drops
 * the earlier rounds' keys when a round forms
 * (docs/protocol.md#tcpstore-namespaces). A job without rounds (a plain
 * `launch server`) has no namespace. */
#define RDZV_TORCH_NS "launch/torch/"

/* Report progress: set launch/progress/<rank> to "<step> <unix ms> <tag>"
 * (the tag from LAUNCH_PROGRESS_TAG, left out when unset; one
 * round trip, no rate limit: call it once per step, or at most about once
 * a second when steps are shorter). IN rank: the global rank, or -1 for the
 * environment's RANK. RET as rdzv_set, or RDZV_ENOENV when rank is -1 and
 * RANK is unset or not a number, RDZV_EINVAL for a step below 0. */
RDZV_EXTERN int rdzv_progress(rdzv_client_t *c, int rank, int64_t step,
                              int timeout_ms);

/* Named scalars a progress report may carry beside the step: set the
 * fields and their RDZV_HAS_* bits in `has`; the others are not sent.
 * The agent shows them in metrics (--metrics-port), events (--event-log)
 * and `launch status`. docs/events.md#progress has the encoding. */
enum {
  RDZV_HAS_LOSS = 1 << 0,
  RDZV_HAS_GRAD_NORM = 1 << 1,
  RDZV_HAS_LR = 1 << 2,
  RDZV_HAS_STEP_TIME = 1 << 3,
  RDZV_HAS_TOKENS = 1 << 4,
  RDZV_HAS_TOTAL_STEPS = 1 << 5,
  RDZV_HAS_COMPUTE_TIME = 1 << 6
};
typedef struct rdzv_scalars_s {
  unsigned has;          /* RDZV_HAS_* bits */
  double loss;           /* the step's training loss (NaN is reported) */
  double grad_norm;      /* the global gradient norm before clipping */
  double lr;             /* the learning rate of the step */
  double step_time;      /* seconds the step took */
  int64_t tokens;        /* tokens the step consumed, all ranks together */
  int64_t total_steps;   /* the steps the run will take */
  double compute_time;   /* seconds of the step spent computing, without the
                            waits for other ranks (collectives): the agent's
                            straggler score compares it across ranks */
} rdzv_scalars_t;

/* rdzv_progress with scalars (s may be NULL: the step alone). The key then
 * holds a msgpack map {step, time_ms, loss, ...}; agents of releases
 * before scalars cannot parse it, warn once, and still take each change
 * for progress. RET as rdzv_progress. */
RDZV_EXTERN int rdzv_progress_ex(rdzv_client_t *c, int rank, int64_t step,
                                 const rdzv_scalars_t *s, int timeout_ms);

/* Round trip with no effect. RET 0. */
RDZV_EXTERN int rdzv_ping(rdzv_client_t *c, int timeout_ms);

/* ---- NCCL bootstrap ------------------------------------------------------
 *
 * NCCL is loaded at run time (dlopen of libnccl.so.2, or the file named by
 * LAUNCH_NCCL_LIBRARY): librdzv never needs it to build or load. */

#define RDZV_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */

typedef struct rdzv_nccl_id_s {
  char internal[RDZV_NCCL_ID_BYTES];
} rdzv_nccl_id_t;

/* Distribute the unique ids of communicator `name` of nranks ranks:
 * ceil(nranks / ranks_per_root) roots (ranks 0, ranks_per_root,
 * 2 * ranks_per_root, ...) each call ncclGetUniqueId and publish it; every
 * rank then fetches all ids in one request. Keys are scoped by the job (the
 * connection's), the round (the restart generation) and the name, so a
 * restarted job never reads an id of an earlier round. Calling it again
 * on the same connection with the same name and round (a communicator
 * made again, after ncclCommAbort) makes new ids: the k-th successful call
 * of every rank meets the k-th of the others, so every rank must make the
 * same calls. A call that fails is repeated under the same keys. A job run
 * again under the same id on a `launch server` that kept its data, with no
 * round in the environment, is round 0 again: give each run its own id.
 * IN round: the job's round (LAUNCH_ROUND); -1 reads LAUNCH_ROUND (or
 * TORCHELASTIC_RESTART_COUNT) from the environment.
 * OUT ids[*nids]: caller's array of at least ceil(nranks/ranks_per_root).
 * RET 0, -ETIMEDOUT (a root did not publish in time), RDZV_ENOTSUP (NCCL
 * cannot be loaded on a root), RDZV_EINVAL. */
RDZV_EXTERN int rdzv_nccl_ids(rdzv_client_t *c, const char *name, int rank,
                              int nranks, int ranks_per_root,
                              int64_t round, rdzv_nccl_id_t *ids,
                              int *nids, int timeout_ms);

/* Create an NCCL communicator bootstrapped by rdzv_nccl_ids: with NCCL >=
 * 2.23 through ncclCommInitRankScalable (several roots), else
 * ncclCommInitRank (one root). The caller's CUDA device must be current.
 * OUT *comm: an ncclComm_t. OUT *init_ms (may be NULL): time spent in
 * NCCL's init call. RET 0, a negative code, or RDZV_ENOTSUP when NCCL is
 * missing; NCCL's own message is in rdzv_last_error(c). */
RDZV_EXTERN int rdzv_nccl_comm_init(rdzv_client_t *c, const char *name,
                                    int rank, int nranks, int ranks_per_root,
                                    void **comm, double *init_ms,
                                    int timeout_ms);

/* NCCL's version code (e.g. 22803 for 2.28.3), or a negative code when it
 * cannot be loaded. */
RDZV_EXTERN int rdzv_nccl_version(void);

#ifdef __cplusplus
}
#endif
#endif /* RDZV_H */
