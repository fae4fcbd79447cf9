#!/usr/bin/env python3
"""Kill-and-resume with the real trainers' libraries under launch's default
checkpoint flags (issue #22): current PyTorch from PyPI (scripts/venv.sh),
2 gloo ranks on the CPU, checkpoints written by the library itself
(tests/py/real_ckpt.py):

  dcp-ddp     DCP + DDP, step-N/, rank 0 killed inside the save of step 8
              (data files written, .metadata not); dcp-ddp-after: rank 1
              killed at step 7
  dcp-fsdp2   DCP + FSDP2, checkpoint-N/, rank 1 killed at step 7;
              dcp-fsdp2-save: rank 0 killed inside the save of step 8
  deepspeed   ZeRO-2 (CPU accelerator), rank 1 killed at step 7; resumes
              with engine.load_checkpoint(dir), which must land on the step
              launch agreed; then (deepspeed-save) rank 1 killed inside the
              save of step 8, after rank 0 wrote `latest`: launch warns that
              latest names a partial step, the trainer loads the agreed step
              by its tag
  hf          Hugging Face Trainer, rank 0 killed inside the save of step 8
              (model and optimizer written, RNG states and
              trainer_state.json not); hf-after: rank 1 killed at step 7
  megatron    megatron-core dist_checkpointing, torch_dist, in Megatron-LM's
              iter_NNNNNNN/ layout with its tracker, rank 1 killed at step
              7; megatron-save: rank 0 (DCP's coordinator) killed inside the
              save of step 8 (common.pt and every rank's .distcp written,
              .metadata and metadata.json not)

  hf-resave   a Trainer run started over (FRESH) in the directory of a
              finished one, killed inside its save of step 4 (model and
              optimizer rewritten in place, RNG states and
              trainer_state.json the first run's): `launch ckpt verify`
              calls checkpoint-4 incomplete (a file modified after
              trainer_state.json); run again to the end, every
              checkpoint-N saved in place is complete

Every library is killed once after a complete step and once inside a save;
the two cases of a library share one uninterrupted reference run. And
DCP's save(use_collectives=False) (one __R.metadata per rank), which DCP
loads back and `launch ckpt verify` must call complete, world size 2.

For each: `launch --ckpt-dir D` (layout detected) restarts the job; the
workers of the new round get LAUNCH_RESUME_STEP=6; the checkpoint tree the
new round finds is byte for byte the one the kill left (hashed by the
killed rank just before it died, and by rank 0 at the next start); the
final parameters equal an uninterrupted run's bit for bit.

megatron-core 0.16 assumes CUDA in a synchronous torch_dist save
(torch.cuda.synchronize() in FileSystemWriterAsync.preload_tensors, a
flag tensor on torch.cuda.current_device() in
save_state_dict_async_finalize): the worker, without CUDA, makes the
first a no-op and the second the CPU, in its own process only. The
tracker latest_checkpointed_iteration.txt is Megatron-LM's training
loop's, not megatron-core's: the worker writes it as that loop does, after
every rank finished a save.

The runs use the default store (--torch-store agent): every round's TCPStore clients
get a namespace of their own (docs/protocol.md#tcpstore-namespaces).

The venv is scripts/venv.sh's (LAUNCH_VENV when set; built on the first
run). Skips (77) when it cannot be built (no PyPI). Set LAUNCH_REAL_ONLY to
a comma list of case names (CASES) to run some only."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "py"))
import launchtest as lt  # noqa: E402

ROOT = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "py", "real_ckpt.py")
STEPS, EVERY = 10, 2
# case -> (MODE, KILL, the step the restart must resume from, a line of
# launch's output it needs)
CASES = {
    "dcp-ddp": ("dcp-ddp", "save:8:0", 6, None),
    "dcp-ddp-after": ("dcp-ddp", "after:7:1", 6, None),
    "dcp-fsdp2": ("dcp-fsdp2", "after:7:1", 6, None),
    "dcp-fsdp2-save": ("dcp-fsdp2", "save:8:0", 6, None),
    "deepspeed": ("deepspeed", "after:7:1", 6, None),
    # Rank 1 dies inside the save of step 8 after rank 0 wrote its files
    # and `latest`: latest names a partial step, launch says so, the
    # trainer loads the agreed one by its tag.
    "deepspeed-save": ("deepspeed", "save:8:1", 6,
                       "latest names global_step8, which is incomplete"),
    "hf": ("hf", "save:8:0", 6, None),
    "hf-after": ("hf", "after:7:1", 6, None),
    "megatron": ("megatron", "after:7:1", 6, None),
    "megatron-save": ("megatron", "save:8:0", 6, None),
}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def venv_python():
    try:
        p = subprocess.run(["bash", os.path.join(ROOT, "scripts", "venv.sh")],
                           capture_output=True, text=True, timeout=3000)
    except subprocess.TimeoutExpired:
        lt.skip("scripts/venv.sh did not finish in 50 minutes")
    if p.returncode != 0:
        lt.skip("no venv with current PyTorch (scripts/venv.sh: %s)" % p.stderr.strip()[-300:])
    return os.path.join(p.stdout.strip().splitlines()[-1], "bin", "python")


def run(py, mode, ck, out, phase, kill, restarts, **extra):
    env = dict(os.environ, PHASE=phase, KILL=kill, DS_ACCELERATOR="cpu",
               TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
    for k in ("LAUNCH_RESUME_STEP", "LAUNCH_CKPT_DIR"):
        env.pop(k, None)
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU, even on a GPU machine
    env.update(extra)
    return lt.launch_wait(["--standalone", "--nproc-per-node", "2", "--max-restarts",
                           str(restarts), "--stop-timeout", "5",
                           "--ckpt-dir", ck, "--no-python", py, WORKER, mode, ck, out,
                           str(STEPS), str(EVERY)],
                          env=env, name="%s-%s" % (mode, phase), timeout=240)


def load(out, name, log):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        fail("%s: not written\n%s" % (name, log[-6000:]))
    with open(p) as f:
        return json.load(f) if name.endswith(".json") else f.read()


def reference(py, tmp, mode, refs):
    """The final parameters' hash of an uninterrupted run (once per mode)."""
    if mode not in refs:
        out = os.path.join(tmp, mode + "-ref-out")
        os.makedirs(out)
        rc, log = run(py, mode, os.path.join(tmp, mode + "-ref"), out, "ref", "", 0)
        if rc != 0:
            fail("%s: the uninterrupted run exited %d\n%s" % (mode, rc, log[-8000:]))
        refs[mode] = load(out, "final-ref.txt", log)
        if mode == "dcp-ddp":
            nocoll(os.path.join(out, "nocoll"))
    return refs[mode]


