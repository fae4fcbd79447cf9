/* bench_proc.c - bench_proc.h. */
#include <stdio.h>

#include "bench_proc.h"

long bench_vmrss_kb(void) {
  char line[256];
  long kb = -1;
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL)
    return -1;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "VmRSS: %ld", &kb) == 1)
      break;
  fclose(f);
  return kb;
}
