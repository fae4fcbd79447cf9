/* ck_int.h - internals of the checkpoint module (prefix ck_).
 *
 * pickle.c    a Python pickle walker: constants only, nothing executed
 * torchfile.c torch.save zip archives, safetensors headers
 * io.c        durable writes, the hashing writer and reader, tree removal
 * record.c    manifest, completion file, store record, `latest`
 * trust.c     the cache of what a long-lived agent already verified
 * steps.c     the scan result every layout fills, names layouts share
 * layout_launch.c  launch's layout: scan, finalise, prune, rollback,
 *             agent commit, what the trust cache learns from a commit
 * layout_peers.c   Megatron-LM, DeepSpeed, Hugging Face, DCP: read-only
 * scan.c      the layout table, detection, the scan driver, ckpt_strerror
 * agree.c     the resume-step agreement and its text form
 * ckpt.c      the trainer's API (save, background save, resume, load)
 *
 * Layers: a file calls only files listed above it (pickle.c below
 * torchfile.c; io.c, record.c, trust.c and steps.c below the layouts; the
 * layouts call each other only through steps.c; scan.c above them all).
 * agree.c calls none of them.
 */
#ifndef CK_INT_H
#define CK_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ck_store.h"
#include "ckpt.h"
#include "lu.h"

#define CK_MANIFEST "manifest.json"
#define CK_LATEST "latest"
#define CK_DCP_META ".metadata"     /* DCP's: launch must not take it */
#define CK_SHA_HEX 65              /* 64 hex digits + NUL */
#define CK_MAX_WORLD (1 << 20)     /* ranks in a manifest */
#define CK_META_MAX (64u << 20)    /* bytes of a metadata file we read */
#define CK_SMALL_MAX (1u << 20)    /* bytes of a pointer or completion file */

/* ---- JSON: util/json.c's reader, under the names this module uses ------------ */

typedef lu_jv_t cj_t;
typedef lu_jdoc_t cj_doc_t;
#define CJ_NULL LU_JV_NULL
#define CJ_BOOL LU_JV_BOOL
#define CJ_NUM LU_JV_NUM
#define CJ_STR LU_JV_STR
#define CJ_ARR LU_JV_ARR
#define CJ_OBJ LU_JV_OBJ
/* RET 0, CKPT_EFORMAT, RDZV_ENOMEM. */
static inline int cj_parse(const char *buf, size_t len, cj_doc_t **doc,
                           const cj_t **root, char *err, size_t errlen) {
  int rc = lu_jv_parse(buf, len, 0, doc, root, err, errlen);
  return rc == RDZV_EPROTO ? CKPT_EFORMAT : rc;
}
#define cj_free lu_jv_free
#define cj_get lu_jv_get
#define cj_int lu_jv_int

/* ---- pickle walker (pickle.c) -------------------------------------------------- */

typedef enum { PK_STR, PK_INT, PK_BOOL, PK_NONE, PK_OTHER } pk_kind_t;

typedef struct pk_atom_s {
  pk_kind_t kind;
  const char *s; /* PK_STR: the bytes as in the input (not NUL-terminated) */
  size_t len;
  int64_t i;     /* PK_INT (values beyond int64 are PK_OTHER), PK_BOOL */
} pk_atom_t;

/* Called for every value pushed by an opcode, in stream order: constants,
 * and values fetched back from the memo (BINGET ...) as the constant they
 * were. Everything else (globals, built containers) is PK_OTHER. Return
 * nonzero to stop the walk. */
typedef int (*pk_cb)(void *ud, const pk_atom_t *a);

/* Walk one pickle from p up to its STOP opcode without executing
 * anything. OUT *used: bytes consumed. RET 0, CKPT_EFORMAT (an unknown
 * opcode, a truncated argument, no STOP), RDZV_ENOMEM, or the callback's
 * nonzero value. */
int pk_walk(const unsigned char *p, size_t n, size_t *used, pk_cb cb, void *ud);

/* Integer values of top-level-looking "key": int pairs, the way a dict,
 * an argparse.Namespace or a dataclass is pickled: a string atom followed
 * at once by an int or bool atom. The first occurrence of each key wins. */
typedef struct pk_keyint_s {
  const char *key;
  int found;
  int64_t value;
} pk_keyint_t;
int pk_find_ints(const unsigned char *p, size_t n, pk_keyint_t *keys,
                 size_t nkeys);

/* DCP: the _StorageInfo records (relative_path, offset, length) of a
 * .metadata pickle. OUT *recs (malloc'd; paths point into p), *n.
 * RET 0, CKPT_EFORMAT, RDZV_ENOMEM. */
typedef struct pk_storage_s {
  const char *path;
  size_t plen;
  int64_t offset, length;
} pk_storage_t;
int pk_dcp_storage(const unsigned char *p, size_t n, pk_storage_t **recs,
                   size_t *nrecs);

