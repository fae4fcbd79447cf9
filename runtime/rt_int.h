/* rt_int.h - private to the runtime: the TCP mesh of the CPU collectives
 * (rt_mesh.c) and the GPU side, CUDA driver and NCCL loaded at run time
 * (rt_gpu.c). */
#ifndef RT_INT_H
#define RT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "rdzv.h"

/* Who is speaking, for messages: "rank 3 on node2". */
typedef struct rt_who_s {
  int rank;
  char text[300];
} rt_who_t;

/* Print "<who>: <message>" to stderr, one line. */
void rt__logf(const rt_who_t *who, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The rank environment a standby is handed (rt_standby.c): NUL-terminated
 * KEY=VALUE strings, KEY not empty, len bytes in all. RET 0, or
 * RDZV_EINVAL with why set. */
int rt__standby_check(const char *blob, size_t len, char *why, size_t wn);

/* ---- TCP mesh (CPU collectives) ------------------------------------------- */

typedef struct rt_mesh_s rt_mesh_t;

/* Listen, publish this rank's address in the store (keys of this round),
 * connect to every other rank. The store client is used only during this
 * call. RET 0 or a negative code (reported). */
int rt__mesh_open(rdzv_client_t *store, const rt_who_t *who, int world,
                  int64_t round, int timeout_ms, rt_mesh_t **out);
void rt__mesh_close(rt_mesh_t *m);
/* The parts of rt__mesh_open, for fuzz_mesh: a mesh with no connection
 * (rt__mesh_fds: its fd per rank, -1 none, which the mesh closes); a
 * peer's address as the store holds it, "ADDR PORT NONCE"; the accept of
 * the ranks above this one on lfd (their hello, the answer, their ack).
 * RET 0 or a negative code. */
int rt__mesh_new(const rt_who_t *who, int world, int timeout_ms,
                 rt_mesh_t **out);
int *rt__mesh_fds(rt_mesh_t *m);
int rt__mesh_parse_peer(const char *v, struct sockaddr_storage *ss,
                        socklen_t *len, uint64_t *nonce);
int rt__mesh_accept(rt_mesh_t *m, int lfd, int64_t round, uint64_t nonce,
                    int64_t deadline);
/* Sum in rank order for every element; in place. One thread at a time. */
int rt__mesh_allreduce(rt_mesh_t *m, float *buf, size_t count);
int rt__mesh_broadcast(rt_mesh_t *m, void *buf, size_t bytes, int root);
/* part[0..world]: rank r's part of buf is elements [part[r], part[r+1]).
 * Reduce-scatter: rank r's part ends as the sum over ranks, in rank order;
 * the rest of buf is left as it was. All-gather: every rank's part is
 * copied to every rank (elements of esize bytes). */
int rt__mesh_reduce_scatter(rt_mesh_t *m, float *buf, const size_t *part);
int rt__mesh_allgather(rt_mesh_t *m, void *buf, const size_t *part,
                       size_t esize);

/* ---- GPU: CUDA driver API and NCCL, dlopen'ed --------------------------- */

typedef struct rt_gpu_s rt_gpu_t;

/* Load the driver, pick device local_rank % count, make its primary
 * context current. RET 0, RDZV_ENOTSUP when there is no driver or GPU
 * (*why says which), or a negative code (reported). */
int rt__gpu_open(const rt_who_t *who, int local_rank, rt_gpu_t **out,
                 const char **why);
void rt__gpu_close(rt_gpu_t *g);
int rt__gpu_device(const rt_gpu_t *g);
const char *rt__gpu_name(const rt_gpu_t *g);
int rt__gpu_cc(const rt_gpu_t *g);
/* The NCCL communicator of the job (store bootstrap, this round). */
int rt__gpu_nccl_init(rt_gpu_t *g, rdzv_client_t *store, int rank, int world,
                      int timeout_ms);
/* Enqueue a sum over ranks on the runtime's stream, after `event` when not
 * NULL. */
int rt__gpu_allreduce(rt_gpu_t *g, void *dptr, size_t count, int dtype,
                      void *event);
int rt__gpu_broadcast(rt_gpu_t *g, void *dptr, size_t bytes, int root);
/* rt__mesh_reduce_scatter and rt__mesh_allgather on NCCL (enqueued, the
 * reduce-scatter after `event` when not NULL): ncclReduceScatter /
 * ncclAllGather when every part has the same size, else one ncclReduce /
 * ncclBroadcast per rank in a group. */
int rt__gpu_reduce_scatter(rt_gpu_t *g, void *dptr, const size_t *part,
                           int dtype, void *event);
int rt__gpu_allgather(rt_gpu_t *g, void *dptr, const size_t *part,
                      size_t esize);
/* Host floats through a device staging buffer (blocks). */
int rt__gpu_allreduce_host(rt_gpu_t *g, float *buf, size_t count);
/* Wait for the runtime's stream, watching NCCL for asynchronous errors and
 * the timeout. */
int rt__gpu_wait(rt_gpu_t *g, int timeout_ms);

#endif
