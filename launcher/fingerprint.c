/* fingerprint.c - this node's fingerprint (what must be the same on every
 * node of a job), for the rendezvous and `launch env --fingerprint`. */
#include <string.h>

#include "aff.h"
#include "env.h"
#include "launch.h"
#include "lu.h"

int launch_node_fingerprint(const env_t *e, const char *profile,
                            const aff_topo_t *t, const char *const *files,
                            env_fp_t **out, char *err, size_t errlen) {
  aff_sysinfo_t si;
  env_fp_input_t in = ENV_FP_INPUT_INIT;
  char model[64] = "";
  int ngpus = t ? aff_topo_ngpus(t) : 0;
  memset(&si, 0, sizeof(si));
  si.ngpus = -1;
  /* Loading NVML, libcudart and libnccl costs milliseconds and megabytes:
   * only where there is a GPU to describe. */
  if (ngpus > 0 || lu_gpu_count(NULL) > 0)
    aff_sysinfo_probe(&si, NULL);
  if (ngpus > 0)
    lu_strlcpy(model, aff_topo_gpu(t, 0)->model, sizeof(model));
  else if (si.gpu_model[0])
    lu_strlcpy(model, si.gpu_model, sizeof(model));
  if (ngpus == 0 && si.ngpus > 0)
    ngpus = si.ngpus;
  in.env = e;
  in.profile = profile;
  in.driver = si.driver;
  in.cuda_driver = si.cuda_driver;
  in.cuda_runtime = si.cuda_runtime;
  in.nccl = si.nccl;
  in.gpu_model = model;
  in.gpu_count = ngpus;
  in.files = files;
  return env_fp_collect(&in, out, err, errlen);
}

