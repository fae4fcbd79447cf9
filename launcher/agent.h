/* agent.h - the per-node agent: joins the rendezvous (hosting the server
 * when this node is the endpoint), starts the workers with torchrun's
 * environment, supervises them and follows the job through restarts to its
 * end. */
#ifndef AGENT_H
#define AGENT_H

#include "config.h"

/* Run the agent to the end of the job. RET the process exit status: 0 when
 * every worker of every node exited 0, else the root cause's exit code
 * (128 + signal when it was killed), 1 for rendezvous errors, 128 + signal
 * when the agent itself was stopped by a signal. */
int agent_run(cfg_t *o);

#endif /* AGENT_H */
