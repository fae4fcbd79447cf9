#!/usr/bin/env python3
"""`launch ckpt ls|verify` on checkpoint trees as Megatron-LM, DeepSpeed,
the Hugging Face Trainer, PyTorch DCP and launch itself write them: for
each, a complete step, a missing shard, an empty shard, a cut-short file and
a pointer naming a partial step, each with the verdict, the file it names,
the step a restart would take and the exit status. Then bad input.

The files are written with torch.save when PyTorch is importable (the real
zip format), else with a stand-in of the same layout; DCP's .metadata and
safetensors are written by tests/py/ckptfix.py."""
import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
import ckptfix  # noqa: E402
import launchtest  # noqa: E402

try:
    import torch
except Exception:  # pragma: no cover - environment dependent
    torch = None

LAUNCH = launchtest.launch_bin()
BUILD = os.environ.get("LAUNCH_BUILD_DIR", "build")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def expect(cond, msg):
    if not cond:
        fail(msg)


# ---- writers ------------------------------------------------------------------------

def torch_save(obj, path):
    """torch.save, or the same zip layout without torch."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if torch is not None:
        obj = dict(obj)
        obj["tensor"] = torch.arange(64, dtype=torch.float32)
        torch.save(obj, path)
        return
    write(path, ckptfix.torch_zip_bytes(obj))


def safetensors(path, ntensors=2):
    write(path, ckptfix.safetensors_bytes(ntensors))


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def cut(path, frac=0.5):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(int(size * frac))


def dcp(d, files=None, protocol=None):
    """A DCP checkpoint in d: files maps '__R_0.distcp' -> item lengths;
    .metadata pickled with `protocol` (Python's default: DCP's)."""
    md, sizes = ckptfix.dcp_metadata(files or {"__0_0.distcp": [100, 60],
                                               "__1_0.distcp": [80]})
    for name, size in sizes.items():
        write(os.path.join(d, name), b"\3" * size)
    write(os.path.join(d, ".metadata"), pickle.dumps(md, protocol=protocol))


# ---- running launch ckpt ------------------------------------------------------------

def run(*args, rc=None):
    p = subprocess.run([LAUNCH, "ckpt"] + list(args), capture_output=True, text=True,
                       timeout=120)
    if rc is not None and p.returncode != rc:
        fail("launch ckpt %s: exit %d, expected %d\nstdout:\n%s\nstderr:\n%s"
             % (" ".join(args), p.returncode, rc, p.stdout, p.stderr))
    return p


def verify(d, rc, *extra):
    p = run("verify", d, "--json", *extra, rc=rc)
    try:
        return json.loads(p.stdout), p.stderr
    except ValueError:
        fail("not JSON: " + p.stdout)


def step(rep, name):
    for s in rep["steps"]:
        if s["name"] == name:
            return s
    fail("no step %s in %s" % (name, json.dumps(rep, indent=1)))


def check_step(rep, name, state, problem=None):
    s = step(rep, name)
    expect(s["state"] == state, "%s is %s, expected %s (%s)" % (name, s["state"], state,
                                                             s["problem"]))
    if problem is not None:
        expect(s["problem"] and problem in s["problem"],
               "%s: problem %r lacks %r" % (name, s["problem"], problem))
    return s


def check_resume(rep, name):
    got = rep["resume"]["name"] if rep["resume"] else None
    expect(got == name, "resume is %s, expected %s" % (got, name))


# ---- Megatron-LM --------------------------------------------------------------------

def megatron_iter(root, it, tp=2, pp=2, distopt=True, skip=()):
    d = os.path.join(root, "iter_%07d" % it)
    args = argparse.Namespace(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                              use_distributed_optimizer=distopt, num_layers=4,
                              hidden_size=64)
    for t in range(tp):
        for p in range(pp):
            name = "mp_rank_%02d" % t if pp == 1 else "mp_rank_%02d_%03d" % (t, p)
            if name in skip:
                continue
            torch_save({"args": args, "iteration": it, "checkpoint_version": 3.0,
                        "model": {"layer": t * 10 + p}},
                       os.path.join(d, name, "model_optim_rng.pt"))
            if distopt:
                torch_save({"param_state": {"step": it}},
                           os.path.join(d, name, "distrib_optim.pt"))
    return d


def test_megatron(tmp):
    root = os.path.join(tmp, "megatron")
    megatron_iter(root, 300)
    write(os.path.join(root, "latest_checkpointed_iteration.txt"), "300")
    rep, _ = verify(root, 0)
    expect(rep["layout"] == "megatron", "layout %s" % rep["layout"])
    s = check_step(rep, "iter_0000300", "complete")
    expect(s["world_size"] == 4 and s["files"] == 8, "iter 300: %s" % s)
    check_resume(rep, "iter_0000300")
    expect(s["latest"], "iter 300 is latest")

    # The tracker names a step whose last pipeline stage never saved.
    megatron_iter(root, 400, skip=("mp_rank_01_001",))
    write(os.path.join(root, "latest_checkpointed_iteration.txt"), "400")
    rep, err = verify(root, 1)
    check_step(rep, "iter_0000400", "incomplete",
               "mp_rank_01_001/: missing (tensor 2 x pipeline 2 x expert 1 in mp_rank_00_000's args)")
    expect("latest_checkpointed_iteration.txt names iter_0000400, which is incomplete"
           in rep["latest"]["problem"], rep["latest"]["problem"])
    check_resume(rep, "iter_0000300")
    expect("iter_0000400 skipped" in err, err)

    # An empty distributed-optimizer shard; a model file cut short.
    d = megatron_iter(root, 500)
    write(os.path.join(d, "mp_rank_00_001", "distrib_optim.pt"), b"")
    d = megatron_iter(root, 600)
    cut(os.path.join(d, "mp_rank_01_000", "model_optim_rng.pt"))
    write(os.path.join(root, "latest_checkpointed_iteration.txt"), "")
    rep, _ = verify(root, 1)
    check_step(rep, "iter_0000500", "incomplete", "mp_rank_00_001/distrib_optim.pt: empty file")
    check_step(rep, "iter_0000600", "incomplete", "mp_rank_01_000/model_optim_rng.pt")
    expect("truncated" in step(rep, "iter_0000600")["problem"], "600 truncated")
    expect("does not hold an iteration number" in rep["latest"]["problem"],
           rep["latest"]["problem"])
    check_resume(rep, "iter_0000300")

    # The torch_dist format: metadata.json, common.pt and a DCP checkpoint.
    d = os.path.join(root, "iter_0000700")
    write(os.path.join(d, "metadata.json"), json.dumps({"sharded_backend": "torch_dist"}))
    torch_save({"args": None, "iteration": 700}, os.path.join(d, "common.pt"))
    dcp(d)
    write(os.path.join(root, "latest_checkpointed_iteration.txt"), "700\n")
    rep, _ = verify(root, 0)
    s = check_step(rep, "iter_0000700", "complete")
    expect(s["world_size"] == 2, "torch_dist world %s" % s)
    check_resume(rep, "iter_0000700")
    # Tensor parallel only (no pipeline rank in the names).
    root2 = os.path.join(tmp, "megatron-tp")
    megatron_iter(root2, 10, tp=4, pp=1, distopt=False, skip=("mp_rank_03",))
    rep, _ = verify(root2, 1)
    check_step(rep, "iter_0000010", "incomplete", "mp_rank_03/: missing (tensor 4 x pipeline 1")
    # release/ alone: complete, but no step number for the agent to resume.
    rel = os.path.join(tmp, "megatron-release")
    os.rename(megatron_iter(rel, 1, tp=1, pp=1, distopt=False), os.path.join(rel, "release"))
    write(os.path.join(rel, "latest_checkpointed_iteration.txt"), "release")
    p = run("ls", rel, rc=1)
    expect("release  complete" in p.stdout and
           "resume: none (release is complete but has no step number" in p.stdout, p.stdout)
    # Megatron writes iter_%07d: iter_20 is not its step 20.
    root3 = os.path.join(tmp, "megatron-names")
    megatron_iter(root3, 10, tp=1, pp=1, distopt=False)
    os.rename(megatron_iter(root3, 20, tp=1, pp=1, distopt=False),
              os.path.join(root3, "iter_20"))
    rep, _ = verify(root3, 0)
    expect([s["name"] for s in rep["steps"]] == ["iter_0000010"],
           "megatron names: %s" % [s["name"] for s in rep["steps"]])


# ---- DeepSpeed -------------------------------------------------------------------

def ds_step(root, n, dp=4, prefix="bf16_", skip=(), zero3=False):
    d = os.path.join(root, "global_step%d" % n)
    model = {"module": {"w": n}, "dp_world_size": dp, "mp_world_size": 1, "global_steps": n,
             "ds_version": "0.14.0"}
    if zero3:
        for r in range(dp):
            f = "zero_pp_rank_%d_mp_rank_00_model_states.pt" % r
            if f not in skip:
                torch_save(model, os.path.join(d, f))
    else:
        torch_save(model, os.path.join(d, "mp_rank_00_model_states.pt"))
    for r in range(dp):
        f = "%szero_pp_rank_%d_mp_rank_00_optim_states.pt" % (prefix, r)
        if f not in skip:
            torch_save({"optimizer_state_dict": {"zero_stage": 3 if zero3 else 2,
                                                 "partition_count": dp}},
                       os.path.join(d, f))
    return d


def test_deepspeed(tmp):
    root = os.path.join(tmp, "deepspeed")
    ds_step(root, 10)
    write(os.path.join(root, "latest"), "global_step10")
    rep, _ = verify(root, 0)
    expect(rep["layout"] == "deepspeed", rep["layout"])
    # No checksums in this layout: verify must not claim SHA-256.
    expect(rep["checked"] == "structure", "deepspeed checked: %s" % rep["checked"])
    out = run("verify", root).stdout
    expect("SHA-256" not in out and "records no checksums" in out, out)
    s = check_step(rep, "global_step10", "complete")
    expect(s["world_size"] == 4 and s["files"] == 5, "step 10: %s" % s)
    # The last ZeRO shard missing: only dp_world_size in the model states
    # says it should be there.
    ds_step(root, 20, skip=("bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt",))
    write(os.path.join(root, "latest"), "global_step20\n")
    rep, err = verify(root, 1)
    check_step(rep, "global_step20", "incomplete",
               "bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt: missing (dp_world_size 4 in "
               "mp_rank_00_model_states.pt)")
    expect("latest names global_step20, which is incomplete" in rep["latest"]["problem"],
           rep["latest"]["problem"])
    check_resume(rep, "global_step10")
    # An empty shard.
    d = ds_step(root, 30)
    write(os.path.join(d, "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"), b"")
    rep, _ = verify(root, 1)
    check_step(rep, "global_step30", "incomplete",
               "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt: empty file")
    check_resume(rep, "global_step10")
    # Killed after global_step15's last file, before latest moved: DeepSpeed's
    # load_checkpoint(dir) would go back to global_step10; launch resumes
    # global_step15 and says that the pointer lags.
    root2 = os.path.join(tmp, "deepspeed-lag")
    ds_step(root2, 10)
    write(os.path.join(root2, "latest"), "global_step10")
    ds_step(root2, 15)
    rep, _ = verify(root2, 1)
    check_step(rep, "global_step15", "complete")
    check_resume(rep, "global_step15")
    expect("latest names global_step10, older than the complete global_step15"
           in rep["latest"]["problem"], rep["latest"]["problem"])
    write(os.path.join(root2, "latest"), "global_step15")
    rep, _ = verify(root2, 0)
    expect(rep["latest"].get("problem") is None, json.dumps(rep["latest"]))
    # ZeRO-3: model states per rank too.
    root3 = os.path.join(tmp, "deepspeed-z3")
    ds_step(root3, 5, dp=2, prefix="", zero3=True)
    ds_step(root3, 6, dp=2, prefix="", zero3=True,
            skip=("zero_pp_rank_1_mp_rank_00_model_states.pt",))
    write(os.path.join(root3, "latest"), "global_step6")
    rep, _ = verify(root3, 1)
    check_step(rep, "global_step5", "complete")
    check_step(rep, "global_step6", "incomplete", "zero_pp_rank_1_mp_rank_00_model_states.pt: missing")
    check_resume(rep, "global_step5")
    # global_step05 is not how DeepSpeed spells step 5: not a step.
    root4 = os.path.join(tmp, "deepspeed-names")
    ds_step(root4, 4, dp=1)
    os.rename(ds_step(root4, 5, dp=1), os.path.join(root4, "global_step05"))
    rep, _ = verify(root4, 0)
    expect([s["name"] for s in rep["steps"]] == ["global_step4"],
           "deepspeed names: %s" % [s["name"] for s in rep["steps"]])


# ---- Hugging Face Trainer -------------------------------------------------------------

def hf_ckpt(root, n, world=2, sharded=False, skip=()):
    d = os.path.join(root, "checkpoint-%d" % n)
    write(os.path.join(d, "trainer_state.json"),
          json.dumps({"global_step": n, "epoch": 1.0, "log_history": [], "best_metric": None}))
    if sharded:
        shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        write(os.path.join(d, "model.safetensors.index.json"),
              json.dumps({"metadata": {"total_size": 64},
                          "weight_map": {"a.weight": shards[0], "b.weight": shards[1],
                                         "c.weight": shards[1]}}))
        for s in shards:
            if s not in skip:
                safetensors(os.path.join(d, s))
    else:
        safetensors(os.path.join(d, "model.safetensors"))
    for f, obj in (("optimizer.pt", {"state": {}, "param_groups": []}),
                   ("scheduler.pt", {"last_epoch": n}),
                   ("training_args.bin", {"lr": 1e-4})):
        if f not in skip:
            torch_save(obj, os.path.join(d, f))
    for r in range(world):
        f = "rng_state_%d.pth" % r
        if f not in skip:
            torch_save({"python": r, "cpu": n}, os.path.join(d, f))
    return d


def test_hf(tmp):
    root = os.path.join(tmp, "hf")
    hf_ckpt(root, 500)
    rep, _ = verify(root, 0)
    expect(rep["layout"] == "hf", rep["layout"])
    s = check_step(rep, "checkpoint-500", "complete")
    expect(s["world_size"] == 2, "hf world %s" % s)
    check_resume(rep, "checkpoint-500")
    # The Trainer would resume from the highest checkpoint-N: here its
    # second weight shard never made it.
    hf_ckpt(root, 1000, sharded=True, skip=("model-00002-of-00002.safetensors",))
    rep, err = verify(root, 1)
    check_step(rep, "checkpoint-1000", "incomplete", "model-00002-of-00002.safetensors: missing")
    expect("names checkpoint-1000, which is incomplete" in rep["latest"]["problem"],
           rep["latest"]["problem"])
    check_resume(rep, "checkpoint-500")
    expect("checkpoint-1000 skipped" in err, err)
    d = hf_ckpt(root, 1500)
    cut(os.path.join(d, "model.safetensors"), 0.9)
    d = hf_ckpt(root, 2000)
    write(os.path.join(d, "optimizer.pt"), b"")
    d = hf_ckpt(root, 2500)
    os.unlink(os.path.join(d, "trainer_state.json"))
    hf_ckpt(root, 3000, world=3, skip=("rng_state_1.pth",))
    d = hf_ckpt(root, 3500)
    os.unlink(os.path.join(d, "scheduler.pt"))
    d = hf_ckpt(root, 4000)
    write(os.path.join(d, "trainer_state.json"), json.dumps({"global_step": 3999}))
    rep, _ = verify(root, 1)
    check_step(rep, "checkpoint-1500", "incomplete", "model.safetensors:")
    expect("truncated" in step(rep, "checkpoint-1500")["problem"], "safetensors cut")
    check_step(rep, "checkpoint-2000", "incomplete", "optimizer.pt: empty file")
    check_step(rep, "checkpoint-2500", "incomplete", "trainer_state.json: missing")
    check_step(rep, "checkpoint-3000", "incomplete", "rng_state_1.pth: missing")
    check_step(rep, "checkpoint-3500", "incomplete", "scheduler.pt: missing")
    check_step(rep, "checkpoint-4000", "corrupt", "trainer_state.json says global_step 3999")
    check_resume(rep, "checkpoint-500")
    # checkpoint-010 is not how the Trainer spells step 10: a trainer told
    # to resume step 10 loads checkpoint-10, which has no weights.
    zeros = os.path.join(tmp, "hf-zeros")
    hf_ckpt(zeros, 5)
    os.rename(hf_ckpt(zeros, 10), os.path.join(zeros, "checkpoint-010"))
    d = hf_ckpt(zeros, 10)
    os.unlink(os.path.join(d, "model.safetensors"))
    rep, _ = verify(zeros, 1)
    expect(not any(s["name"] == "checkpoint-010" for s in rep["steps"]),
           "checkpoint-010 taken for a step: %s" % [s["name"] for s in rep["steps"]])
    check_step(rep, "checkpoint-10", "incomplete", "no model weights")
    check_resume(rep, "checkpoint-5")
    # rng_state_0.pth alone: the Trainer writes rng_state_K.pth only with
    # 2 or more processes, so rng_state_1.pth is missing.
    rng = os.path.join(tmp, "hf-rng")
    hf_ckpt(rng, 10, world=4)
    hf_ckpt(rng, 20, skip=("rng_state_1.pth",))
    rep, _ = verify(rng, 1)
    check_step(rep, "checkpoint-20", "incomplete", "rng_state_1.pth: missing (rng_state_0.pth")
    check_resume(rep, "checkpoint-10")
    # The last of 4 processes never wrote its rng state: checkpoint-10 says 4.
    hf_ckpt(rng, 30, world=4, skip=("rng_state_3.pth",))
    rep, _ = verify(rng, 1)
    check_step(rep, "checkpoint-30", "incomplete",
               "rng_state_3.pth: missing (checkpoint-10 before it has rng states of 4 processes)")
    check_resume(rep, "checkpoint-10")
    hf_ckpt(rng, 40, world=4)
    rep, _ = verify(rng, 0)
    check_resume(rep, "checkpoint-40")
    # One process: rng_state.pth, no rng_state_K.pth.
    one = os.path.join(tmp, "hf-one")
    d = hf_ckpt(one, 1, world=1)
    os.rename(os.path.join(d, "rng_state_0.pth"), os.path.join(d, "rng_state.pth"))
    rep, _ = verify(one, 0)
    check_step(rep, "checkpoint-1", "complete")


# ---- PyTorch DCP ------------------------------------------------------------------

def test_dcp(tmp):
    root = os.path.join(tmp, "dcp")
    dcp(os.path.join(root, "step-100"))
    dcp(os.path.join(root, "step-200"))
    cut(os.path.join(root, "step-200", "__1_0.distcp"))
    dcp(os.path.join(root, "step-300"))
    os.unlink(os.path.join(root, "step-300", ".metadata"))
    dcp(os.path.join(root, "step-400"))
    write(os.path.join(root, "step-400", "__0_0.distcp"), b"")
    rep, err = verify(root, 1)
    expect(rep["layout"] == "dcp", "step-N with .metadata is DCP: %s" % rep["layout"])
    s = check_step(rep, "step-100", "complete")
    expect(s["world_size"] == 2 and s["files"] == 3, "dcp files %s" % s)
    check_step(rep, "step-200", "incomplete",
               "__1_0.distcp: 40 bytes, .metadata places data up to byte 80 (truncated)")
    check_step(rep, "step-300", "incomplete", ".metadata: missing")
    check_step(rep, "step-400", "incomplete", "__0_0.distcp: 0 bytes")
    check_resume(rep, "step-100")
    # What launch before issue #22 made of a partial DCP step: its trailing
    # number is a time, not the newest step.
    dcp(os.path.join(root, "abandoned-step-500-1796182836408"))
    rep, _ = verify(root, 1)
    expect(not any(s["name"].startswith("abandoned-") for s in rep["steps"]),
           "abandoned-step-N-T taken for a DCP step: %s" % [s["name"] for s in rep["steps"]])
    check_resume(rep, "step-100")
    # step-0100 is not how launch spells step 100: not a step.
    zeros = os.path.join(tmp, "dcp-zeros")
    dcp(os.path.join(zeros, "step-1"))
    dcp(os.path.join(zeros, "step-0100"))
    rep, _ = verify(zeros, 0)
    expect([s["name"] for s in rep["steps"]] == ["step-1"],
           "dcp zero-padded: %s" % [s["name"] for s in rep["steps"]])
    # Saved without collectives: one __R.metadata per rank. In step-2 rank 1
    # wrote nothing yet: step-1 says 2 ranks saved, so step-2 is not
    # complete with 1 (the agent then refused a 2-rank job: "run with 1 ranks").
    per = os.path.join(tmp, "dcp-per-rank")
    for n, ranks in ((1, 2), (2, 1)):
        for r in range(ranks):
            d = os.path.join(per, "step-%d" % n)
            md, sizes = ckptfix.dcp_metadata({"__%d_0.distcp" % r: [50]})
            for name, size in sizes.items():
                write(os.path.join(d, name), b"\3" * size)
            write(os.path.join(d, "__%d.metadata" % r), pickle.dumps(md))
    rep, _ = verify(per, 1)
    s = check_step(rep, "step-1", "complete")
    expect(s["world_size"] == 2, "per-rank world %s" % s)
    check_step(rep, "step-2", "incomplete",
               "__1.metadata: missing (step-1 before it was saved by 2 ranks")
    check_resume(rep, "step-1")
    # DCP steps named checkpoint-N (as Hugging Face's are): DCP by content.
    hfname = os.path.join(tmp, "dcp-hf-names")
    dcp(os.path.join(hfname, "checkpoint-7"))
    rep, _ = verify(hfname, 0)
    expect(rep["layout"] == "dcp", "checkpoint-N with .metadata: %s" % rep["layout"])
    check_resume(rep, "checkpoint-7")
    # Every pickle protocol (Python 3.8-3.13 write 4, 3.14 writes 5).
    for proto in range(pickle.HIGHEST_PROTOCOL + 1):
        d = os.path.join(tmp, "dcp-proto", "p%d" % proto)
        dcp(d, {"__0_0.distcp": [7, 9], "__1_0.distcp": [11]}, protocol=proto)
        cut(os.path.join(d, "__0_0.distcp"), 15 / 16)
        rep, _ = verify(d, 1)
        check_step(rep, ".", "incomplete", "__0_0.distcp: 15 bytes, .metadata places data "
                   "up to byte 16 (truncated)")
    # A single checkpoint: the directory itself.
    one = os.path.join(tmp, "dcp-one")
    dcp(one, {"__0_0.distcp": [10], "__1_0.distcp": [20], "__2_0.distcp": [30]})
    # It has no step number: the agent never resumes it, so ls names none.
    rep, err = verify(one, 1)
    s = check_step(rep, ".", "complete")
    expect(s["world_size"] == 3, "dcp one %s" % s)
    expect(rep["resume"] is None, "dcp one resumed: %s" % rep["resume"])
    expect(". is complete but has no step number" in err, err)
    p = run("ls", one, rc=1)
    expect("resume: none (. is complete but has no step number: launch does not "
           "resume it" in p.stdout, p.stdout)
    os.unlink(os.path.join(one, "__2_0.distcp"))
    rep, _ = verify(one, 1)
    check_step(rep, ".", "incomplete", "__2_0.distcp: missing (named by .metadata)")
    expect(rep["resume"] is None, "nothing to resume from")


def birth_times(path):
    """Does the filesystem of path record files' creation times?"""
    p = subprocess.run(["stat", "-c", "%W", path], capture_output=True, text=True)
    return p.returncode == 0 and p.stdout.strip() not in ("0", "-", "")