/* ---- byte sources, torch.save archives, safetensors (torchfile.c) -------------- */

/* A file or a memory buffer read at offsets (fuzz targets use memory). */
typedef struct ck_src_s {
  int (*pread)(void *ctx, void *buf, size_t n, uint64_t off); /* 0, -errno */
  void *ctx;
  uint64_t size;
} ck_src_t;

typedef struct ck_mem_s {
  const unsigned char *p;
  size_t n;
} ck_mem_t;
void ck_src_mem(ck_src_t *s, ck_mem_t *m, const void *p, size_t n);
/* RET 0 or -errno; close with ck_src_close. */
int ck_src_file(ck_src_t *s, const char *path);
void ck_src_close(ck_src_t *s);

/* A torch.save file: the zip format (PyTorch >= 1.6) must end with its
 * end-of-central-directory record and every entry must lie inside the file
 * (a truncated save fails); the legacy format is a stream of pickles whose
 * first four must parse. With pkl != NULL, the main pickle (data.pkl of a
 * zip, the fourth pickle of a legacy file) is returned malloc'd.
 * why: the reason on failure. RET 0, CKPT_EINCOMPLETE (truncated or
 * empty), CKPT_EFORMAT, -errno, RDZV_ENOMEM. */
int ck_torch_check(const ck_src_t *s, unsigned char **pkl, size_t *pkl_len,
                   char *why, size_t whylen);

/* A safetensors file: an 8-byte little-endian header length, a JSON
 * header whose tensors' data_offsets must fit in the file.
 * RET 0, CKPT_EINCOMPLETE (file shorter than its header promises),
 * CKPT_EFORMAT, -errno, RDZV_ENOMEM. */
int ck_safetensors_check(const ck_src_t *s, char *why, size_t whylen);

/* ---- durable files and hashing (io.c) ------------------------------------------ */

/* fsync a directory. RET 0 or -errno. */
int ck_fsync_dir(const char *path);
/* mkdir path (0755); when created, fsync its parent. RET 0 or -errno. */
int ck_mkdir_durable(const char *path);
/* Write a small file: dir/.name.tmp-PID-RAND, fsync, rename to dir/name,
 * fsync dir. RET 0 or -errno. */
int ck_write_atomic(const char *dir, const char *name, const void *data,
                    size_t len);
/* The same, its ctime made later than after_ns (waiting for the file
 * system's clock to tick, a few ms at most): the manifest's, later than
 * any shard it lists (ckpt_trust_learn). after_ns < 0: no wait. */
int ck_write_atomic_after(const char *dir, const char *name, const void *data,
                          size_t len, int64_t after_ns);
/* The shard writer: the buffers into dir/name the same way, SHA-256
 * computed on a second thread while writing, write-back started early
 * (sync_file_range) so that the final fsync does not stall.
 * OUT *size, sha (CK_SHA_HEX). RET 0 or -errno. */
int ck_write_shard(const char *dir, const char *name, const struct iovec *iov,
                   int iovcnt, uint64_t *size, char *sha);
/* Read path into the buffers (their sizes must add up to the file's),
 * hashing on a second thread while reading. RET 0, CKPT_ESIZE, -errno. */
int ck_read_hashed(const char *path, const struct iovec *iov, int iovcnt,
                   char *sha);
/* SHA-256 of a whole file. OUT *size. RET 0 or -errno. */
int ck_hash_file(const char *path, uint64_t *size, char *sha);

/* A file's identity: what changes when anything writes to it. */
typedef struct ck_fid_s {
  uint64_t dev, ino, size;
  int64_t mtime_ns, ctime_ns;
} ck_fid_t;
struct stat;
void ck_fid_of(const struct stat *st, ck_fid_t *id);
/* ck_hash_file that also gives the identity of the file it read. OUT
 * *stable: 1 when fstat said the same before and after the read (id is
 * then the content's), else 0. */
int ck_hash_file_id(const char *path, uint64_t *size, char *sha,
                    ck_fid_t *id, int *stable);
/* Read path into the buffers without hashing (sizes must add up to the
 * file's). RET 0, CKPT_ESIZE, -errno. */
int ck_read_plain(const char *path, const struct iovec *iov, int iovcnt);

/* ---- the trust cache (trust.c) -------------------------------------------------- */

/* RET 1 when t vouches that the file with identity id holds sha. */
int ck_trust_has(ckpt_trust_t *t, const char *path, const ck_fid_t *id,
                 const char *sha);
/* Remember it (replaces the path's entry). */
void ck_trust_put(ckpt_trust_t *t, const char *path, const ck_fid_t *id,
                  const char *sha);
/* ---- small helpers (io.c) ------------------------------------------------------- */

