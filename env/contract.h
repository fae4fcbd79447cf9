/* contract.h - the worker contract: every variable launch gives a worker,
 * one row each. The writer (env/worker.c, env_set_contract) walks it to
 * build a rank's environment; the reader (rdzv_env_parse in librdzv,
 * rendezvous/envread.c) walks it to parse a worker's environment once, for
 * the client, the NCCL bootstrap, the checkpoint library and the runtime.
 * Adding a variable is one row here and one field in rdzv_env_t
 * (include/rdzv.h); docs/launcher.md#environment lists them for users.
 *
 *   X(NAME, TYPE, FIELD, FALLBACK, WRITE, BY)
 *
 * NAME      the variable
 * TYPE      INT (a number >= 0, in an int), I64 (a number >= 0), STR, BOOL
 *           (written "True"/"False" as torchrun does; read also 1/0)
 * FIELD     its member of rdzv_env_t. Unset: -1 for numbers and BOOL, NULL
 *           for STR. The writer skips an unset field.
 * FALLBACK  read when NAME is unset or empty (NULL: none)
 * WRITE     SET (over an inherited value), KEEP (only when the inherited
 *           environment has none: the user's value wins), OWN (as SET, and
 *           an inherited value is removed when the field is unset: a value
 *           of this round only)
 * BY        who sets it: torchrun (torchrun's contract, same name and
 *           meaning), launch (launch's own), ckpt (--ckpt-dir), binding
 *           (the rank's binding: affinity/ plans it, aff_binding_t holds
 *           the values; unset when nothing is bound), profile (the NCCL
 *           profile's name)
 *
 * The NCCL profile's own variables are not rows: a profile is itself a
 * table (prof_t, env/profiles/NAME.env, `launch env --show-profile`) applied
 * after these rows, its templates seeing them (${LAUNCH_HCA}); the lock
 * (env_locked_key) comes last. env/nccl_vars.def lists what NCCL reads,
 * for the lint.
 *
 * One rule when reading: an unset or empty variable is unset (then its
 * fallback is read); a value that does not parse is an error naming the
 * variable, and the field stays unset. */
#define ENV_CONTRACT(X)                                                        \
  X(LOCAL_RANK, INT, local_rank, NULL, SET, torchrun)                          \
  X(RANK, INT, rank, NULL, SET, torchrun)                                      \
  X(GROUP_RANK, INT, node_rank, "LAUNCH_NODE_RANK", SET, torchrun)             \
  X(ROLE_RANK, INT, role_rank, NULL, SET, torchrun)                            \
  X(ROLE_NAME, STR, role_name, NULL, SET, torchrun)                            \
  X(LOCAL_WORLD_SIZE, INT, local_world_size, NULL, SET, torchrun)              \
  X(WORLD_SIZE, INT, world_size, NULL, SET, torchrun)                          \
  X(GROUP_WORLD_SIZE, INT, nnodes, "LAUNCH_NNODES", SET, torchrun)             \
  X(ROLE_WORLD_SIZE, INT, role_world_size, NULL, SET, torchrun)                \
  X(MASTER_ADDR, STR, master_addr, NULL, SET, torchrun)                        \
  X(MASTER_PORT, INT, master_port, NULL, SET, torchrun)                        \
  X(TORCHELASTIC_RESTART_COUNT, I64, restart_count, NULL, SET, torchrun)       \
  X(TORCHELASTIC_MAX_RESTARTS, INT, max_restarts, NULL, SET, torchrun)         \
  X(TORCHELASTIC_RUN_ID, STR, run_id, NULL, SET, torchrun)                     \
  X(TORCHELASTIC_USE_AGENT_STORE, BOOL, use_agent_store, NULL, SET, torchrun)  \
  X(TORCHELASTIC_ERROR_FILE, STR, error_file, NULL, SET, torchrun)             \
  X(TORCHELASTIC_SIGNALS_TO_HANDLE, STR, signals, NULL, SET, torchrun)         \
  X(NCCL_ASYNC_ERROR_HANDLING, STR, nccl_async_eh, NULL, KEEP, torchrun)       \
  X(TORCH_NCCL_ASYNC_ERROR_HANDLING, STR, torch_nccl_async_eh, NULL, KEEP,     \
    torchrun)                                                                  \
  X(OMP_NUM_THREADS, STR, omp_num_threads, NULL, KEEP, torchrun)               \
  X(LAUNCH_RDZV_ENDPOINT, STR, endpoint, NULL, SET, launch)                    \
  X(LAUNCH_RDZV_ID, STR, rdzv_id, "TORCHELASTIC_RUN_ID", SET, launch)          \
  X(LAUNCH_RDZV_TOKEN_FILE, STR, token_file, NULL, SET, launch)                \
  X(LAUNCH_RDZV_TLS_CA, STR, tls_ca, NULL, SET, launch)                        \
  X(LAUNCH_RDZV_TLS_CERT, STR, tls_cert, NULL, SET, launch)                    \
  X(LAUNCH_RDZV_TLS_KEY, STR, tls_key, NULL, SET, launch)                      \
  X(LAUNCH_ROUND, I64, round, "TORCHELASTIC_RESTART_COUNT", SET, launch)       \
  X(LAUNCH_NODE_RANK, INT, launch_node_rank, NULL, SET, launch)                \
  X(LAUNCH_NNODES, INT, launch_nnodes, NULL, SET, launch)                      \
  X(LAUNCH_HOSTNAME, STR, hostname, NULL, SET, launch)                         \
  X(LAUNCH_ATTEMPT_DIR, STR, attempt_dir, NULL, SET, launch)                   \
  X(LAUNCH_PROGRESS_TAG, STR, progress_tag, NULL, OWN, launch)                 \
  X(LAUNCH_CKPT_DIR, STR, ckpt_dir, NULL, SET, ckpt)                           \
  X(LAUNCH_CKPT_KEEP, INT, ckpt_keep, NULL, SET, ckpt)                         \
  X(LAUNCH_RESUME_STEP, I64, resume_step, NULL, OWN, ckpt)                     \
  X(LAUNCH_CKPT_VERIFIED, I64, ckpt_verified, NULL, OWN, ckpt)               \
  X(LAUNCH_CPUS, STR, cpus, NULL, SET, binding)                                \
  X(LAUNCH_NUMA_NODE, STR, numa_node, NULL, SET, binding)                      \
  X(LAUNCH_GPU_BUSID, STR, gpu_busid, NULL, SET, binding)                      \
  X(LAUNCH_HCA, STR, hca, NULL, SET, binding)                                  \
  X(LAUNCH_HCA_PORT, STR, hca_port, NULL, SET, binding)                        \
  X(LAUNCH_NETDEV, STR, netdev, NULL, SET, binding)                            \
  X(LAUNCH_HCAS, STR, hcas, NULL, SET, binding)                                \
  X(LAUNCH_NCCL_PROFILE, STR, nccl_profile, NULL, SET, profile)
