/* events.h - the job's event log (launch --event-log FILE,
 * --event-log-handler console): one JSON object per line, each with the
 * schema version "v", "time" (unix seconds), "event" (its kind), "job"
 * and "node" (this agent's host), then the kind's fields. The kinds and
 * their fields are documented in docs/events.md; EV_KINDS is the one list
 * of kinds. Each agent writes what it sees: on a job of several nodes,
 * every node's file tells the job from that node. Loop thread only. */
#ifndef EVENTS_H
#define EVENTS_H

#include <stdint.h>
#include <stdio.h>

#include "lu_buf.h"
#include "server.h"

#define EV_VERSION 1

/* X(kind, what it says) */
#define EV_KINDS(X)                                                            \
  X(job_start, "the agent started the job on this node")                       \
  X(node_joined, "this node asked to join a round")                            \
  X(node_refused, "the server refused this node")                              \
  X(node_left, "this node left the job")                                       \
  X(round_formed, "a round formed with this node in it")                       \
  X(resume_agreed, "the nodes agreed on the checkpoint step")                  \
  X(restart, "the workers of a new round started after a failure")            \
  X(worker_started, "a worker process started")                                \
  X(worker_exited, "a worker process exited")                                  \
  X(failure, "a worker failed: the root cause of a restart or the end")       \
  X(checkpoint_committed, "a checkpoint step became the newest complete one") \
  X(hang_detected, "a rank made no progress for --hang-timeout")               \
  X(straggler_flagged, "a rank stayed slower than the node's median")          \
  X(host_failover, "the rendezvous host was lost: this node moves to another") \
  X(job_end, "the job ended")                                                  \
  X(summary, "restarts, downtime, steps redone, resume time of the job")      \
  X(limit_hit, "the server refused something by one of its limits")

typedef enum {
#define EV_ENUM(k, d) EV_##k,
  EV_KINDS(EV_ENUM)
#undef EV_ENUM
  EV_COUNT
} ev_kind_t;

typedef struct ev_log_s ev_log_t;

/* IN path: the file (appended to; NULL none); console: also to stderr.
 * job, node: copied. OUT *out (NULL when both are off: every call below
 * is then a no-op). RET 0 or -errno (opening path). */
int ev_open(const char *path, int console, const char *job, const char *node,
            ev_log_t **out);
void ev_close(ev_log_t *e); /* NULL is a no-op */

/* One event: ev_begin, the fields through the returned writer (lu_json_*
 * with keys; NULL when e is NULL: lu_json_* must then not be called, use
 * the EV_* helpers below), ev_end writes the line and flushes it. */
lu_json_t *ev_begin(ev_log_t *e, ev_kind_t kind);
void ev_end(ev_log_t *e);

const char *ev_name(ev_kind_t kind);

/* The server's events (srv_config_t.on_event with event_arg an ev_log_t
 * opened for the server): node_joined, node_left, node_refused of every
 * node of its jobs with "source":"server", and limit_hit. The line's "job"
 * is the event's job. Called under the server's lock (one at a time): the
 * log must be the server's own, not one another thread writes. */
void ev_server_cb(void *arg, const srv_event_t *ev);

/* checkpoint_committed's size and write time, from the step's
 * manifest.json (docs/checkpoints.md; any writer may have made it: it is
 * checked like input). IN buf[0..len). OUT *bytes: the shards' sizes
 * summed; *write_s: the slowest shard's "write_ms" (the ranks write at
 * once) in seconds, 0 when a shard does not say (an older writer).
 * RET 0, or -1 when it is not a manifest with shards (outputs 0). */
int ev_manifest_stats(const char *buf, size_t len, uint64_t *bytes,
                      double *write_s);

#endif /* EVENTS_H */
