/* test_ckpt_format.c - the checkpoint module's decoders and its pure
 * functions: the manifest and the completion file (round trip, and every
 * damaged field named), `latest`, the pickle walker (memo, protocols 2
 * and 4, DCP storage records), torch.save zip archives (whole, truncated
 * at every length), safetensors headers, the agreement's text form, and
 * the resume-step agreement itself on shared and node-local storage. */
#include <stdlib.h>
#include <string.h>

#include "ck_int.h"
#include "test.h"

/* ---- records and manifests ------------------------------------------------------ */

static void test_record(void) {
  ck_record_t r, back;
  char *text, why[256];
  size_t len;
  memset(&r, 0, sizeof(r));
  r.rank = 3;
  strcpy(r.file, "rank-3.bin");
  r.size = 12345678901ull;
  memset(r.sha, 'a', 64);
  r.sha[64] = '\0';
  r.time = 1780000000.125;
  r.world_size = 8;
  r.replicated = 1;
  ASSERT_OK(ck_record_encode(&r, &text, &len));
  ASSERT_OK(ck_record_decode(text, len, 3, &back, why, sizeof(why)));
  free(text);
  ASSERT_EQ(3, back.rank);
  ASSERT_STR_EQ("rank-3.bin", back.file);
  ASSERT_EQ(12345678901ull, back.size);
  ASSERT_STR_EQ(r.sha, back.sha);
  ASSERT_EQ(8, back.world_size);
  ASSERT_EQ(1, back.replicated);
  ASSERT_EQ(1780000000125ll, (long long)(back.time * 1000 + 0.5));

  /* The minimal completion file a trainer in any language writes. */
  ASSERT_OK(ck_record_decode("{\"size\": 10}", 12, 5, &back, why, sizeof(why)));
  ASSERT_EQ(5, back.rank);
  ASSERT_STR_EQ("rank-5.bin", back.file);
  ASSERT_STR_EQ("", back.sha);

  /* Each bad field is named. */
  static const struct {
    const char *in;
    int hint;
    const char *says;
  } bad[] = {
      {"", 0, "unexpected end"},
      {"[]", 0, "not a JSON object"},
      {"{\"size\": -1}", 0, "\"size\""},
      {"{\"size\": 1.5}", 0, "\"size\""},
      {"{}", 0, "\"size\""},
      {"{\"size\": 1, \"rank\": 2}", 1, "the file is rank 1's"},
      {"{\"size\": 1}", -1, "\"rank\" is missing"},
      {"{\"size\": 1, \"sha256\": \"ABC\"}", 0, "\"sha256\""},
      {"{\"size\": 1, \"file\": \"../x\"}", 0, "\"file\""},
      {"{\"size\": 1, \"file\": \"a/b\"}", 0, "\"file\""},
      {"{\"size\": 1, \"replicated\": 1}", 0, "\"replicated\""},
      {"{\"size\": 1, \"world_size\": 0}", 0, "\"world_size\""},
      {"{\"size\": 1,}", 0, "member name"},
      {"{\"size\": 1} x", 0, "trailing"},
      {"{\"size\": 1, \"file\": \"a\\u0000b\"}", 0, "\\u0000"},
      {"{\"size\": 1, \"file\": \"\xff\"}", 0, "UTF-8"},
  };
  for (size_t i = 0; i < LU_ARRAY_SIZE(bad); i++) {
    why[0] = '\0';
    if (ck_record_decode(bad[i].in, strlen(bad[i].in), bad[i].hint, &back,
                         why, sizeof(why)) != CKPT_EFORMAT)
      TEST_FAIL("record '%s' accepted", bad[i].in);
    ASSERT_CONTAINS(why, bad[i].says);
  }
}