def test_dcp_rewritten(tmp):
    """A data file modified after .metadata (a later save into the same
    directory, cut short before its .metadata): incomplete. Within 2 s
    (clocks of the writing nodes) and in a copy (files created after
    .metadata: cp -r without -p), complete."""
    root = os.path.join(tmp, "dcp-rewritten")
    for n in (1, 2, 3):
        dcp(os.path.join(root, "step-%d" % n))
    meta = os.stat(os.path.join(root, "step-1", ".metadata")).st_mtime
    os.utime(os.path.join(root, "step-1", "__1_0.distcp"), (meta + 1.5, meta + 1.5))
    meta = os.stat(os.path.join(root, "step-2", ".metadata")).st_mtime
    os.utime(os.path.join(root, "step-2", "__1_0.distcp"), (meta + 10, meta + 10))
    write(os.path.join(root, "step-3", ".metadata.tmp"), b"\x80")
    rep, err = verify(root, 1)
    check_step(rep, "step-1", "complete")
    check_step(rep, "step-2", "incomplete", "__1_0.distcp: modified 10.0 s after .metadata "
               "was written (a later save into this directory was cut short")
    check_step(rep, "step-3", "incomplete", ".metadata.tmp: there beside .metadata")
    check_resume(rep, "step-1")
    # A copy: .metadata first, the data files after (their mtimes later).
    copy = os.path.join(tmp, "dcp-copy", "step-5")
    src = os.path.join(root, "step-1")
    os.makedirs(copy)
    for name in (".metadata", "__0_0.distcp", "__1_0.distcp"):
        shutil.copyfile(os.path.join(src, name), os.path.join(copy, name))
    meta = os.stat(os.path.join(copy, ".metadata")).st_mtime
    for name in ("__0_0.distcp", "__1_0.distcp"):
        os.utime(os.path.join(copy, name), (meta + 30, meta + 30))
    if birth_times(copy):
        rep, _ = verify(os.path.dirname(copy), 0)
        check_step(rep, "step-5", "complete")
    else:
        print("note: no creation times on %s: a copy whose data files are newer than "
              "its .metadata is taken for a cut-short save there" % copy)


