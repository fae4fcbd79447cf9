/* cmd_doctor.c - `launch doctor`: this node's health, line by line. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <unistd.h>

#include "doctor.h"
#include "launch.h"
#include "rdzv.h"
#include "srv_thread.h"

extern char **environ;

static const char doctor_help[] =
    "usage: launch doctor [options]\n"
    "\n"
    "Checks this node the way the runbooks do by hand (host, OS, kernel,\n"
    "CPUs/NUMA, GPUs and driver, CUDA and NCCL versions, persistence mode,\n"
    "nouveau, NUMA balancing, huge pages, InfiniBand ports, NICs, GPU<->NIC\n"
    "NUMA placement, GPUDirect RDMA, the NCCL environment, the rendezvous\n"
    "port). Every line is PASS, INFO, WARN or FAIL with the reason and the\n"
    "fix. Exit status 1 when any line fails.\n"
    "\n"
    "options:\n"
    "  --rdzv-endpoint H:P     check that the rendezvous port answers\n"
    "  --nccl-profile P        lint this NCCL profile (name or file) too\n"
    "  --expect-gpus N         fail unless exactly N GPUs are present\n"
    "  --root DIR              read /sys, /proc and /etc under DIR\n"
    "  --no-probe              do not load NVML, libcudart, libnccl\n"
    "  --timeout MS            connect timeout for --rdzv-endpoint (3000)\n"
    "  --nnodes N              gather the reports of N nodes through the\n"
    "                          rendezvous at --rdzv-endpoint and print what\n"
    "                          differs (only host name,\n"
    "                          address and node rank may); the node whose\n"
    "                          address is the endpoint hosts the server\n"
    "  --rdzv-id ID            job id of the gathering (default doctor)\n"
    "  --local-addr A          this node's address (default: detected)\n"
    "  --token-file F          the server's token, if it requires one\n"
    "  --join-timeout SECONDS  wait this long for every node (default 60)\n"
    "  --json                  JSON report\n"
    "  --compact               the line format agents send to node 0\n"
    "\n"
    "example:\n"
    "  launch doctor --rdzv-endpoint 10.10.10.11:29400 --expect-gpus 8\n"
    "  launch doctor --nnodes 4 --rdzv-endpoint 10.10.10.11:29400  # every node\n";

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}


/* Gather every node's report through the rendezvous store and print one
 * table of what differs. RET the exit status. */
