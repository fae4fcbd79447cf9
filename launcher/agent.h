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

/* What the agent reads from its store that other processes wrote
 * (agent.c; fuzz_store_vals drives them):
 * lost_steps: rank 0's progress value "STEP UNIX-MS" (p, n bytes). RET 0
 *   with a step > 0, else -1.
 * moved_addr: the moved key's address or host name, NUL-terminated in
 *   addr. RET 0, -1 when it is none (empty, too long, other bytes). */
int agent__lost_steps(const char *p, size_t n, long long *step,
                      long long *ms);
int agent__moved_addr(const char *p, size_t n, char *addr, size_t cap);

#endif /* AGENT_H */
