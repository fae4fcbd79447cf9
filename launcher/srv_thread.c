/* srv_thread.c - a server on its own loop thread. */
#include <pthread.h>
#include <stdlib.h>

#include "srv_thread.h"

struct srvt_s {
  uv_loop_t loop;
  uv_async_t stop;
  pthread_t thread;
  srv_t *srv;
};

static void closed(void *arg) {
  srvt_t *t = arg;
  uv_close((uv_handle_t *)&t->stop, NULL);
}

static void on_stop(uv_async_t *a) {
  srvt_t *t = a->data;
  srv_close(t->srv, closed, t);
}

static void *run(void *arg) {
  srvt_t *t = arg;
  uv_run(&t->loop, UV_RUN_DEFAULT);
  return NULL;
}

int srvt_start(const srv_config_t *cfg, srvt_t **out) {
  srvt_t *t = calloc(1, sizeof(*t));
  int rc;
  if (t == NULL)
    return RDZV_ENOMEM;
  uv_loop_init(&t->loop);
  uv_async_init(&t->loop, &t->stop, on_stop);
  t->stop.data = t;
  if ((rc = srv_new(&t->loop, cfg, &t->srv)) == 0)
    rc = srv_listen(t->srv);
  if (rc != 0) {
    if (t->srv)
      srv_close(t->srv, NULL, NULL);
    uv_close((uv_handle_t *)&t->stop, NULL);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    uv_loop_close(&t->loop);
    free(t);
    return rc;
  }
  if (pthread_create(&t->thread, NULL, run, t) != 0) {
    srv_close(t->srv, closed, t);
    uv_run(&t->loop, UV_RUN_DEFAULT);
    uv_loop_close(&t->loop);
    free(t);
    return RDZV_ENOMEM;
  }
  *out = t;
  return 0;
}

void srvt_stop(srvt_t *t) {
  if (t == NULL)
    return;
  uv_async_send(&t->stop);
  pthread_join(t->thread, NULL);
  uv_loop_close(&t->loop);
  free(t);
}
