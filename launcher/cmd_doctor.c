/* cmd_doctor.c - `launch doctor`: this node's health, line by line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <unistd.h>

#include "doctor.h"
#include "launch.h"
#include "rdzv.h"
#include "srv_thread.h"



/* Gather every node's report through the rendezvous store and print one
 * table of what differs. RET the exit status. */
static int gather(doc_opts_t *dopts, const char *endpoint, int nnodes,
                  const char *job, const char *local_addr,
                  const char *token_file, int64_t timeout_ms, const char *host,
                  int *local_rc) {
  doc_report_t *mine = NULL;
  lu_endpoint_t ep;
  char ip[64] = "", key[1024], prefix[300], me[256];
  srvt_t *srv = NULL;
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  char *token = NULL, *text = NULL, **keys = NULL, *report = NULL;
  size_t tlen = 0, tl = 0, nkeys = 0;
  doc_report_t **reps = NULL;
  const char **names = NULL;
  rdzv_value_t *vals = NULL;
  int rc, status = 1, ndiff = 0, nfail = 0, ndup = 0;

  if (lu_endpoint_parse(endpoint, RDZV_DEFAULT_PORT, &ep) != 0 || ep.is_unix) {
    launch_usage_error("--rdzv-endpoint: '%s' does not parse: use HOST:PORT",
                       endpoint);
    return 2;
  }
  if (token_file && lu_read_token(token_file, &token, &tlen, key,
                                  sizeof(key)) != 0) {
    launch_usage_error("%s", key);
    return 2;
  }
  /* Host the server when the endpoint is this node (as the agent does). */
  if (launch_resolve_ip(ep.host, ip, sizeof(ip)) == 0 && launch_ip_is_local(ip) &&
      (local_addr == NULL || !strcmp(local_addr, ip))) {
    srv_config_t cfg = SRV_CONFIG_INIT;
    cfg.host = ip;
    cfg.port = ep.port;
    cfg.token = token;
    cfg.token_len = tlen;
    rc = srvt_start(&cfg, &srv);
    if (rc != 0 && rc != UV_EADDRINUSE) {
      fprintf(stderr, "launch doctor: cannot host the server on %s:%d: %s\n",
              ip, ep.port, uv_strerror(rc));
      goto out;
    }
  }
  o.endpoint = endpoint;
  o.job = job;
  o.role = "admin";
  o.token = token;
  o.token_len = tlen;
  o.connect_timeout_ms = (int)timeout_ms;
  if ((rc = rdzv_connect(&o, &c)) != 0) {
    fprintf(stderr, "launch doctor: cannot reach the rendezvous at %s: %s "
            "(%s)\n", endpoint, rdzv_strerror(rc), rdzv_last_error(c));
    goto out;
  }
  /* Collect only now: the rendezvous endpoint is up, so its check means
   * something on every node. */
  if ((rc = doc_collect(dopts, &mine)) != 0) {
    fprintf(stderr, "launch doctor: %s\n", rdzv_strerror(rc));
    goto out;
  }
  {
    char *mt = NULL;
    if (doc_to_text(mine, &mt) == 0)
      fputs(mt, stdout);
    free(mt);
    fflush(stdout);
    *local_rc = doc_worst(mine) == DOC_FAIL ? 1 : 0;
  }
  if (doc_to_compact(mine, &text, &tl) != 0)
    goto out;
  /* Each node's report under its host name and a random id: two nodes
   * may share a name (containers, a copied image), and must not count as
   * one. */
  {
    uint8_t r[4];
    char hex[9];
    if (lu_random(r, sizeof(r)) != 0)
      memset(r, 0, sizeof(r));
    lu_hex(r, sizeof(r), hex);
    snprintf(me, sizeof(me), "%.200s#%s", host, hex);
  }
  snprintf(prefix, sizeof(prefix), "doctor/%s/report/", job);
  snprintf(key, sizeof(key), "%s%s", prefix, me);
  if ((rc = rdzv_set(c, key, text, tl, 10000)) != 0)
    goto rdzv_err;
  snprintf(key, sizeof(key), "doctor/%s/in", job);
  rc = rdzv_barrier(c, key, (uint32_t)nnodes, (int)timeout_ms);
  if (rc == -ETIMEDOUT) {
    rdzv_list(c, prefix, &keys, &nkeys, 10000);
    fprintf(stderr, "launch doctor: only %zu of %d nodes reported within %.0f "
            "s:", nkeys, nnodes, timeout_ms / 1000.0);
    for (size_t i = 0; i < nkeys; i++)
      fprintf(stderr, " %s", keys[i] + strlen(prefix));
    fprintf(stderr, "\n");
    goto out;
  }
  if (rc != 0)
    goto rdzv_err;
  if ((rc = rdzv_list(c, prefix, &keys, &nkeys, 10000)) != 0)
    goto rdzv_err;
  reps = calloc(nkeys + 1, sizeof(*reps));
  names = calloc(nkeys + 1, sizeof(*names));
  vals = calloc(nkeys + 1, sizeof(*vals));
  if (reps == NULL || names == NULL || vals == NULL)
    goto out;
  if ((rc = rdzv_multi_get(c, (const char *const *)keys, nkeys, vals, 10000)) != 0)
    goto rdzv_err;
  for (size_t i = 0; i < nkeys; i++) {
    char *hash;
    names[i] = keys[i] + strlen(prefix);
    /* "host#id" is shown as "host", unless another node has that name */
    if ((hash = strrchr(keys[i], '#')) != NULL) {
      int dup = 0;
      for (size_t j = 0; j < nkeys; j++) {
        const char *on = keys[j] + strlen(prefix), *oh = strrchr(on, '#');
        dup |= j != i && oh && (size_t)(oh - on) == (size_t)(hash - names[i]) &&
               !strncmp(on, names[i], (size_t)(oh - on));
      }
      if (dup)
        ndup++;
      else
        *hash = '\0';
    }
    if (doc_from_compact(vals[i].data, vals[i].len, &reps[i]) != 0) {
      fprintf(stderr, "launch doctor: the report of %s does not parse\n",
              names[i]);
      goto out;
    }
    for (int k = 0; k < doc_count(reps[i]); k++)
      if (doc_item(reps[i], k)->status == DOC_FAIL) {
        if (nfail++ == 0)
          printf("failed checks:\n");
        printf("  %s: %s: %s (%s)\n", names[i], doc_item(reps[i], k)->title,
               doc_item(reps[i], k)->value, doc_item(reps[i], k)->reason);
      }
  }
  ndiff = doc_diff((const doc_report_t *const *)reps, names, (int)nkeys, &report);
  if (ndiff < 0)
    goto out;
  if (ndup > 0)
    printf("%d nodes share a host name: they are told apart by the id after "
           "'#'\n", ndup);
  if (ndiff == 0) {
    /* what was compared, by name */
    printf("%zu nodes agree on the items compared:", nkeys);
    for (int k = 0, col = 0; reps[0] && k < doc_count(reps[0]); k++)
      if (doc_item(reps[0], k)->same)
        printf("%s %s", col++ ? "," : "", doc_item(reps[0], k)->id);
    printf("\n");
  } else
    printf("%d item%s between the %zu nodes (only host name, address "
           "and node rank may):\n%s", ndiff, ndiff == 1 ? " differs" :
           "s differ", nkeys, report);
  status = ndiff || nfail ? 1 : 0;
  /* Leave together: the hosting node keeps the server up until all read. */
  snprintf(key, sizeof(key), "doctor/%s/out", job);
  rdzv_barrier(c, key, (uint32_t)nnodes, 30000);
  snprintf(key, sizeof(key), "%s%s", prefix, me);
  rdzv_delete(c, key, 10000);
  goto out;
rdzv_err:
  fprintf(stderr, "launch doctor: %s (%s)\n", rdzv_strerror(rc),
          rdzv_last_error(c));
out:
  for (size_t i = 0; reps && i < nkeys; i++)
    doc_free(reps[i]);
  for (size_t i = 0; vals && i < nkeys; i++)
    rdzv_free(vals[i].data);
  free(reps);
  free(names);
  free(vals);
  free(report);
  rdzv_free_keys(keys, nkeys);
  free(text);
  rdzv_close(c);
  srvt_stop(srv);
  doc_free(mine);
  free(token);
  return status;
}

