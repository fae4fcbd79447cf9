/* srv_thread.h - a rendezvous server on a loop of its own thread, for
 * blocking commands (launch doctor --nnodes) that host the server while
 * they use librdzv. */
#ifndef SRV_THREAD_H
#define SRV_THREAD_H

#include "server.h"

typedef struct srvt_s srvt_t;

/* Bind and start serving (with the rendezvous module).
 * OUT *out. RET 0, or the srv_listen error (-EADDRINUSE: one runs there). */
int srvt_start(const srv_config_t *cfg, srvt_t **out);
/* Stop the server, join the thread, free. NULL is a no-op. */
void srvt_stop(srvt_t *t);

#endif
