/* bench_proc.h - what the benchmarks read of their own process. */
#ifndef BENCH_PROC_H
#define BENCH_PROC_H

/* This process's VmRSS (/proc/self/status), kB; -1 unreadable. */
long bench_vmrss_kb(void);

#endif