static void test_manifest(void) {
  ck_manifest_t m, back;
  ck_record_t shards[3];
  char *text, why[256];
  size_t len;
  memset(&m, 0, sizeof(m));
  memset(shards, 0, sizeof(shards));
  strcpy(m.job, "job-\"1\"");
  m.step = 300;
  m.generation = 2;
  m.world_size = 3;
  m.replicated = 0;
  m.time = 1780000000.5;
  m.shards = shards;
  for (int r = 0; r < 3; r++) {
    shards[r].rank = r;
    ck_shard_name(r, shards[r].file, sizeof(shards[r].file));
    shards[r].size = 100u + (unsigned)r;
    memset(shards[r].sha, '0' + r, 64);
  }
  ASSERT_OK(ck_manifest_encode(&m, &text, &len));
  ASSERT_CONTAINS(text, "\"format\": \"launch-checkpoint\"");
  ASSERT_OK(ck_manifest_decode(text, len, &back, why, sizeof(why)));
  ASSERT_STR_EQ("job-\"1\"", back.job);
  ASSERT_EQ(300, back.step);
  ASSERT_EQ(2, back.generation);
  ASSERT_EQ(3, back.world_size);
  for (int r = 0; r < 3; r++) {
    ASSERT_EQ(100 + r, back.shards[r].size);
    ASSERT_STR_EQ(shards[r].sha, back.shards[r].sha);
  }
  ck_manifest_free(&back);
  /* Damage each part the reader relies on. */
  static const struct {
    const char *from, *to, *says;
  } edits[] = {
      {"launch-checkpoint", "other", "\"format\""},
      {"\"version\": 1", "\"version\": 9", "newer than this launch"},
      {"\"step\": 300", "\"step\": -3", "\"step\""},
      {"\"world_size\": 3", "\"world_size\": 4", "\"shards\""},
      {"\"world_size\": 3", "\"world_size\": 0", "\"world_size\""},
      {"\"rank\": 2", "\"rank\": 1", "listed twice"},
      {"\"rank\": 2", "\"rank\": 7", "no \"rank\""},
      {"\"size\": 101", "\"size\": \"101\"", "\"size\""},
      {"\"replicated\": false", "\"replicated\": \"no\"", "\"replicated\""},
  };
  for (size_t i = 0; i < LU_ARRAY_SIZE(edits); i++) {
    char *e = malloc(len + 64), *at = strstr(text, edits[i].from);
    size_t pre;
    ASSERT(at != NULL);
    pre = (size_t)(at - text);
    memcpy(e, text, pre);
    strcpy(e + pre, edits[i].to);
    strcat(e, at + strlen(edits[i].from));
    why[0] = '\0';
    if (ck_manifest_decode(e, strlen(e), &back, why, sizeof(why)) !=
        CKPT_EFORMAT)
      TEST_FAIL("manifest with '%s' accepted", edits[i].to);
    ASSERT_CONTAINS(why, edits[i].says);
    free(e);
  }
  /* Every prefix of a valid manifest is refused, none crashes. */
  for (size_t k = 0; k < (size_t)(strrchr(text, '}') - text); k++)
    if (ck_manifest_decode(text, k, &back, why, sizeof(why)) == 0)
      TEST_FAIL("manifest cut at %zu of %zu accepted: %.*s", k, len, (int)(len - k), text + k);
  free(text);
}

static void test_latest(void) {
  int64_t s;
  ASSERT_OK(ck_latest_decode("step-300\n", 9, &s));
  ASSERT_EQ(300, s);
  ASSERT_OK(ck_latest_decode("step-0", 6, &s));
  ASSERT_EQ(0, s);
  ASSERT_EQ(CKPT_EFORMAT, ck_latest_decode("", 0, &s));
  ASSERT_EQ(CKPT_EFORMAT, ck_latest_decode("step-", 5, &s));
  ASSERT_EQ(CKPT_EFORMAT, ck_latest_decode("step-007", 8, &s));
  ASSERT_EQ(CKPT_EFORMAT, ck_latest_decode("step-1x", 7, &s));
  ASSERT_EQ(CKPT_EFORMAT, ck_latest_decode("global_step3", 12, &s));
  ASSERT_EQ(CKPT_EFORMAT, ck_latest_decode("step-1\0", 7, &s));
}

/* ---- pickles -------------------------------------------------------------------- */

/* (Literals are split where a hex escape would swallow the next letter.)
 * Protocol 2, as torch.save writes: a dict with BINPUT after each key. */
static const unsigned char pk2[] =
    "\x80\x02}q\x00(X\x01\x00\x00\x00wq\x01ctorch._utils\n_rebuild\nq\x02"
    "K\x07X\x0d\x00\x00\x00" "dp_world_sizeq\x03K\x04"
    "X\x0d\x00\x00\x00mp_world_sizeq\x04M\x00\x01"
    "X\x03\x00\x00\x00" "bigq\x05\x8a\x05\x00\x00\x00\x00\x01"
    "X\x03\x00\x00\x00negq\x06J\xff\xff\xff\xff"
    "X\x04\x00\x00\x00" "flagq\x07\x88u.";