def test_hf_rewritten(tmp):
    """The Trainer writes trainer_state.json last: a file of checkpoint-N
    modified more than 2 s after it, and there before it, is a later save
    in place that was cut short (tests/test_ckpt_real.py's hf-resave does
    it with the real Trainer)."""
    root = os.path.join(tmp, "hf-rewritten")
    for n in (10, 20):
        d = hf_ckpt(root, n)
        state = os.path.join(d, "trainer_state.json")
        with open(state, "rb") as f:
            data = f.read()
        time.sleep(0.05)
        os.unlink(state)  # written again after the rest, as the Trainer does
        write(state, data)
    for n, late in ((10, 1.5), (20, 10)):
        state = os.stat(os.path.join(root, "checkpoint-%d" % n, "trainer_state.json")).st_mtime
        for f in ("optimizer.pt", "rng_state_1.pth"):  # torch.save: in place
            p = os.path.join(root, "checkpoint-%d" % n, f)
            os.utime(p, (state + late, state + late))
    rep, _ = verify(root, 1)
    check_step(rep, "checkpoint-10", "complete")
    check_step(rep, "checkpoint-20", "incomplete", "optimizer.pt: modified 10.0 s after "
               "trainer_state.json was written (a later save into this directory")
    check_resume(rep, "checkpoint-10")


