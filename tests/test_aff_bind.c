/* test_aff_bind.c - bindings applied for real on this machine: a forked
 * child applies its plan and execs cat, whose /proc/self/status and
 * numa_maps show what the worker got; a refused binding is reported and
 * the worker still runs; save/apply/restore around a spawn. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <numaif.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aff.h"
#include "test.h"

extern char **environ;

/* Fork, apply b in the child, exec cat on its own status and numa_maps.
 * RET the captured output (stdout + stderr), malloc'd. */
static char *run_bound(const aff_binding_t *b) {
  char out[512];
  pid_t pid;
  int status;
  snprintf(out, sizeof(out), "%s/cat.%d", test_tmpdir(), b->local_rank);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
      _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    /* what the agent does between fork and exec */
    aff_apply_child(b, 2);
    execlp("cat", "cat", "/proc/self/status", "/proc/self/numa_maps",
           (char *)NULL);
    _exit(127);
  }
  ASSERT_EQ(pid, waitpid(pid, &status, 0));
  ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return test_read_file(out);
}

/* The value of "Key:\t..." in /proc/self/status text. */
static void status_field(const char *text, const char *key, char *buf,
                         size_t n) {
  const char *p = strstr(text, key);
  size_t k;
  ASSERT(p != NULL);
  p += strlen(key);
  while (*p == ' ' || *p == '\t')
    p++;
  k = strcspn(p, "\n");
  snprintf(buf, n, "%.*s", (int)k, p);
}

static aff_topo_t *live(void) {
  aff_topo_opts_t o = AFF_TOPO_OPTS_INIT;
  aff_topo_t *t = NULL;
  char err[256];
  o.gpu_source = AFF_GPUSRC_PCI;
  ASSERT_EQ(0, aff_topo_load(&o, &t, err, sizeof(err)));
  return t;
}

static aff_plan_t *mkplan(const aff_topo_t *t, const char *cpu, const char *mem,
                          int n) {
  aff_policy_t *p = malloc(sizeof(*p));
  aff_plan_t *pl = NULL;
  char err[256];
  ASSERT(p != NULL);
  ASSERT_EQ(0, aff_policy_parse(cpu, mem, p, err, sizeof(err)));
  ASSERT_EQ(0, aff_plan_new(t, p, n, NULL, &pl, err, sizeof(err)));
  free(p);
  return pl;
}

/* Two ranks split the CPUs near them without overlap (one CPU each on a
 * 2-CPU machine); memory bound to the rank's node. */
static void test_cores_and_membind(const aff_topo_t *t, const aff_cpuset_t *mine) {
  aff_plan_t *p = mkplan(t, "cores", "local", 2);
  for (int r = 0; r < 2; r++) {
    const aff_binding_t *b = aff_plan_rank(p, r);
    char *text = run_bound(b);
    char got[256], want[64];
    ASSERT(text != NULL);
    status_field(text, "Cpus_allowed_list:", got, sizeof(got));
    ASSERT_STR_EQ(got, b->cpulist);
    ASSERT(aff_cpuset_count(&b->cpus) >= 1);
    for (int c = aff_cpuset_first(&b->cpus); c >= 0; c = aff_cpuset_next(&b->cpus, c))
      ASSERT(aff_cpuset_isset(mine, c));
    /* cores: the two ranks own disjoint CPUs */
    ASSERT(!aff_cpuset_intersects(&b->cpus, &aff_plan_rank(p, 1 - r)->cpus));
    if (b->mem_policy) {
      /* The memory policy shows in numa_maps as the task policy. */
      snprintf(want, sizeof(want), " bind:%d ", b->numa);
      ASSERT_CONTAINS(text, want);
      status_field(text, "Mems_allowed_list:", got, sizeof(got));
      snprintf(want, sizeof(want), "%d", b->numa);
      ASSERT_CONTAINS(got, want);
    } else {
      /* no NUMA node known (a VM hiding it): said, and nothing bound */
      ASSERT_EQ(-1, b->numa);
      ASSERT(aff_plan_nwarnings(p) > 0);
      ASSERT(strstr(text, " bind:") == NULL);
    }
    ASSERT(strstr(text, "failed") == NULL);
    free(text);
  }
  aff_plan_free(p);
}

/* An explicit list and a preferred node. */
static void test_list(const aff_topo_t *t, const aff_cpuset_t *mine) {
  char list[32], got[64];
  aff_plan_t *p;
  char *text;
  snprintf(list, sizeof(list), "%d", aff_cpuset_first(mine));
  p = mkplan(t, list, "preferred", 1);
  text = run_bound(aff_plan_rank(p, 0));
  status_field(text, "Cpus_allowed_list:", got, sizeof(got));
  ASSERT_STR_EQ(got, list);
  ASSERT_CONTAINS(text, " prefer:");
  free(text);
  aff_plan_free(p);
}