int launch_cmd_doctor(int argc, char **argv) {
  doc_opts_t o = DOC_OPTS_INIT;
  doc_report_t *r = NULL;
  char *text = NULL, err[1024], endpoint[300];
  lu_endpoint_t ep;
  cfg_t c;
  int rc = cfg_parse(argc, argv, environ, CFG_DOCTOR_CMD, &c, err, sizeof(err));
  if (rc == 0 && c.doc_nnodes > 0 && !c.endpoint_given)
    rc = -1, lu_strlcpy(err, "doctor --nnodes needs --rdzv-endpoint HOST:PORT",
                        sizeof(err));
  else if (rc == 0 && c.env_json && c.doc_compact)
    rc = -1, lu_strlcpy(err, "doctor: --json and --compact exclude each other",
                        sizeof(err));
  if (rc != 0) {
    if (rc < 0)
      launch_usage_error("%s", err);
    cfg_free(&c);
    return rc < 0 ? 2 : 0;
  }
  lu_strlcpy(ep.host, c.endpoint_host, sizeof(ep.host));
  ep.port = c.endpoint_port;
  ep.is_unix = 0;
  lu_endpoint_format(&ep, endpoint, sizeof(endpoint));
  o.rdzv_endpoint = c.endpoint_given ? endpoint : NULL;
  o.nccl_profile = c.given[CFG_S_NCCL_PROFILE] ? c.nccl_profile : NULL;
  o.expect_gpus = c.doc_expect_gpus;
  o.root = c.env_root[0] ? c.env_root : NULL;
  o.probe_libs = !c.doc_no_probe;
  o.connect_timeout_ms = c.doc_timeout_ms;
  o.environ = environ;
  if (c.doc_nnodes > 0) {
    int local_rc = 0;
    rc = gather(&o, endpoint, c.doc_nnodes,
                c.given[CFG_S_ID] ? c.run_id : "doctor",
                c.local_addr[0] ? c.local_addr : NULL,
                c.token_file[0] ? c.token_file : NULL, c.doc_join_timeout_ms,
                c.host, &local_rc);
    cfg_free(&c);
    return rc || local_rc ? 1 : 0;
  }
  if ((rc = doc_collect(&o, &r)) != 0) {
    launch_usage_error("doctor: %s", rdzv_strerror(rc));
    cfg_free(&c);
    return 1;
  }
  rc = c.env_json      ? doc_to_json(r, &text)
       : c.doc_compact ? doc_to_compact(r, &text, NULL)
                       : doc_to_text(r, &text);
  if (rc == 0)
    fputs(text, stdout);
  free(text);
  rc = rc != 0 ? 1 : doc_worst(r) == DOC_FAIL ? 1 : 0;
  doc_free(r);
  cfg_free(&c);
  return rc;
}
