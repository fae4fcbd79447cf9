/* fuzz_hostlist.c - lu_hostlist_expand(), the Slurm host list expansion
 * ("gpu[01-04,07],login1") the agent applies to SLURM_JOB_NODELIST and
 * host files. The input is one string.
 *
 * Invariants checked:
 * - the result is 0, RDZV_EINVAL, RDZV_ETOOBIG or RDZV_ENOMEM;
 * - on success there are 1..max names, each non-empty and free of '[', ']'
 *   and ',', and a list without brackets expands to its comma-separated
 *   items, in order (a trailing comma is tolerated);
 * - a host list of names that expanded joins back (with commas) to a list
 *   that expands to the same names;
 * - a refused list comes with a message saying why;
 * - the same string read as Slurm's task counts per node ("2(x3),1"):
 *   0 or RDZV_EINVAL (with a message); on success every node has at least
 *   one task and the node asked for is among those counted. */
#include "fuzz.h"
#include "lu.h"

#define MAX_HOSTS 512

static void check_plain(const char *s, char **hosts, size_t n) {
  size_t i = 0;
  const char *p = s;
  for (;;) {
    size_t len = strcspn(p, ",");
    FUZZ_CHECK(i < n && strlen(hosts[i]) == len &&
               memcmp(hosts[i], p, len) == 0);
    i++;
    /* One trailing comma is tolerated ("a,b,"), an empty item elsewhere
     * is refused. */
    if (p[len] == '\0' || p[len + 1] == '\0')
      break;
    p += len + 1;
  }
  FUZZ_CHECK(i == n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1), *joined;
  char **hosts = NULL, **again = NULL;
  size_t n = 0, n2 = 0, total = 0;
  int rc;
  FUZZ_CHECK(s != NULL);
  if (size)
    memcpy(s, data, size);
  s[size] = '\0';
  {
    char err[256] = "";
    int k = -2, nn = -2, node = (int)(size % 5);
    rc = lu_tasks_per_node(s, node, &k, &nn, err, sizeof(err));
    FUZZ_CHECK(rc == 0 || (rc == RDZV_EINVAL && err[0] != '\0'));
    FUZZ_CHECK(rc != 0 || (k >= 1 && nn > node));
    err[0] = '\0';
    rc = lu_hostlist_expand_err(s, MAX_HOSTS, &hosts, &n, err, sizeof(err));
    FUZZ_CHECK(rc == 0 || rc == RDZV_EINVAL || rc == RDZV_ETOOBIG ||
               rc == RDZV_ENOMEM);
    FUZZ_CHECK(rc == 0 || rc == RDZV_ENOMEM || err[0] != '\0');
  }
  if (rc != 0) {
    free(s);
    return 0;
  }
  FUZZ_CHECK(n >= 1 && n <= MAX_HOSTS);
  for (size_t i = 0; i < n; i++) {
    FUZZ_CHECK(hosts[i] != NULL && hosts[i][0] != '\0');
    FUZZ_CHECK(strpbrk(hosts[i], "[],") == NULL);
    total += strlen(hosts[i]) + 1;
  }
  if (strpbrk(s, "[]") == NULL)
    check_plain(s, hosts, n);
  joined = malloc(total);
  FUZZ_CHECK(joined != NULL);
  joined[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    if (i)
      strcat(joined, ",");
    strcat(joined, hosts[i]);
  }
  FUZZ_CHECK(lu_hostlist_expand(joined, MAX_HOSTS, &again, &n2) == 0);
  FUZZ_CHECK(n2 == n);
  for (size_t i = 0; i < n; i++)
    FUZZ_CHECK(strcmp(hosts[i], again[i]) == 0);
  lu_hostlist_free(hosts, n);
  lu_hostlist_free(again, n2);
  free(joined);
  free(s);
  return 0;
}
