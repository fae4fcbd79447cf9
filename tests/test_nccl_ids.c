/* test_nccl_ids.c - NCCL unique ids through the store: 64 ranks with 8
 * roots each get every root's id in one request; ids of a later restart
 * generation are new, and a rank of a new generation never reads an old
 * one; a communicator made again in the same round (the same name) gets
 * new ids, even for a rank that asks before its root. Needs libnccl (ncclGetUniqueId works without a GPU); skips without. */
#include <pthread.h>
#include <unistd.h>

#include "rdzv.h"
#include "test.h"

#define NR 64
#define RPR 8
#define NIDS (NR / RPR)

static rdzv_nccl_id_t got[NR][NIDS];
static int64_t gen_of_run;

static rdzv_client_t *conn(void) {
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  o.endpoint = test_server_endpoint();
  o.job = "nccl";
  ASSERT_OK(rdzv_connect(&o, &c));
  return c;
}

static void *rank_main(void *arg) {
  int rank = (int)(intptr_t)arg, n = 0;
  rdzv_client_t *c = conn();
  int rc = rdzv_nccl_ids(c, "world", rank, NR, RPR, gen_of_run, got[rank], &n,
                         test_ms(30000));
  if (rc != 0)
    TEST_FAIL("rank %d: %s (%s)", rank, rdzv_strerror(rc), rdzv_last_error(c));
  ASSERT_EQ(NIDS, n);
  rdzv_close(c);
  return NULL;
}

static void run_generation(int64_t gen) {
  pthread_t t[NR];
  gen_of_run = gen;
  for (int i = 0; i < NR; i++)
    ASSERT_EQ(0, pthread_create(&t[i], NULL, rank_main, (void *)(intptr_t)i));
  for (int i = 0; i < NR; i++)
    pthread_join(t[i], NULL);
  /* every rank holds the same ids; the roots' ids differ from each other */
  for (int r = 1; r < NR; r++)
    ASSERT_MEM_EQ(got[r], got[0], sizeof(got[0]));
  for (int i = 0; i < NIDS; i++)
    for (int j = i + 1; j < NIDS; j++)
      ASSERT(memcmp(&got[0][i], &got[0][j], sizeof(got[0][i])) != 0);
}

/* Two ranks of one root, each on its own connection, make the communicator
 * "again" twice in round 5; the second time rank 1 asks 300 ms before its
 * root publishes. */
static rdzv_nccl_id_t again[2][2];
static rdzv_client_t *again_c[2];

static void *again_rank(void *arg) {
  int rank = (int)(intptr_t)arg, n = 0, call = again_c[rank] != NULL;
  if (!call)
    again_c[rank] = conn();
  if (call && rank == 0)
    usleep(300000);
  ASSERT_OK(rdzv_nccl_ids(again_c[rank], "again", rank, 2, 2, 5,
                          &again[call][rank], &n, test_ms(10000)));
  ASSERT_EQ(1, n);
  return NULL;
}

static void test_made_again(void) {
  for (int call = 0; call < 2; call++) {
    pthread_t t[2];
    for (int r = 0; r < 2; r++)
      ASSERT_EQ(0, pthread_create(&t[r], NULL, again_rank, (void *)(intptr_t)r));
    for (int r = 0; r < 2; r++)
      pthread_join(t[r], NULL);
    ASSERT_MEM_EQ(&again[call][0], &again[call][1], sizeof(again[call][0]));
  }
  /* the second communicator's id is its own, for both ranks */
  ASSERT(memcmp(&again[0][0], &again[1][0], sizeof(again[0][0])) != 0);
  rdzv_close(again_c[0]);
  rdzv_close(again_c[1]);
}

int main(void) {
  rdzv_nccl_id_t first[NIDS], id;
  rdzv_client_t *c;
  int v = rdzv_nccl_version(), n;
  if (v < 0) {
    printf("SKIP: NCCL is not loadable here (%s)\n", rdzv_strerror(v));
    return 77;
  }
  printf("NCCL %d.%d.%d\n", v / 10000, (v / 100) % 100, v % 100);
  test_server_start(NULL);
  run_generation(0);
  memcpy(first, got[0], sizeof(first));
  /* a restart: new ids, none equal to an old one */
  run_generation(1);
  for (int i = 0; i < NIDS; i++)
    for (int j = 0; j < NIDS; j++)
      ASSERT(memcmp(&first[i], &got[0][j], sizeof(id)) != 0);
  /* generation 2 has no root yet: a non-root rank waits, and does not take
   * generation 1's ids */
  c = conn();
  ASSERT_EQ(-ETIMEDOUT, rdzv_nccl_ids(c, "world", 1, NR, RPR, 2, &id, &n, 300));
  /* the generation comes from the environment when not given */
  setenv("LAUNCH_ROUND", "1", 1);
  ASSERT_OK(rdzv_nccl_ids(c, "world", 3, NR, RPR, -1, got[0], &n, 1000));
  ASSERT_EQ(NIDS, n);
  ASSERT(memcmp(&got[0][0], &got[1][0], sizeof(id)) == 0);
  ASSERT_EQ(RDZV_EINVAL, rdzv_nccl_ids(c, "world", NR, NR, RPR, 0, &id, &n, 100));
  rdzv_close(c);
  test_made_again();
  test_server_stop();
  printf("test_nccl_ids: ok\n");
  return 0;
}