/* Protocol 4 as pickle.dump writes DCP's .metadata: FRAME, MEMOIZE, keys
 * fetched back from the memo for the second record. */
static const unsigned char pk4[] =
    "\x80\x04\x95\x50\x00\x00\x00\x00\x00\x00\x00"
    "]\x94("
    "}\x94(\x8c\x0drelative_path\x94\x8c\x0c__0_0.distcp\x94"
    "\x8c\x06offset\x94K\x00\x8c\x06length\x94K\x10u"
    "}\x94(h\x02h\x03h\x04K\x10h\x05M\x00\x02u"
    "}\x94(h\x02\x8c\x0c__1_0.distcp\x94h\x04K\x00h\x05K\x08u"
    "e.";

/* The atoms a walk reports, the last 8. */
typedef struct pk_seen_s {
  pk_atom_t a[8];
  int n;
} pk_seen_t;

static int pk_seen(void *ud, const pk_atom_t *a) {
  pk_seen_t *s = ud;
  s->a[s->n++ % 8] = *a;
  return 0;
}

/* A memo index no real pickle of this length can have (LONG_BINPUT
 * 4,194,303 in 20 bytes) is not tracked: its memory would be 128 MiB. A
 * small one is, and a GET gives the constant back. */
static void test_pickle_memo_bound(void) {
  static const unsigned char far[] =
      "\x80\x02X\x01\x00\x00\x00" "ar\xff\xff\x3f\x00" "0j\xff\xff\x3f\x00.";
  static const unsigned char near[] =
      "\x80\x02X\x01\x00\x00\x00" "ar\x01\x00\x00\x00" "0j\x01\x00\x00\x00.";
  pk_seen_t s;
  memset(&s, 0, sizeof(s));
  ASSERT_OK(pk_walk(far, sizeof(far) - 1, NULL, pk_seen, &s));
  ASSERT_EQ(2, s.n);
  ASSERT_EQ(PK_STR, s.a[0].kind);
  ASSERT_EQ(PK_OTHER, s.a[1].kind);
  memset(&s, 0, sizeof(s));
  ASSERT_OK(pk_walk(near, sizeof(near) - 1, NULL, pk_seen, &s));
  ASSERT_EQ(2, s.n);
  ASSERT_EQ(PK_STR, s.a[1].kind);
  ASSERT_MEM_EQ("a", s.a[1].s, 1);
}

static void test_pickle(void) {
  pk_keyint_t keys[5] = {{"dp_world_size", 0, 0},
                         {"mp_world_size", 0, 0},
                         {"big", 0, 0},
                         {"neg", 0, 0},
                         {"flag", 0, 0}};
  pk_storage_t *recs;
  size_t n, used;
  ASSERT_OK(pk_find_ints(pk2, sizeof(pk2) - 1, keys, 5));
  ASSERT(keys[0].found && keys[0].value == 4);
  ASSERT(keys[1].found && keys[1].value == 256);
  ASSERT(keys[2].found && keys[2].value == 4294967296ll);
  ASSERT(keys[3].found && keys[3].value == -1);
  ASSERT(keys[4].found && keys[4].value == 1);
  ASSERT_OK(pk_walk(pk2, sizeof(pk2) - 1, &used, NULL, NULL));
  ASSERT_EQ(sizeof(pk2) - 1, used);
  /* Truncated anywhere: an error, never a crash. */
  for (size_t k = 0; k < sizeof(pk2) - 1; k++)
    ASSERT_EQ(CKPT_EFORMAT, pk_walk(pk2, k, NULL, NULL, NULL));
  ASSERT_EQ(CKPT_EFORMAT, pk_walk((const unsigned char *)"\x80\x02\xff.", 4,
                                  NULL, NULL, NULL));

  ASSERT_OK(pk_dcp_storage(pk4, sizeof(pk4) - 1, &recs, &n));
  ASSERT_EQ(3, n);
  ASSERT_EQ(12, recs[0].plen);
  ASSERT_MEM_EQ("__0_0.distcp", recs[0].path, 12);
  ASSERT_EQ(0, recs[0].offset);
  ASSERT_EQ(16, recs[0].length);
  ASSERT_MEM_EQ("__0_0.distcp", recs[1].path, 12); /* from the memo */
  ASSERT_EQ(16, recs[1].offset);
  ASSERT_EQ(512, recs[1].length);
  ASSERT_MEM_EQ("__1_0.distcp", recs[2].path, 12);
  ASSERT_EQ(8, recs[2].length);
  free(recs);
  for (size_t k = 0; k < sizeof(pk4) - 1; k++) {
    if (pk_dcp_storage(pk4, k, &recs, &n) == 0)
      TEST_FAIL("a pickle cut at %zu parsed", k);
  }
}

