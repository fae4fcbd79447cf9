"""Pieces of other trainers' checkpoint files, written without their
libraries: DCP's .metadata classes (as pickle sees them: launch's reader
never imports anything, so the module names do not matter), safetensors
files, torch.save-style zip archives, and a final step of launch's own
layout. Shared by tests/test_ckpt_layouts.py, tests/test_ckpt_resume.py,
fuzz/make_ckpt_corpus.py and bench/run_agree_bench.py."""
import dataclasses
import hashlib
import io
import json
import os
import pickle
import struct
import zipfile


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: object = None
    index: object = None


@dataclasses.dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int


@dataclasses.dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: object = None
    storage_data: object = None


def dcp_metadata(files):
    """A Metadata whose storage records place items of the given lengths
    one after the other: files maps '__R_0.distcp' -> [length, ...]. RET
    (metadata, {name: file size})."""
    storage, sizes = {}, {}
    for name, lengths in files.items():
        off = 0
        for k, n in enumerate(lengths):
            storage[MetadataIndex("%s.item%d" % (name, k), None, k)] = _StorageInfo(name, off, n)
            off += n
        sizes[name] = off
    return Metadata({"model.w": {"size": [10]}}, None, storage), sizes


def safetensors_bytes(ntensors=2):
    hdr = {"__metadata__": {"format": "pt"}}
    for i in range(ntensors):
        hdr["w%d" % i] = {"dtype": "F32", "shape": [4], "data_offsets": [16 * i, 16 * i + 16]}
    h = json.dumps(hdr).encode()
    return struct.pack("<Q", len(h)) + h + b"\2" * (16 * ntensors)


def torch_zip_bytes(obj, name="archive", method=zipfile.ZIP_STORED):
    """torch.save's zip layout (data.pkl, byteorder, data/0, version), with
    fixed dates so that the bytes are the same on every run."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for entry, data in ((name + "/data.pkl", pickle.dumps(obj, protocol=2)),
                            (name + "/byteorder", b"little"),
                            (name + "/data/0", b"\1" * 64),
                            (name + "/version", b"3\n")):
            info = zipfile.ZipInfo(entry, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = method
            z.writestr(info, data)
    return buf.getvalue()


def launch_step(ck, step, world, replicated, job="x"):
    """A final step of launch's layout written as the manifest spec says
    (docs/checkpoints.md): one small shard per rank, `latest` naming it."""
    sd = os.path.join(ck, "step-%d" % step)
    os.makedirs(sd)
    shards = []
    for r in range(world):
        data = b"state of rank %d" % r
        with open(os.path.join(sd, "rank-%d.bin" % r), "wb") as f:
            f.write(data)
        shards.append({"rank": r, "file": "rank-%d.bin" % r, "size": len(data),
                       "sha256": hashlib.sha256(data).hexdigest()})
    m = {"format": "launch-checkpoint", "version": 1, "job": job, "step": step,
         "generation": 0, "world_size": world, "replicated": replicated,
         "time": "2026-12-01T00:00:00.000Z", "time_ms": 1796083200000,
         "shards": shards}
    with open(os.path.join(sd, "manifest.json"), "w") as f:
        json.dump(m, f)
    with open(os.path.join(ck, "latest"), "w") as f:
        f.write("step-%d\n" % step)