/* Remove a directory tree we own (no symlink followed). RET 0 or -errno. */
int ck_rm_tree(const char *path);
/* "a/b" into buf; RET 0 or -ENAMETOOLONG. */
int ck_join(char *buf, size_t n, const char *a, const char *b);
/* Set problem (first writer wins). */
void ck_problem(char *problem, size_t n, const char *fmt, ...) LU_PRINTF(3, 4);
/* 8 random hex digits (for temporary names). */
void ck_rand_hex(char hex[9]);
/* A positive CPU count for thread pools, at most cap. */
int ck_threads(int want, int cap);

/* ---- records (record.c) ------------------------------------------------------- */

/* One rank's committed shard: what a completion file, a store record and a
 * manifest entry say. */
typedef struct ck_record_s {
  int rank;
  char file[CKPT_NAME_MAX];
  uint64_t size;
  char sha[CK_SHA_HEX];  /* "" when the completion file gave none */
  double time;           /* unix seconds of the commit; 0 unknown */
  int world_size;        /* 0 unknown */
  int replicated;
  double write_s;        /* seconds writing the shard ("write_ms"); 0
                            unknown (an older writer) */
} ck_record_t;

typedef struct ck_manifest_s {
  char job[CKPT_NAME_MAX];
  int64_t step;
  union {
    int64_t round; /* the round that wrote it; on disk "generation", the
                    * format's name, kept so that manifests stay readable */
    int64_t generation; /* the old name */
  };
  int world_size;
  int replicated;
  double time;
  ck_record_t *shards; /* world_size entries, indexed by rank */
} ck_manifest_t;

/* A file name we accept inside a step directory: no '/', not "." or "..",
 * no control characters, at most CKPT_NAME_MAX-1 bytes. */
int ck_name_ok(const char *s);
/* "rank-R.bin" */
void ck_shard_name(int rank, char *buf, size_t n);

/* A record as compact JSON (completion file and store value). */
int ck_record_encode(const ck_record_t *r, char **out, size_t *len);
/* Parse a completion file or a store record. rank_hint: the rank from the
 * file name (-1: the record must carry "rank"). RET 0, CKPT_EFORMAT (why
 * says which field), RDZV_ENOMEM. */
int ck_record_decode(const char *buf, size_t len, int rank_hint,
                     ck_record_t *r, char *why, size_t whylen);

/* The manifest (docs/checkpoints.md). OUT *out malloc'd, *len. */
int ck_manifest_encode(const ck_manifest_t *m, char **out, size_t *len);
/* RET 0, CKPT_EFORMAT, RDZV_ENOMEM. Free with ck_manifest_free. */
int ck_manifest_decode(const char *buf, size_t len, ck_manifest_t *m,
                       char *why, size_t whylen);
void ck_manifest_free(ck_manifest_t *m);

/* `latest`: "step-N\n". RET 0 and *step, or CKPT_EFORMAT. */
int ck_latest_decode(const char *buf, size_t len, int64_t *step);
/* "step-N" with N a decimal without sign or leading zeros. RET 0 or -1. */
int ck_parse_step_name(const char *name, int64_t *step);

/* ---- the scan result and shared names (steps.c) ------------------------------ */

/* Append a step (zeroed, step -1) to s. RET it or NULL (ENOMEM). */
ckpt_step_t *ck_scan_add(ckpt_scan_t *s);
/* Sort newest first (unknown steps last, then by name), set latest/resume
 * from is_latest/state. */
void ck_scan_sort(ckpt_scan_t *s);
/* After sorting: say in latest_problem when the layout's pointer (what
 * names the latest step) names a step that is missing or not complete. */
void ck_latest_verdict(ckpt_scan_t *s, const char *pointer);
/* Trailing decimal number of a name ("iter_0000100" -> 100), or -1. */
int64_t ck_trailing_number(const char *name);
/* name is prefix followed by at least one digit and nothing else. */
int ck_digits_after(const char *name, const char *prefix);
/* Digits only, at least one, no more than 18: RET 1 and *v, or 0. */
int ck_all_digits(const char *s, int64_t *v);
/* "__R.metadata" (DCP saved without collectives): RET 0 and *rank, or -1. */
int ck_dcp_rank_meta(const char *name, int64_t *rank);
/* "__R_I.distcp": RET 0 and *rank, or -1. */
int ck_dcp_file_rank(const char *name, int64_t *rank);
/* A file only DCP writes: .metadata, __R.metadata, __R_I.distcp. */
int ck_dcp_name(const char *name);
/* RET 1 when an entry of directory path satisfies pred, else 0. */
int ck_dir_any(const char *path, int (*pred)(const char *name));

/* ---- the layout table (rows in the layout files, the table in scan.c) -------- */