static int gather(doc_opts_t *dopts, const char *endpoint, int nnodes,
                  const char *job, const char *local_addr,
                  const char *token_file, int64_t timeout_ms, int *local_rc) {
  doc_report_t *mine = NULL;
  lu_endpoint_t ep;
  char ip[64] = "", host[256], key[1024], prefix[300];
  srvt_t *srv = NULL;
  rdzv_options_t o = RDZV_OPTIONS_INIT;
  rdzv_client_t *c = NULL;
  char *token = NULL, *text = NULL, **keys = NULL, *report = NULL;
  size_t tlen = 0, tl = 0, nkeys = 0;
  doc_report_t **reps = NULL;
  const char **names = NULL;
  rdzv_value_t *vals = NULL;
  int rc, status = 1, ndiff = 0, nfail = 0;
  const char *h = getenv("LAUNCH_HOSTNAME");

  if (lu_endpoint_parse(endpoint, RDZV_DEFAULT_PORT, &ep) != 0 || ep.is_unix) {
    launch_usage_error("--rdzv-endpoint: '%s' does not parse: use HOST:PORT",
                       endpoint);
    return 2;
  }
  if (h && *h)
    lu_strlcpy(host, h, sizeof(host));
  else if (gethostname(host, sizeof(host)) != 0)
    lu_strlcpy(host, "localhost", sizeof(host));
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
  snprintf(prefix, sizeof(prefix), "doctor/%s/report/", job);
  snprintf(key, sizeof(key), "%s%s", prefix, host);
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
    names[i] = keys[i] + strlen(prefix);
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
  if (ndiff == 0)
    printf("%zu nodes agree on everything that must be identical\n", nkeys);
  else
    printf("%d items differ between the %zu nodes (only host name, address "
           "and node rank may):\n%s", ndiff, nkeys, report);
  status = ndiff || nfail ? 1 : 0;
  /* Leave together: the hosting node keeps the server up until all read. */
  snprintf(key, sizeof(key), "doctor/%s/out", job);
  rdzv_barrier(c, key, (uint32_t)nnodes, 30000);
  snprintf(key, sizeof(key), "%s%s", prefix, host);
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
  static const struct option opts[] = {
      {"rdzv-endpoint", required_argument, 0, 'e'},
      {"nccl-profile", required_argument, 0, 'p'},
      {"expect-gpus", required_argument, 0, 'g'},
      {"root", required_argument, 0, 'r'},
      {"no-probe", no_argument, 0, 'n'},
      {"timeout", required_argument, 0, 't'},
      {"json", no_argument, 0, 'j'},
      {"compact", no_argument, 0, 'c'},
      {"nnodes", required_argument, 0, 'N'},
      {"rdzv-id", required_argument, 0, 'I'},
      {"local-addr", required_argument, 0, 'L'},
      {"token-file", required_argument, 0, 'T'},
      {"join-timeout", required_argument, 0, 'J'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  doc_opts_t o = DOC_OPTS_INIT;
  doc_report_t *r = NULL;
  char *text = NULL;
  int opt, json = 0, compact = 0, rc, nnodes = 0;
  const char *job = "doctor", *local_addr = NULL, *token_file = NULL;
  int64_t join_timeout_ms = 60000;
  optind = 1;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (opt) {
    case 'e': o.rdzv_endpoint = optarg; break;
    case 'p': o.nccl_profile = optarg; break;
    case 'g':
      if (lu_parse_int(optarg, 0, 1024, &o.expect_gpus) != 0) {
        launch_usage_error("--expect-gpus: '%s' is not a number from 0 to 1024",
                           optarg);
        return 2;
      }
      break;
    case 'r': o.root = optarg; break;
    case 'n': o.probe_libs = 0; break;
    case 't':
      if (lu_parse_int(optarg, 1, 600000, &o.connect_timeout_ms) != 0) {
        launch_usage_error("--timeout: '%s' is not milliseconds (1-600000)",
                           optarg);
        return 2;
      }
      break;
    case 'j': json = 1; break;
    case 'c': compact = 1; break;
    case 'N':
      if (lu_parse_int(optarg, 1, 1 << 16, &nnodes) != 0) {
        launch_usage_error("--nnodes: '%s' is not a number of nodes", optarg);
        return 2;
      }
      break;
    case 'I': job = optarg; break;
    case 'L': local_addr = optarg; break;
    case 'T': token_file = optarg; break;
    case 'J':
      if (lu_parse_duration_ms(optarg, &join_timeout_ms) != 0) {
        launch_usage_error("--join-timeout: '%s' is not a duration", optarg);
        return 2;
      }
      break;
    case 'h': fputs(doctor_help, stdout); return 0;
    default:
      launch_usage_error("doctor: unknown or incomplete option '%s' (see "
                         "launch doctor --help)",
                         argv[optind - 1]);
      return 2;
    }
  }
  if (optind < argc) {
    launch_usage_error("doctor: unexpected argument '%s'", argv[optind]);
    return 2;
  }
  if (nnodes > 0 && o.rdzv_endpoint == NULL) {
    launch_usage_error("doctor --nnodes needs --rdzv-endpoint HOST:PORT");
    return 2;
  }
  if (json && compact) {
    launch_usage_error("doctor: --json and --compact exclude each other");
    return 2;
  }
  if (o.root && !is_dir(o.root)) {
    launch_usage_error("--root %s: not a directory (give the top of a tree "
                       "holding sys/, proc/ and etc/)",
                       o.root);
    return 2;
  }
  o.environ = environ;
  if (nnodes > 0) {
    int local_rc = 0;
    rc = gather(&o, o.rdzv_endpoint, nnodes, job, local_addr, token_file,
                join_timeout_ms, &local_rc);
    return rc || local_rc ? 1 : 0;
  }
  if ((rc = doc_collect(&o, &r)) != 0) {
    launch_usage_error("doctor: %s", rdzv_strerror(rc));
    return 1;
  }
  rc = json ? doc_to_json(r, &text)
            : compact ? doc_to_compact(r, &text, NULL) : doc_to_text(r, &text);
  if (rc == 0)
    fputs(text, stdout);
  free(text);
  rc = rc != 0 ? 1 : doc_worst(r) == DOC_FAIL ? 1 : 0;
  doc_free(r);
  return rc;
}