# ---- launch's own layout ------------------------------------------------------------

def test_launch(tmp):
    d = os.path.join(tmp, "launch")
    writer = os.path.join(BUILD, "tests", "ckpt_writer")
    subprocess.run([writer, d, "--mode", "single", "--steps", "3", "--size", "50000"],
                   check=True, capture_output=True, timeout=60)
    rep, _ = verify(d, 0)
    expect(rep["layout"] == "launch" and rep["checked"] == "sha256", rep)
    check_resume(rep, "step-3")
    with open(os.path.join(d, "step-3", "rank-0.bin"), "r+b") as f:
        f.seek(1000)
        b = f.read(1)
        f.seek(1000)
        f.write(bytes([b[0] ^ 1]))
    rep, err = verify(d, 1)
    check_step(rep, "step-3", "corrupt", "rank-0.bin: SHA-256")
    check_resume(rep, "step-2")
    expect("step-3 skipped: rank-0.bin: SHA-256" in err, err)
    # ls checks sizes only: the flipped byte is not seen, the exit is 0.
    p = run("ls", d, rc=0)
    expect("step-3  complete" in p.stdout, p.stdout)
    write(os.path.join(d, "step-2", "manifest.json"), "{not json")
    rep, _ = verify(d, 1)
    check_step(rep, "step-2", "corrupt", "manifest.json does not parse")
    check_resume(rep, "step-1")
    # Node-local: this node holds rank 0 only, and asks for rank 1 too.
    rep, _ = verify(d, 1, "--ranks", "0-1")
    check_resume(rep, "step-1")