def nocoll(d):
    """DCP saved without collectives (one __R.metadata per rank, no
    .metadata), which DCP loaded back: complete, written by 2 ranks, and
    verify says it checked structure, not SHA-256."""
    p = subprocess.run([lt.launch_bin(), "ckpt", "verify", d, "--json"], capture_output=True,
                       text=True, timeout=60)
    try:
        rep = json.loads(p.stdout)
    except ValueError:
        fail("ckpt verify %s: not JSON: %s %s" % (d, p.stdout, p.stderr))
    st = rep["steps"][0] if rep["steps"] else {}
    names = os.listdir(os.path.join(d, "step-%d" % STEPS))
    if (p.returncode != 0 or rep["layout"] != "dcp" or rep["checked"] != "structure" or
            st.get("name") != "step-%d" % STEPS or st.get("state") != "complete" or
            st.get("world_size") != 2 or ".metadata" in names or "__1.metadata" not in names):
        fail("DCP without collectives: ckpt verify exit %d: %s\n%s"
             % (p.returncode, p.stdout, sorted(names)))
    print("ok: DCP save(use_collectives=False): %s complete, world size 2, checked %s"
          % (st["name"], rep["checked"]))


def case(py, tmp, name, refs):
    mode, kill, want, say = CASES[name]
    t0 = time.time()
    ref = reference(py, tmp, mode, refs)
    out = os.path.join(tmp, name + "-out")
    os.makedirs(out)
    ck = os.path.join(tmp, name)
    rc, log = run(py, mode, ck, out, "run", kill, 1)
    if rc != 0:
        fail("%s: the run killed with %s exited %d\n%s" % (name, kill, rc, log[-8000:]))
    r0 = load(out, "start-run-r0.json", log)
    if r0["resume"] is not None:
        fail("%s: a fresh directory was given resume step %s" % (name, r0["resume"]))
    killed = load(out, "kill-run.json", log)
    r1 = load(out, "start-run-r1.json", log)
    if r1["resume"] != str(want):
        fail("%s: round 1 was given resume step %s, expected %d\n%s"
             % (name, r1["resume"], want, log[-8000:]))
    if "resuming from checkpoint step %d of %s" % (want, ck) not in log:
        fail("%s: launch did not say it resumes from step %d\n%s" % (name, want, log[-8000:]))
    if say and say not in log:
        fail("%s: launch did not say '%s'\n%s" % (name, say, log[-8000:]))
    changed = lt.tree_diff(killed, r1["tree"])
    if changed:
        fail("%s: between the kill and the restart, launch changed the library's "
             "checkpoint files: %s\n%s" % (name, changed, log[-8000:]))
    final = load(out, "final-run.txt", log)
    if final != ref:
        fail("%s: final parameters differ from the uninterrupted run's (%s vs %s)\n%s"
             % (name, final[:12], ref[:12], log[-8000:]))
    print("ok: %s: killed (%s), %d checkpoint files unchanged across the restart, resumed "
          "from step %d, final parameters bitwise equal (%.0f s)"
          % (name, kill, sum(1 for v in killed.values() if v != "dir"), want, time.time() - t0))


