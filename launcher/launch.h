/* launch.h - the launch command: subcommands share this interface. */
#ifndef LAUNCH_H
#define LAUNCH_H

#include "lu.h"

/* Each subcommand: argv[0] is the subcommand name. RET the exit code. */
int launch_cmd_server(int argc, char **argv);
int launch_cmd_topo(int argc, char **argv);

/* Print "launch: <msg>" to stderr; used for usage errors (exit 2). */
void launch_usage_error(const char *fmt, ...) LU_PRINTF(1, 2);
/* Raise RLIMIT_NOFILE's soft limit to the hard limit. */
void launch_raise_nofile(void);

#endif