# ---- bad input ------------------------------------------------------------------------

def test_bad_input(tmp):
    p = run("verify", os.path.join(tmp, "nope"), rc=2)
    expect("no such directory" in p.stderr, p.stderr)
    p = run("ls", tmp, "--layout", "bogus", rc=2)
    expect("--layout: 'bogus' is not one of" in p.stderr, p.stderr)
    p = run("ls", rc=2)
    expect("expected ls|verify and a directory" in p.stderr, p.stderr)
    p = run("check", tmp, rc=2)
    expect("'check' is not ls or verify" in p.stderr, p.stderr)
    p = run("ls", tmp, "--ranks", "3-1", rc=2)
    expect("--ranks" in p.stderr, p.stderr)
    both = os.path.join(tmp, "both")
    os.makedirs(os.path.join(both, "global_step1"))
    os.makedirs(os.path.join(both, "checkpoint-1"))
    p = run("ls", both, rc=2)
    expect("several layouts (deepspeed, hf): pass --layout" in p.stderr, p.stderr)
    p = run("ls", both, "--layout", "hf", rc=1)
    expect("checkpoint-1  incomplete" in p.stdout, p.stdout)
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    p = run("ls", empty, rc=1)
    expect("no checkpoint step" in p.stderr and "resume: none" in p.stdout, p.stderr)
    p = run("--help", rc=0)
    expect("exit status" in p.stdout, p.stdout)


def main():
    if not os.path.exists(LAUNCH):
        launchtest.skip("no launch binary at " + LAUNCH)
    tmp = tempfile.mkdtemp(prefix="launch-ckpt-layouts-")
    try:
        test_megatron(tmp)
        test_deepspeed(tmp)
        test_hf(tmp)
        test_dcp(tmp)
        test_dcp_rewritten(tmp)
        test_hf_rewritten(tmp)
        test_launch(tmp)
        test_bad_input(tmp)
    finally:
        if not os.environ.get("LAUNCH_TEST_KEEP"):
            shutil.rmtree(tmp)
    print("ok (%s)" % ("torch.save" if torch is not None else "torch.save stand-in"))


if __name__ == "__main__":
    main()
