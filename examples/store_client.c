/* store_client.c - a trainer-side program using librdzv the way a user
 * would: built against the installed header and library through
 * pkg-config (see examples/README.md):
 *
 *   cc store_client.c $(pkg-config --cflags --libs rdzv) -o store_client
 *   LAUNCH_RDZV_ENDPOINT=host:29400 LAUNCH_RDZV_ID=myjob ./store_client 0 2
 *
 * Each of N copies publishes its rank, waits for the others, adds to a
 * shared counter and meets the others at a barrier. */
#include <rdzv.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  rdzv_client_t *c;
  char key[64], val[64];
  int rank, world, rc;
  int64_t total = 0;

  if (argc != 3) {
    fprintf(stderr, "usage: %s RANK WORLD_SIZE\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  world = atoi(argv[2]);
  if ((rc = rdzv_connect_from_env(&c)) != 0) {
    fprintf(stderr, "connect: %s\n", rdzv_strerror(rc));
    return 1;
  }
  snprintf(key, sizeof(key), "rank/%d", rank);
  snprintf(val, sizeof(val), "hello from %d", rank);
  if ((rc = rdzv_set(c, key, val, sizeof(val), 10000)) != 0 ||
      (rc = rdzv_add(c, "sum", rank + 1, NULL, 10000)) != 0 ||
      (rc = rdzv_barrier(c, "all-added", (uint32_t)world, 30000)) != 0 ||
      (rc = rdzv_add(c, "sum", 0, &total, 10000)) != 0) {
    fprintf(stderr, "rank %d: %s (%s)\n", rank, rdzv_strerror(rc),
            rdzv_last_error(c));
    rdzv_close(c);
    return 1;
  }
  printf("rank=%d world_size=%d sum=%lld\n", rank, world, (long long)total);
  rdzv_close(c);
  return total == (int64_t)world * (world + 1) / 2 ? 0 : 1;
}