/* ---- torch.save zips and safetensors --------------------------------------------- */

static size_t put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (unsigned char)(v >> (8 * i));
  return (size_t)n;
}

/* A stored zip of one entry "archive/data.pkl" holding pk2 plus one data
 * entry, the way torch.save lays it out. RET its length. */
static size_t make_zip(unsigned char *z) {
  const char *names[2] = {"archive/data.pkl", "archive/data/0"};
  const unsigned char *data[2] = {pk2, (const unsigned char *)"0123456789"};
  size_t lens[2] = {sizeof(pk2) - 1, 10}, offs[2], p = 0, cd;
  for (int i = 0; i < 2; i++) {
    size_t nl = strlen(names[i]);
    offs[i] = p;
    p += put_le(z + p, 0x04034b50, 4);
    p += put_le(z + p, 20, 2);
    p += put_le(z + p, 0x808, 2); /* data descriptor + UTF-8, as torch */
    p += put_le(z + p, 0, 2);
    p += put_le(z + p, 0, 4);
    p += put_le(z + p, 0, 4); /* crc */
    p += put_le(z + p, 0, 4); /* sizes 0 in the local header, as torch */
    p += put_le(z + p, 0, 4);
    p += put_le(z + p, nl, 2);
    p += put_le(z + p, 0, 2);
    memcpy(z + p, names[i], nl);
    p += nl;
    memcpy(z + p, data[i], lens[i]);
    p += lens[i];
  }
  cd = p;
  for (int i = 0; i < 2; i++) {
    size_t nl = strlen(names[i]);
    p += put_le(z + p, 0x02014b50, 4);
    p += put_le(z + p, 20, 2);
    p += put_le(z + p, 20, 2);
    p += put_le(z + p, 0x808, 2);
    p += put_le(z + p, 0, 2);
    p += put_le(z + p, 0, 4);
    p += put_le(z + p, 0, 4);
    p += put_le(z + p, lens[i], 4);
    p += put_le(z + p, lens[i], 4);
    p += put_le(z + p, nl, 2);
    p += put_le(z + p, 0, 2);
    p += put_le(z + p, 0, 2);
    p += put_le(z + p, 0, 2);
    p += put_le(z + p, 0, 2);
    p += put_le(z + p, 0, 4);
    p += put_le(z + p, offs[i], 4);
    memcpy(z + p, names[i], nl);
    p += nl;
  }
  p += put_le(z + p, 0x06054b50, 4);
  p += put_le(z + p, 0, 4);
  p += put_le(z + p, 2, 2);
  p += put_le(z + p, 2, 2);
  p += put_le(z + p, p - 12 - cd, 4);
  p += put_le(z + p, cd, 4);
  p += put_le(z + p, 0, 2);
  return p;
}