/* Unbound: the child keeps the agent's CPUs and the default policy. */
static void test_none(const aff_topo_t *t) {
  aff_plan_t *p = mkplan(t, "none", "none", 1);
  char got[256], mine[256];
  char *text = run_bound(aff_plan_rank(p, 0));
  char *self = test_read_file("/proc/self/status");
  status_field(text, "Cpus_allowed_list:", got, sizeof(got));
  status_field(self, "Cpus_allowed_list:", mine, sizeof(mine));
  ASSERT_STR_EQ(got, mine);
  ASSERT_STR_EQ(aff_plan_rank(p, 0)->cpulist, mine);
  ASSERT(strstr(text, " bind:") == NULL);
  free(text);
  free(self);
  aff_plan_free(p);
}

/* The kernel refuses (a CPU this machine lacks: what a shrunk cgroup does
 * to a stale plan): the worker is told on stderr and still runs. */
static void test_refused(const aff_topo_t *t) {
  aff_plan_t *p = mkplan(t, "none", "none", 1);
  aff_binding_t *b = malloc(sizeof(*b));
  char *text;
  ASSERT(b != NULL);
  *b = *aff_plan_rank(p, 0);
  b->bind_cpus = 1;
  aff_cpuset_zero(&b->cpus);
  aff_cpuset_set(&b->cpus, AFF_MAX_CPUS - 1);
  ASSERT(aff_apply(b) < 0); /* refused here too, nothing changed */
  text = run_bound(b);
  ASSERT_CONTAINS(text, "launch: warning: local rank 0: binding to CPUs");
  ASSERT_CONTAINS(text, "failed, the worker runs on the CPUs it inherited: EINVAL");
  ASSERT_CONTAINS(text, "Cpus_allowed_list:"); /* cat ran */
  free(text);
  free(b);
  aff_plan_free(p);
}

/* Only the memory policy is refused (a node outside the cpuset's mems):
 * the CPUs hold, and the message says the memory alone failed (it said
 * "binding to CPUs 1, NUMA node 1 failed, the worker runs unbound"). */
static void test_mem_refused(const aff_topo_t *t, const aff_cpuset_t *mine) {
  char list[32], got[64];
  aff_plan_t *p;
  aff_binding_t *b = malloc(sizeof(*b));
  char *text;
  ASSERT(b != NULL);
  snprintf(list, sizeof(list), "%d", aff_cpuset_first(mine));
  p = mkplan(t, list, "local", 1);
  *b = *aff_plan_rank(p, 0);
  memset(b->nodemask, 0, sizeof(b->nodemask));
  b->nodemask[(AFF_MAX_CPUS - 1) / AFF_LONG_BITS] |=
      1ul << ((AFF_MAX_CPUS - 1) % AFF_LONG_BITS);
  b->mem_policy = MPOL_BIND;
  text = run_bound(b);
  status_field(text, "Cpus_allowed_list:", got, sizeof(got));
  ASSERT_STR_EQ(got, list);
  ASSERT_CONTAINS(text, "local rank 0: binding its memory to NUMA node");
  ASSERT_CONTAINS(text, "failed, its memory is not bound: EINVAL");
  ASSERT(strstr(text, "binding to CPUs") == NULL);
  free(text);
  free(b);
  aff_plan_free(p);
}

/* With uv_spawn there is no hook in the child: bind the spawning thread,
 * spawn, restore. */
int main(void) {
  int fds = test_fd_count();
  aff_topo_t *t = live();
  cpu_set_t cs;
  aff_cpuset_t mine;
  ASSERT_EQ(0, sched_getaffinity(0, sizeof(cs), &cs));
  aff_cpuset_zero(&mine);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &cs))
      aff_cpuset_set(&mine, c);
  if (access("/proc/self/numa_maps", R_OK) != 0) {
    fprintf(stderr, "no /proc/self/numa_maps (kernel without NUMA): skipped\n");
    return 77;
  }
  test_none(t);
  test_refused(t);
  test_mem_refused(t, &mine);
  if (aff_cpuset_count(&mine) < 2) {
    /* Splitting cores between two ranks needs two CPUs. */
    fprintf(stderr, "fewer than 2 CPUs allowed: core checks skipped\n");
    aff_topo_free(t);
    return 0;
  }
  test_cores_and_membind(t, &mine);
  test_list(t, &mine);
  aff_topo_free(t);
  ASSERT_EQ(fds, test_fd_count()); /* nothing left open */
  return 0;
}
