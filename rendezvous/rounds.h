/* rounds.h - the rendezvous module of the server: jobs -> rounds -> members,
 * heartbeats, restarts, the exit barrier and the root cause.
 * Every server has it (srv_new calls rounds_install()); speaks the native ops JOIN,
 * HEARTBEAT, LEAVE, REPORT and STATUS (docs/rendezvous.md) and pushes
 * RESTART and SHUTDOWN, each message packed and unpacked by msg.h. Loop thread only. */
#ifndef ROUNDS_H
#define ROUNDS_H

#include "server.h"

void rounds_install(srv_t *s);
/* HEARTBEAT's optional argument, flags: QUIET wants no reply (the agent
 * asks for one only when it has heard nothing from the server for two
 * heartbeats). Without it a heartbeat is answered ok. */
#define ROUNDS_HEARTBEAT_QUIET 1

/* Members of a job still connected (the hosting agent waits for the others
 * to receive SHUTDOWN before closing its server). */
int rounds_connected_members(srv_t *s, const char *job);

#endif /* ROUNDS_H */