static void test_torchfile(void) {
  unsigned char z[1024], *pkl;
  size_t zl = make_zip(z), plen;
  ck_src_t src;
  ck_mem_t mem;
  char why[256];
  pk_keyint_t k = {"dp_world_size", 0, 0};
  ck_src_mem(&src, &mem, z, zl);
  ASSERT_OK(ck_torch_check(&src, &pkl, &plen, why, sizeof(why)));
  ASSERT(pkl != NULL);
  ASSERT_EQ(sizeof(pk2) - 1, plen);
  ASSERT_OK(pk_find_ints(pkl, plen, &k, 1));
  ASSERT_EQ(4, k.value);
  free(pkl);
  /* Cut short anywhere: incomplete (or, when the cut leaves a valid-looking
   * end record inside a name, a format error), never accepted. */
  for (size_t cut = 0; cut < zl; cut++) {
    int rc;
    ck_src_mem(&src, &mem, z, cut);
    why[0] = '\0';
    rc = ck_torch_check(&src, NULL, NULL, why, sizeof(why));
    if (rc == 0)
      TEST_FAIL("zip cut at %zu of %zu accepted", cut, zl);
    if (cut > 22 && rc == CKPT_EINCOMPLETE)
      ASSERT(why[0] != '\0');
  }
  ck_src_mem(&src, &mem, z, zl - 1);
  ASSERT_EQ(CKPT_EINCOMPLETE, ck_torch_check(&src, NULL, NULL, why,
                                             sizeof(why)));
  ASSERT_CONTAINS(why, "truncated");
  ck_src_mem(&src, &mem, "hello world", 11);
  ASSERT_EQ(CKPT_EFORMAT, ck_torch_check(&src, NULL, NULL, why, sizeof(why)));
  ck_src_mem(&src, &mem, "", 0);
  ASSERT_EQ(CKPT_EINCOMPLETE,
            ck_torch_check(&src, NULL, NULL, why, sizeof(why)));
  ASSERT_CONTAINS(why, "empty");

  /* safetensors: header length, JSON header, data. */
  {
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":"
                      "\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    unsigned char st[256];
    size_t hl = strlen(hdr), n = 0;
    n += put_le(st, hl, 8);
    memcpy(st + n, hdr, hl);
    n += hl;
    memset(st + n, 7, 16);
    n += 16;
    ck_src_mem(&src, &mem, st, n);
    ASSERT_OK(ck_safetensors_check(&src, why, sizeof(why)));
    ck_src_mem(&src, &mem, st, n - 1);
    ASSERT_EQ(CKPT_EINCOMPLETE, ck_safetensors_check(&src, why, sizeof(why)));
    ASSERT_CONTAINS(why, "truncated");
    ck_src_mem(&src, &mem, st, 8 + hl - 3);
    ASSERT_EQ(CKPT_EINCOMPLETE, ck_safetensors_check(&src, why, sizeof(why)));
    put_le(st, 1ull << 40, 8);
    ck_src_mem(&src, &mem, st, n);
    ASSERT_EQ(CKPT_EFORMAT, ck_safetensors_check(&src, why, sizeof(why)));
    ASSERT_CONTAINS(why, "not plausible");
  }
}

/* ---- the agreement ----------------------------------------------------------------- */

static unsigned char *bits(int world, const char *ranks) {
  ckpt_have_t *h;
  size_t n;
  char line[256];
  unsigned char *b;
  snprintf(line, sizeof(line), "1 %d 0 %s\n", world, ranks);
  ASSERT_OK(ckpt_view_decode(line, strlen(line), &h, &n));
  ASSERT_EQ(1, n);
  b = (unsigned char *)h[0].ranks;
  h[0].ranks = NULL;
  ckpt_view_free(h, n);
  return b;
}