def verify_json(d):
    p = subprocess.run([lt.launch_bin(), "ckpt", "verify", d, "--json"], capture_output=True,
                       text=True, timeout=60)
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        fail("ckpt verify %s: not JSON: %s %s" % (d, p.stdout, p.stderr))


def hf_resave(py, tmp, _refs):
    """A save in place over a complete checkpoint-N, cut short: the older
    trainer_state.json must not vouch for the mix."""
    t0 = time.time()
    ck = os.path.join(tmp, "hf-resave")
    out = os.path.join(tmp, "hf-resave-out")
    os.makedirs(out)
    rc, log = run(py, "hf", ck, out, "first", "", 0)
    if rc != 0:
        fail("hf-resave: the first run exited %d\n%s" % (rc, log[-8000:]))
    # The times of a save and of one over it differ by more than the 2 s
    # that launch allows the clocks of the writing nodes.
    time.sleep(2.5)
    rc, log = run(py, "hf", ck, out, "again", "save:4:0", 0, FRESH="1")
    if rc == 0:
        fail("hf-resave: the run killed inside its save exited 0\n%s" % log[-8000:])
    vrc, rep = verify_json(ck)
    st = {s["name"]: s for s in rep["steps"]}
    c4 = st.get("checkpoint-4", {})
    if (c4.get("state") != "incomplete" or "after trainer_state.json was written"
            not in c4.get("problem", "")):
        fail("hf-resave: checkpoint-4 saved over in place and cut short: %s" % c4)
    if any(st[n]["state"] != "complete" for n in st if n != "checkpoint-4") or vrc != 0:
        fail("hf-resave: the steps not saved again: exit %d %s" % (vrc, rep["steps"]))
    time.sleep(2.5)
    rc, log = run(py, "hf", ck, out, "third", "", 0, FRESH="1")
    if rc != 0:
        fail("hf-resave: the run to the end exited %d\n%s" % (rc, log[-8000:]))
    vrc, rep = verify_json(ck)
    bad = [(s["name"], s["state"], s.get("problem")) for s in rep["steps"]
           if s["state"] != "complete"]
    if vrc != 0 or bad or len(rep["steps"]) != STEPS // EVERY:
        fail("hf-resave: every checkpoint-N saved in place to the end: exit %d %s"
             % (vrc, bad or rep["steps"]))
    print("ok: hf-resave: checkpoint-4 cut short in place is incomplete (%s); %d steps saved "
          "in place complete (%.0f s)" % (c4["problem"][:60], len(rep["steps"]),
                                          time.time() - t0))


EXTRA = {"hf-resave": hf_resave}


def main():
    if not os.path.exists(lt.launch_bin()):
        lt.skip("no launch binary at " + lt.launch_bin())
    py = venv_python()
    only = [m for m in os.environ.get("LAUNCH_REAL_ONLY", "").split(",") if m]
    tmp = tempfile.mkdtemp(prefix="launch-ckpt-real-")
    try:
        refs = {}
        for name in CASES:
            if not only or name in only:
                case(py, tmp, name, refs)
        for name, fn in EXTRA.items():
            if not only or name in only:
                fn(py, tmp, refs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
