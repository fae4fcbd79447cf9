/* etcd_backend.h - the agent's side of --rdzv-backend etcd
 * (docs/rendezvous.md#etcd-backend): etcd holds the job's membership, the
 * host election and the round record; the elected agent serves the round's
 * store from its embedded launch server, as with c10d.
 *
 * Keys, under /launch/<job>/: nodes/<host> (each agent, under its lease),
 * host ("ADDR PORT NAME" of the elected agent, under its lease: it goes
 * when that agent dies or is cut off from etcd), round (the last round the
 * host formed, written only while it holds the host key).
 *
 * One thread per agent talks to etcd (libcurl blocks); it keeps the lease
 * alive, watches the host key and runs elections, and tells the agent's
 * loop what happened through a uv_async (etb_events). */
#ifndef ETCD_BACKEND_H
#define ETCD_BACKEND_H

#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "lu.h"

typedef struct etb_s etb_t;

enum {
  ETB_ELECTED = 1u,      /* an election ended: etb_host says who */
  ETB_HOST_CHANGED = 2u, /* the host key went or changed hands */
  ETB_DEPOSED = 4u,      /* this agent held the host key and lost it */
  ETB_FAILED = 8u,       /* etcd refused this agent, or never answered
                            it at the start (etb_error says why) */
  ETB_CUT_OFF = 16u,     /* the lease was not renewed for its TTL: etcd
                            may have let it expire (fence the workers) */
  ETB_RESTORED = 32u,    /* after ETB_CUT_OFF: a live lease again */
  ETB_ROUND_OK = 64u,    /* the round etb_wait_round asked for is recorded
                            by the host this agent follows */
};

typedef void (*etb_cb)(void *arg, unsigned events);

/* Start the thread and the first election. IN my_addr, my_port: where this
 * agent's server would listen if elected; name: this node's name. RET 0,
 * or an error with err saying why (RDZV_ENOTSUP without libcurl). */
int etb_start(uv_loop_t *loop, const cfg_t *o, const lu_log_t *log,
              const char *my_addr, int my_port, etb_cb cb, void *arg,
              etb_t **out, char *err, size_t errlen);
/* The host the last election chose. RET 0, or -1 when none yet. */
/* The values other agents write (fuzz_store_vals drives them):
 * host_parse: the host key's "ADDR PORT [NAME]". RET 0, -1 when it is
 *   not one (a port outside 1..65535).
 * round_parse: the round key's "ROUND HOST-REVISION". RET 0 or -1. */
int etb__host_parse(const char *v, char *addr, size_t acap, int *port,
                    char *name, size_t ncap);
int etb__round_parse(const char *v, long long *round, long long *hrev);
int etb_host(etb_t *t, char *addr, size_t acap, int *port, char *name,
             size_t ncap, int *here);
/* The host was lost: elect another. ETB_ELECT_AFTER: the key of the lost
 * one must go first (its lease expires, or it left); ETB_ELECT_DEAD: the
 * lost one is known dead (its kernel refused a connection): its key is
 * removed now, if no other took it meanwhile; ETB_ELECT_ANY: whoever holds
 * the key (after this node was cut off). ETB_ELECTED when done. */
enum { ETB_ELECT_AFTER = 0, ETB_ELECT_DEAD = 1, ETB_ELECT_ANY = 2,
       ETB_ELECT_AGAIN = 3 /* the last election once more, as it was */ };
void etb_elect(etb_t *t, int how);
/* The host formed round r: record it (fenced by the host key). */
void etb_record_round(etb_t *t, int64_t r);
/* Before the workers of round r start: ETB_ROUND_OK once etcd holds the
 * round record of r (or later) written by the host elected last, while it
 * held the host key. A host cut off or deposed cannot write it: nobody
 * starts its rounds' workers (no split brain). */
void etb_wait_round(etb_t *t, int64_t r);
/* The round etcd confirmed last, -1 none. */
int64_t etb_round_ok(etb_t *t);
/* etcd's member list, for messages. */
const char *etb_members(const etb_t *t);
const char *etb_error(etb_t *t, char *buf, size_t cap);
/* Stop the thread, revoke the lease (this node leaves the job's keys),
 * close the async handle. NULL is a no-op. */
void etb_close(etb_t *t);

#endif