static void test_agree(void) {
  ckpt_agreement_t a;
  /* Shared storage: every node sees the same complete steps. */
  ckpt_have_t shared[2] = {{300, 8, 0, NULL}, {200, 8, 0, NULL}};
  ckpt_node_view_t nodes[2] = {{"a", shared, 2, 0, 4}, {"b", shared, 2, 4, 4}};
  ASSERT_OK(ckpt_agree(nodes, 2, 8, &a));
  ASSERT_EQ(300, a.step);
  ASSERT_EQ(0, a.elastic);

  /* Node-local: node a finished step 300, node b only 200 (its 300 lacks
   * rank 6's shard). The agreed step is the newest every rank has. */
  {
    unsigned char *a_lo = bits(8, "0-3"), *b_hi = bits(8, "4-5,7"),
                  *b_lo = bits(8, "4-7");
    ckpt_have_t va[2] = {{300, 8, 0, a_lo}, {200, 8, 0, a_lo}};
    ckpt_have_t vb[2] = {{300, 8, 0, b_hi}, {200, 8, 0, b_lo}};
    ckpt_node_view_t nl[2] = {{"a", va, 2, 0, 4}, {"b", vb, 2, 4, 4}};
    ASSERT_OK(ckpt_agree(nl, 2, 8, &a));
    ASSERT_EQ(200, a.step);
    ASSERT_CONTAINS(a.why, "step 300: b runs rank 6 but lacks its shard");
    /* The same views, but the nodes swap places in the new round: nobody
     * holds what they need. */
    nl[0].first_rank = 4;
    nl[1].first_rank = 0;
    ASSERT_OK(ckpt_agree(nl, 2, 8, &a));
    ASSERT_EQ(-1, a.step);
    /* A node with nothing. */
    nl[0].first_rank = 0;
    nl[1].first_rank = 4;
    nl[1].nsteps = 0;
    ASSERT_OK(ckpt_agree(nl, 2, 8, &a));
    ASSERT_EQ(-1, a.step);
    ASSERT_CONTAINS(a.why, "b has none of it");
    free(a_lo);
    free(b_hi);
    free(b_lo);
  }

  /* Elastic: 8 ranks wrote step 300; the job now has 4. */
  {
    ckpt_have_t h[1] = {{300, 8, 0, NULL}};
    ckpt_node_view_t one[1] = {{"a", h, 1, 0, 4}};
    ASSERT_EQ(CKPT_EWORLD, ckpt_agree(one, 1, 4, &a));
    ASSERT_EQ(-1, a.step);
    ASSERT_CONTAINS(a.why, "written by 8 ranks and this job has 4");
    h[0].replicated = 1;
    ASSERT_OK(ckpt_agree(one, 1, 4, &a));
    ASSERT_EQ(300, a.step);
    ASSERT_EQ(1, a.elastic);
  }
  /* Bad input. */
  {
    ckpt_node_view_t bad[1] = {{"a", NULL, 0, 6, 4}};
    ASSERT_EQ(RDZV_EINVAL, ckpt_agree(bad, 1, 8, &a));
    ASSERT_EQ(RDZV_EINVAL, ckpt_agree(NULL, 0, 0, &a));
    /* a bad node after a good one with steps: refused, nothing kept
     * (LeakSanitizer checks the candidates are not left behind) */
    ckpt_have_t h[1] = {{300, 8, 0, NULL}};
    ckpt_node_view_t two[2] = {{"a", h, 1, 0, 4}, {"b", NULL, 0, 6, 4}};
    ASSERT_EQ(RDZV_EINVAL, ckpt_agree(two, 2, 8, &a));
    ASSERT_EQ(-1, a.step);
  }

  /* Megatron's grid of 4 (tensor x pipeline): any multiple of 4 ranks
   * loads it, as it is (not elastic); 6 ranks cannot. */
  {
    ckpt_have_t h[1] = {{100, 4, CKPT_REPL_MULTIPLE, NULL}};
    ckpt_node_view_t one[1] = {{"a", h, 1, 0, 8}};
    ASSERT_OK(ckpt_agree(one, 1, 8, &a));
    ASSERT_EQ(100, a.step);
    ASSERT_EQ(0, a.elastic);
    one[0].nranks = 4;
    ASSERT_OK(ckpt_agree(one, 1, 4, &a));
    ASSERT_EQ(100, a.step);
    one[0].nranks = 6;
    ASSERT_EQ(CKPT_EWORLD, ckpt_agree(one, 1, 6, &a));
    ASSERT_EQ(-1, a.step);
    ASSERT_CONTAINS(a.why, "grid of 4 ranks");
    ASSERT_CONTAINS(a.why, "not a multiple of 4");
  }
}

static void test_view_text(void) {
  static const char *bad[] = {"1 2 0\n", "1 2 3 *\n", "1 2 0 2\n",
                              "1 2 0 1-0\n", "x 2 0 *\n", "1  2 0 *\n",
                              "01 2 0 *\n", "1 2 0 0,\n", "1 2000000 0 0\n",
                              "1 0 0 0\n"};
  ckpt_have_t *h;
  size_t n;
  const char *ok = "300 8 0 0-3,6\n200 8 1 *\n100 0 0 *\n50 4 2 *";
  ASSERT_OK(ckpt_view_decode(ok, strlen(ok), &h, &n));
  ASSERT_EQ(4, n);
  ASSERT_EQ(CKPT_REPL_MULTIPLE, h[3].replicated);
  ASSERT_EQ(300, h[0].step);
  ASSERT_EQ(0x4f, h[0].ranks[0]);
  ASSERT(h[1].ranks == NULL && h[1].replicated == 1);
  ASSERT_EQ(0, h[2].world_size);
  ckpt_view_free(h, n);
  for (size_t i = 0; i < LU_ARRAY_SIZE(bad); i++)
    if (ckpt_view_decode(bad[i], strlen(bad[i]), &h, &n) != CKPT_EFORMAT)
      TEST_FAIL("view '%s' accepted", bad[i]);
  ASSERT_OK(ckpt_view_decode("", 0, &h, &n));
  ASSERT_EQ(0, n);
}

int main(void) {
  int fds = test_fd_count();
  test_record();
  test_manifest();
  test_latest();
  test_pickle();
  test_pickle_memo_bound();
  test_torchfile();
  test_agree();
  test_view_text();
  ASSERT_EQ(fds, test_fd_count());
  printf("ok\n");
  return 0;
}
