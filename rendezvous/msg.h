/* msg.h - the rendezvous messages between agents, the server and `launch
 * status` (prefix msg_): one typed struct per message, one pack and one
 * unpack function each. docs/rendezvous.md is the specification.
 *
 * Every message is one msgpack map with string keys, carried as the only
 * argument of its request, reply or push. Each key is written once, in the
 * field tables of msg.c; a field's key is its name in the struct. Unknown
 * keys are ignored and missing ones keep their default (msg_X_init), so a
 * message grows by one struct member and one table row, and peers of the
 * previous release still understand each other (the checkpoint step that
 * agents will report at the join, and the resume step the round reply will
 * carry, are such fields).
 *
 *   msg_X_init(&m)                  defaults
 *   msg_X_pack(pk, &m)              one map onto a packer
 *   msg_X_unpack(obj, &m, err, n)   init, then the map's fields; RET 0, or
 *                                   RDZV_EPROTO with err naming the field
 *                                   (not a map, a field of the wrong type, a
 *                                   string too long), RDZV_ENOMEM
 *   msg_X_free(&m)                  what unpack allocated (NULL is fine)
 *
 * Strings in fixed arrays are cut by nothing: longer ones are refused by
 * unpack. `char *` strings and lists are malloc'd by unpack and freed by
 * msg_X_free; pack only reads them. */
#ifndef MSG_H
#define MSG_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#define MSG_HOST_MAX 256
#define MSG_ADDR_MAX 64

/* A failed worker: REPORT's failure, SHUTDOWN's root cause. */
typedef struct msg_failure_s {
  char host[MSG_HOST_MAX];
  int64_t rank, local_rank, node_rank; /* -1 unknown */
  int64_t pid;
  int64_t exit_code;   /* -1 when killed by a signal */
  int64_t signal;
  double time;         /* wall clock seconds */
  char *tail;          /* the last lines of its stderr; NULL none */
  char *error;         /* its error file's message; NULL none */
  char *attempt_dir;
  int64_t no_restart;  /* its exit code is one of --no-restart-exit-codes:
                          the job ends instead of restarting */
} msg_failure_t;

/* JOIN (agent -> server): this node and the flags that shape the job. */
typedef struct msg_join_s {
  char host[MSG_HOST_MAX];
  char addr[MSG_ADDR_MAX];  /* "": the address the server sees */
  int64_t nproc;
  int64_t rank;             /* preferred node rank, -1 none */
  int64_t min, max;         /* nodes */
  int64_t last_call_ms, join_timeout_ms, heartbeat_ms;
  int64_t max_restarts;
  int is_static;            /* static rendezvous: every node gives a rank */
  int allow_mismatch;
  int64_t master_port;      /* rank 0's store port if this becomes node 0 */
  char **expected;          /* host names expected in the job */
  size_t nexpected;
  char *fingerprint;        /* env_fp_serialize() text; NULL none */
  int hosting;              /* this agent hosts the server: it is no
                               successor (its loss is the server's) */
  /* After a host failover (docs/rendezvous.md#host-failover): the round
   * this node ran under the lost host, the restarts spent then, and how
   * many nodes of that round survived; -1, 0, 0 otherwise. The new server
   * goes on from there instead of from round 0. */
  int64_t prev_round, prev_restarts, survivors;
  int64_t quorum;           /* the host went silent: the new round needs
                               this many nodes (a majority of the lost
                               round's); 0 none */
} msg_join_t;

/* The reply to JOIN: the round this node is part of. */
typedef struct msg_round_s {
  int64_t round;            /* 0 first, one more at each restart */
  int64_t node_rank, nnodes, world_size, base_rank;
  int64_t master_port;      /* node 0's (--torch-store rank0) */
  char addr[MSG_ADDR_MAX];  /* this node's address as the server knows it */
  char node0_addr[MSG_ADDR_MAX];
  char node0_host[MSG_HOST_MAX];
  int64_t restarts;         /* restarts spent on failures so far (a node
                               joining or leaving spends none) */
  /* Who hosts the server if its host is lost: the members of the round
   * that do not host it, by node rank, with the addresses they were
   * reached at (parallel lists; O(nodes) per reply). */
  char **succ_hosts;
  size_t nsucc_hosts;
  char **succ_addrs;
  size_t nsucc_addrs;
} msg_round_t;

/* REPORT (agent -> server): this node's workers finished the round. */
typedef struct msg_report_s {
  int64_t round;
  int ok;                   /* every worker here exited 0 */
  int has_failure;
  msg_failure_t failure;    /* the first failure here, when !ok */
} msg_report_t;

/* LEAVE (agent -> server). */
typedef struct msg_leave_s {
  char reason[MSG_HOST_MAX];
} msg_leave_t;

/* RESTART (server -> agents): stop the workers, join round `round`. */
typedef struct msg_restart_s {
  int64_t round;
  char *reason;
} msg_restart_t;