/* What one entry of a checkpoint directory says about a layout. */
typedef enum {
  CK_SEEN_NO = 0,
  CK_SEEN_WEAK, /* the layout's when no layout is seen anywhere else
                 * (launch's empty step-N, being written) */
  CK_SEEN_YES,
  CK_SEEN_OWN   /* the layout's alone: other claims on the entry do not
                 * count (a Megatron torch_dist iter_N holds DCP files) */
} ck_seen_t;

/* An entry of the directory being detected: a regular file or a
 * directory (symlinks followed; anything else is not shown). */
typedef struct ck_entry_s {
  const char *dir;  /* the checkpoint directory */
  const char *name; /* the entry's name in it */
  const char *path; /* dir/name */
  int is_dir;
} ck_entry_t;

typedef struct ck_layout_s {
  ckpt_layout_t id;
  const char *name;    /* --layout NAME, ckpt_layout_name */
  const char *pointer; /* what names the latest step, for ck_latest_verdict
                        * (NULL: none) */
  ck_seen_t (*detect)(const ck_entry_t *e);
  /* Fill s with the layout's steps (unsorted). RET 0, or an error with err
   * set. */
  int (*scan)(const char *dir, const ckpt_scan_options_t *o, ckpt_scan_t *s,
              char *err, size_t errlen);
} ck_layout_t;

extern const ck_layout_t ck_layout_launch;    /* layout_launch.c */
extern const ck_layout_t ck_layout_megatron;  /* layout_peers.c */
extern const ck_layout_t ck_layout_deepspeed; /* layout_peers.c */
extern const ck_layout_t ck_layout_hf;        /* layout_peers.c */
extern const ck_layout_t ck_layout_dcp;       /* layout_peers.c */

/* ---- launch's layout (layout_launch.c) ------------------------------------------ */

typedef struct ck_log_s {
  ckpt_log_cb cb; /* NULL: stderr */
  void *data;
} ck_log_t;
void ck_log(const ck_log_t *l, int level, const char *fmt, ...) LU_PRINTF(3, 4);

/* Finalise step: manifest from the world_size records (indexed by rank),
 * `latest` moved forward to it, older steps pruned to keep. */
typedef struct ck_final_s {
  const char *dir;
  const char *job;
  int64_t step;
  int64_t round;
  int world_size;
  int keep; /* -1 all */
  const ck_record_t *recs;
} ck_final_t;
int ck_finalise(const ck_final_t *f, const ck_log_t *log, char *err,
                size_t errlen);

/* The store keys of a step's commit: ck_store_key (ck_store.h). */
/* Publish one rank's record once (compare-and-set) and count it. OUT
 * *count: ranks committed so far (after this one). */
int ck_store_commit(rdzv_client_t *c, int64_t round, int64_t step,
                    const ck_record_t *r, int64_t *count, int timeout_ms);
/* Fetch the world_size records of a step. OUT recs[world_size]. */
int ck_store_records(rdzv_client_t *c, int64_t round, int64_t step,
                     int world_size, ck_record_t *recs, int timeout_ms,
                     char *err, size_t errlen);

/* Read and check a step's manifest. RET 0, CKPT_EINCOMPLETE (none),
 * CKPT_EFORMAT. */
/* step-N of dir is launch's own: its manifest.json is launch's format, or
 * (partial) it holds rank-R.bin/.done files and nothing DCP writes.
 * RET 1 or 0. */
int ck_step_is_ours(const char *dir, int64_t step);
/* dir/latest: RET 0 absent, 1 launch's ("step-N\n", a regular file, the
 * step it names gone or launch's), -1 someone else's (a symlink,
 * DeepSpeed's tag, a step-N that is not launch's, unreadable). */
int ck_latest_owner(const char *dir);
int ck_read_manifest(const char *dir, int64_t step, ck_manifest_t *m,
                     char *why, size_t whylen);

/* ---- the other layouts (layout_peers.c) --------------------------------------- */

/* Pointer files of the peers, exposed for the fuzz targets:
 * Megatron's latest_checkpointed_iteration.txt ("N" or "release": *step 0,
 * *release 1), DeepSpeed's latest (a tag: a directory name), Hugging Face's
 * trainer_state.json (global_step), its *.index.json (the shard names,
 * malloc'd array of malloc'd names), Megatron's metadata.json
 * (sharded_backend into backend). RET 0 or CKPT_EFORMAT / RDZV_ENOMEM. */
int ck_megatron_tracker(const char *buf, size_t len, int64_t *step,
                        int *release);
int ck_deepspeed_latest(const char *buf, size_t len, char *tag, size_t n);
int ck_hf_trainer_state(const char *buf, size_t len, int64_t *global_step,
                        char *why, size_t whylen);
int ck_hf_index(const char *buf, size_t len, char ***names, size_t *n,
                char *why, size_t whylen);
void ck_free_names(char **names, size_t n);
int ck_megatron_metadata(const char *buf, size_t len, char *backend, size_t n);

#endif /* CK_INT_H */
