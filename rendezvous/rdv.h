/* rdv.h - the rendezvous module of the server: jobs -> rounds -> members,
 * heartbeats, restart generations, the exit barrier and the root cause.
 * Every server has it (srv_new calls rdv_install()); speaks the native ops JOIN,
 * HEARTBEAT, LEAVE, REPORT and STATUS (docs/rendezvous.md) and pushes
 * RESTART and SHUTDOWN. Loop thread only. */
#ifndef RDV_H
#define RDV_H

#include "server.h"

/* Keys of the JOIN, REPORT and STATUS maps and of the round reply. */
#define RDV_K_HOST "host"
#define RDV_K_ADDR "addr"
#define RDV_K_NPROC "nproc"
#define RDV_K_RANK "rank"          /* preferred node rank, -1 none */
#define RDV_K_MIN "min"
#define RDV_K_MAX "max"
#define RDV_K_LAST_CALL "last_call_ms"
#define RDV_K_JOIN_TIMEOUT "join_timeout_ms"
#define RDV_K_HEARTBEAT "heartbeat_ms"
#define RDV_K_MAX_RESTARTS "max_restarts"
#define RDV_K_STATIC "static"
#define RDV_K_FINGERPRINT "fingerprint"
#define RDV_K_ALLOW_MISMATCH "allow_mismatch"
#define RDV_K_EXPECTED "expected"
#define RDV_K_MASTER_PORT "master_port"

void rdv_install(srv_t *s);

/* Members of a job still connected (the hosting agent waits for the others
 * to receive SHUTDOWN before closing its server). */
int rdv_connected_members(srv_t *s, const char *job);

#endif /* RDV_H */
