/* launch.h - the launch command: subcommands share this interface. */
#ifndef LAUNCH_H
#define LAUNCH_H

#include "lu.h"

/* Each subcommand: argv[0] is the subcommand name. RET the exit code. */
int launch_cmd_server(int argc, char **argv);
int launch_cmd_status(int argc, char **argv);
int launch_cmd_topo(int argc, char **argv);
int launch_cmd_env(int argc, char **argv);
int launch_cmd_doctor(int argc, char **argv);

struct env_s;
struct env_fp_s;
struct aff_topo_s;
/* The node fingerprint the agent sends with its rendezvous join: e is a
 * rank's environment (env_build_rank), profile the profile's name, t the
 * topology (GPU model and count; NULL: NVML's), files the program to hash
 * (the executable, and the script for interpreters). Probes NVML, libcudart
 * and libnccl by dlopen: blocking, call it once at start. OUT *out: free
 * with env_fp_free(). RET 0 or -errno (a file to hash is unreadable: err
 * says which). */
int launch_node_fingerprint(const struct env_s *e, const char *profile,
                            const struct aff_topo_s *t,
                            const char *const *files, struct env_fp_s **out,
                            char *err, size_t errlen);

/* Is ip (text) one of this node's addresses (127/8 counts)? */
int launch_ip_is_local(const char *ip);
/* host's first address as text. RET 0 or RDZV_ERESOLVE. */
int launch_resolve_ip(const char *host, char *ip, size_t cap);

/* Print "launch: <msg>" to stderr; used for usage errors (exit 2). */
void launch_usage_error(const char *fmt, ...) LU_PRINTF(1, 2);
/* Raise RLIMIT_NOFILE's soft limit to the hard limit. */
void launch_raise_nofile(void);

#endif