/* SHUTDOWN (server -> agents): the job ended. */
typedef struct msg_shutdown_s {
  int ok;
  char *reason;
  int has_root;
  msg_failure_t root;       /* the root cause, when !ok */
  int64_t restarts;         /* restarts used */
  int64_t max_restarts;
} msg_shutdown_t;

/* A node in STATUS. */
typedef struct msg_member_s {
  char host[MSG_HOST_MAX];
  char addr[MSG_ADDR_MAX];
  int64_t node_rank;        /* -1 outside the round */
  int64_t nproc;
  int64_t base_rank;        /* -1 outside the round */
  char state[16];           /* joining, running, done, restarting */
  int64_t heartbeat_age_ms;
  int in_round;
  /* How its workers ended, once they did: state "done" (exit_code 0),
   * "failed" (its first failed worker's exit_code, or -1 and signal),
   * "stopped" (stopped by the job's end); -1 and 0 before. */
  int64_t exit_code, signal;
} msg_member_t;

/* The reply to STATUS: a job's rendezvous. */
typedef struct msg_status_s {
  char job[MSG_HOST_MAX];
  char state[16];           /* idle, forming, running, finished */
  int64_t round;            /* -1 before the first */
  int64_t restarts, max_restarts;
  int64_t min, max;
  int64_t waited_ms;        /* forming for this long */
  char *reason;             /* the last restart's or the end's */
  char **expected;
  size_t nexpected;
  msg_member_t *members;
  size_t nmembers;
  /* An ended job (state "finished"), kept by the server for --keep-ended
   * after its last node left; members are then its last round's nodes as
   * they ended. */
  int64_t ok;               /* 1 every worker exited 0, 0 failed; -1 not
                               ended (or a server before these fields) */
  double end_time;          /* unix time of the end, 0 not ended */
  int64_t keep_ms;          /* the server forgets it in this many ms */
  int has_root;
  msg_failure_t root;       /* the root cause of a failed job */
} msg_status_t;

/* PROGRESS: the value of a rank's progress key launch/progress/<rank>
 * (written by rdzv_progress_ex, rt_progress_ex, the Python reporter; read
 * by the agent for hang detection, metrics, events). The step and the
 * writer's wall clock, then optional named scalars, each with its has_
 * flag (absent keys are not packed). docs/events.md#progress. */
typedef struct msg_progress_s {
  int64_t step;             /* the last completed step, >= 0 */
  int64_t time_ms;          /* unix time in ms when written */
  double loss, grad_norm, lr;
  double step_time;         /* seconds the last step took */
  int64_t tokens;           /* tokens the last step consumed (all ranks) */
  int64_t total_steps;      /* the steps the run will take; 0 unknown */
  double compute_time;      /* seconds of the step spent computing, not
                               waiting for other ranks: straggler scores */
  int has_loss, has_grad_norm, has_lr, has_step_time, has_tokens,
      has_total_steps, has_compute_time;
  char tag[40]; /* the worker's LAUNCH_PROGRESS_TAG ("": none), so that a
                   value anything else wrote cannot get the rank killed */
} msg_progress_t;

#define MSG_DECLARE(name, type)                                                \
  void msg_##name##_init(type *m);                                             \
  void msg_##name##_pack(msgpack_packer *pk, const type *m);                   \
  int msg_##name##_unpack(const msgpack_object *o, type *m, char *err,         \
                          size_t errlen);                                      \
  void msg_##name##_free(type *m);

MSG_DECLARE(failure, msg_failure_t)
MSG_DECLARE(join, msg_join_t)
MSG_DECLARE(round, msg_round_t)
MSG_DECLARE(report, msg_report_t)
MSG_DECLARE(leave, msg_leave_t)
MSG_DECLARE(restart, msg_restart_t)
MSG_DECLARE(shutdown, msg_shutdown_t)
MSG_DECLARE(member, msg_member_t)
MSG_DECLARE(status, msg_status_t)
MSG_DECLARE(progress, msg_progress_t)

/* A progress key's bytes: either the msgpack map above, or the bare
 * "<step> <unix ms>" text of writers before scalars (both are read; the
 * map starts with a msgpack map byte, the text with a digit). RET 0, or
 * RDZV_EPROTO (err says why). m holds no allocation either way. */
int msg_progress_decode(const void *p, size_t n, msg_progress_t *m,
                        char *err, size_t errlen);
/* Encode m as the msgpack map into buf. RET the bytes written, or 0 when
 * cap is too small (MSG_PROGRESS_MAX always fits). */
#define MSG_PROGRESS_MAX 192
size_t msg_progress_encode(const msg_progress_t *m, void *buf, size_t cap);

/* Copy a failure (its strings duplicated). RET 0 or RDZV_ENOMEM (dst is
 * then empty). */
int msg_failure_copy(msg_failure_t *dst, const msg_failure_t *src);

#endif /* MSG_H */
