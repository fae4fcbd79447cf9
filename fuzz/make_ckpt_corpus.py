#!/usr/bin/env python3
"""make_ckpt_corpus.py - write the seed corpora of the checkpoint fuzz
targets (fuzz_ckpt_*.c) under fuzz/corpus/ckpt_*/ from the formats in
docs/checkpoints.md and the peers' files (pickles of every protocol,
torch.save-style zip archives, safetensors). Deterministic: running it
again rewrites the same files; inputs found by fuzzing live next to them
under hash names.

usage: fuzz/make_ckpt_corpus.py [OUT_DIR]   (default: fuzz/corpus)
"""
import argparse
import collections
import json
import os
import pickle
import struct
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "py"))
import ckptfix  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_corpus import mp  # noqa: E402

SHA = "ab" * 32


def manifest(world=2, **over):
    m = {"format": "launch-checkpoint", "version": 1, "job": "job", "step": 300,
         "generation": 1, "world_size": world, "replicated": False,
         "time": "2026-01-01T00:00:00.000Z", "time_ms": 1767225600000,
         "shards": [{"rank": r, "file": "rank-%d.bin" % r, "size": 1000 + r,
                     "sha256": SHA} for r in range(world)]}
    m.update(over)
    return json.dumps(m, indent=2).encode()


def manifests():
    yield "world1.json", manifest(1)
    yield "world4_replicated.json", manifest(4, replicated=True)
    yield "unicode_job.json", manifest(2, job="jöb \u2603 \"q\" \\ \ud83d\ude00")
    yield "escaped.json", manifest(1).replace(b"rank-0.bin", b"rank-0\\u002ebin")
    yield "bom.json", b"\xef\xbb\xbf" + manifest(1)
    yield "version2.json", manifest(1, version=2)
    yield "dup_rank.json", manifest(2).replace(b'"rank": 1', b'"rank": 0')
    yield "bad_sha.json", manifest(1).replace(SHA.encode(), b"XYZ")
    yield "cut.json", manifest(2)[:150]
    yield "deep.json", b"[" * 100 + b"]" * 100
    yield "numbers.json", b'{"format":"launch-checkpoint","version":1,"step":1e3,' \
                          b'"world_size":1.0,"shards":[]}'


def records():
    yield "minimal.json", b'{"size": 10}'
    yield "full.json", json.dumps({"rank": 3, "file": "rank-3.bin", "size": 123456789,
                                   "sha256": SHA, "time_ms": 1767225600123,
                                   "world_size": 8, "replicated": True}).encode()
    yield "python_json_dump.json", json.dumps({"size": 5, "sha256": SHA}, indent=4).encode()
    yield "other_file.json", b'{"file": "model.pt", "size": 0}'
    yield "dotdot.json", b'{"file": "..", "size": 1}'
    yield "slash.json", b'{"file": "a/b", "size": 1}'
    yield "negative.json", b'{"size": -5}'
    yield "huge.json", b'{"size": 99999999999999999999999}'
    yield "surrogates.json", b'{"file": "\\ud83d\\ude00.bin", "size": 1}'
    yield "lone_surrogate.json", b'{"file": "\\ud83d.bin", "size": 1}'
    yield "nul.json", b'{"file": "a\\u0000b", "size": 1}'


def views():
    yield "node_local.txt", b"300 8 0 0-3,6\n200 8 0 0-3\n"
    yield "shared.txt", b"300 8 0 *\n200 8 0 *\n100 8 1 *\n"
    yield "peer_layout.txt", b"1500 0 0 *\n500 0 0 *"
    yield "elastic.txt", b"40 16 1 0\n30 16 0 0-15\n"
    yield "empty.txt", b""
    yield "bad_range.txt", b"1 4 0 3-1\n"
    yield "leading_zero.txt", b"01 4 0 *\n"
    yield "huge_world.txt", b"1 1048576 0 0-1048575\n"


def resume_views():
    """VIEW and VERDICT maps as agents put them in the store
    (checkpoint/ck_store.h), packed the way msgpack-c packs."""
    def step(s, world, repl, ranks):
        return {"step": s, "world_size": world, "replicated": repl, "ranks": ranks}
    yield "two_steps", mp({"host": "h2", "first": 0, "nranks": 2,
                           "steps": [step(15, 4, 1, "*"), step(10, 4, 1, "0-1")]})
    yield "node_local", mp({"host": "node003", "first": 4, "nranks": 4,
                            "steps": [step(300, 8, 0, "0-3,6"), step(200, 8, 0, "4-7")]})
    yield "megatron", mp({"host": "m", "first": 0, "nranks": 8,
                          "steps": [step(50, 4, 2, "*")]})
    yield "empty", mp({"host": "h", "first": 0, "nranks": 1, "steps": []})
    yield "no_host", mp({"first": 0, "nranks": 1, "steps": []})
    yield "bad_range", mp({"host": "h", "first": 0, "nranks": 1,
                           "steps": [step(1, 4, 0, "3-1")]})
    yield "deep", mp({"host": "h", "steps": [{"step": 1, "ranks": [["*"]]}]})
    yield "verdict_ok", mp({"ok": True})
    yield "verdict_bad", mp({"ok": False, "problem": "rank-3.bin: SHA-256 differs"})
    yield "text_view", b"0 2 h2\n15 4 1 *\n"


