/* rdv.h - the rendezvous module of the server: jobs -> rounds -> members,
 * heartbeats, restarts, the exit barrier and the root cause.
 * Every server has it (srv_new calls rdv_install()); speaks the native ops JOIN,
 * HEARTBEAT, LEAVE, REPORT and STATUS (docs/rendezvous.md) and pushes
 * RESTART and SHUTDOWN, each message packed and unpacked by msg.h. Loop thread only. */
#ifndef RDV_H
#define RDV_H

#include "server.h"

void rdv_install(srv_t *s);

/* Members of a job still connected (the hosting agent waits for the others
 * to receive SHUTDOWN before closing its server). */
int rdv_connected_members(srv_t *s, const char *job);

#endif /* RDV_H */