# ---- pickles --------------------------------------------------------------------------

def dcp_metadata():
    return ckptfix.dcp_metadata({"__0_0.distcp": [100, 60], "__1_0.distcp": [80],
                                 "__2_0.distcp": [2 ** 33]})[0]


def pickles():
    ds = {"module": {"w": 1}, "dp_world_size": 4, "mp_world_size": 1,
          "global_steps": 100, "ds_version": "0.14.0", "neg": -7, "big": 2 ** 40,
          "flag": True, "none": None, "f": 1.5, "b": b"bytes", "t": (1, 2, 3),
          "s": {1, 2}, "fs": frozenset([3])}
    args = argparse.Namespace(tensor_model_parallel_size=2, pipeline_model_parallel_size=4,
                              use_distributed_optimizer=True)
    for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
        yield "deepspeed_p%d.pkl" % proto, pickle.dumps(ds, protocol=proto)
        yield "megatron_args_p%d.pkl" % proto, pickle.dumps({"args": args, "iteration": 7},
                                                           protocol=proto)
        yield "dcp_metadata_p%d.pkl" % proto, pickle.dumps(dcp_metadata(), protocol=proto)
    shared = ["same"] * 3
    yield "memo_reuse.pkl", pickle.dumps([shared, shared, {"k": shared}], protocol=4)
    yield "ordered.pkl", pickle.dumps(collections.OrderedDict(a=1, b=2), protocol=2)
    yield "cut.pkl", pickle.dumps(ds, protocol=4)[:60]
    yield "not_a_pickle.bin", b"\x80\x02\xff\xfe"
    # torch's legacy format: five pickles in a row.
    legacy = b"".join(pickle.dumps(x, protocol=2) for x in
                      (0x1950a86a20f9469cfc6c, 1001, {"little_endian": True},
                       {"dp_world_size": 2}, ["0"]))
    yield "torch_legacy_stream.pkl", legacy


# ---- torch.save archives and safetensors -------------------------------------------

def safetensors(cut=None):
    data = ckptfix.safetensors_bytes()
    return data if cut is None else data[:cut]


def torchfiles():
    z = ckptfix.torch_zip_bytes({"dp_world_size": 4, "mp_world_size": 1})
    yield "deepspeed_model_states.pt", z
    yield "megatron_model_optim_rng.pt", ckptfix.torch_zip_bytes(
        {"args": argparse.Namespace(tensor_model_parallel_size=2,
                                    pipeline_model_parallel_size=1),
         "iteration": 100}, name="model_optim_rng")
    yield "cut_half.pt", z[: len(z) // 2]
    yield "cut_end_record.pt", z[:-5]
    yield "comment.pt", z[:-2] + struct.pack("<H", 4) + b"abcd"
    yield "deflated.pt", ckptfix.torch_zip_bytes({"a": 1}, method=zipfile.ZIP_DEFLATED)
    yield "legacy.pt", b"".join(pickle.dumps(x, protocol=2) for x in
                                (0x1950a86a20f9469cfc6c, 1001, {}, {"x": 1}, []))
    yield "model.safetensors", safetensors()
    yield "cut.safetensors", safetensors(cut=60)
    yield "empty", b""


def pointers():
    yield "launch_latest", b"step-300\n"
    yield "megatron_tracker", b"300"
    yield "megatron_release", b"release\n"
    yield "deepspeed_latest", b"global_step20"
    yield "trainer_state.json", json.dumps({"global_step": 1500, "epoch": 3.0,
                                            "log_history": [{"loss": 1.5, "step": 10}],
                                            "best_metric": None}, indent=2).encode()
    yield "model.safetensors.index.json", json.dumps(
        {"metadata": {"total_size": 1 << 30},
         "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                        "b.weight": "model-00002-of-00002.safetensors",
                        "c.weight": "model-00001-of-00002.safetensors"}}).encode()
    yield "index_escape.json", b'{"weight_map": {"a": "../x.safetensors"}}'
    yield "megatron_metadata.json", b'{"sharded_backend": "torch_dist", ' \
                                    b'"sharded_backend_version": 1}'
    yield "spaces", b"  \n\t"


TARGETS = {"ckpt_manifest": manifests, "ckpt_record": records, "ckpt_view": views,
           "ckpt_pickle": pickles, "ckpt_torchfile": torchfiles, "ckpt_pointers": pointers,
           "resume_view": resume_views}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus")
    for target, gen in TARGETS.items():
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        for name, data in gen():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
