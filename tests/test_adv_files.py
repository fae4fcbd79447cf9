#!/usr/bin/env python3
"""Files launch reads that other users and programs write (issue #24): none
of them may hang launch or blow it up.
- a FIFO as a token file (`launch server`, `--issue-key`, the agent), as a
  Volcano *.host file, as a checkpoint's manifest.json, latest, shard,
  Hugging Face trainer_state.json, Megatron tracker or DeepSpeed latest:
  refused (or skipped) at once, naming the path and its type;
- a shard that is a symlink to /dev/zero (size 0 in the manifest): `ckpt
  verify` ends and says what it is;
- Megatron args claiming tensor 4096 x pipeline 4096 x expert 2^40, DeepSpeed
  dp_world_size 2^20 x mp_world_size 4096: refused at once with the limit;
- an oversized token file or manifest: the error names the file and the
  limit (not "request over a server limit");
- a world-writable token file: read, with a warning."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "py"))
import launchtest as lt  # noqa: E402
import test_ckpt_layouts as cl  # noqa: E402

LAUNCH = lt.launch_bin()
BUILD = os.environ.get("LAUNCH_BUILD_DIR", "build")
QUICK = 20 * float(os.environ.get("LAUNCH_TEST_TIMEOUT_MULT", "1"))


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def expect(cond, msg):
    if not cond:
        fail(msg)


def run(args, env=None, timeout=QUICK):
    """launch with args; a hang is a failure, not a test timeout."""
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.monotonic()
    try:
        p = subprocess.run([LAUNCH] + args, capture_output=True, text=True,
                           timeout=timeout, env=e, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        fail("launch %s hung (over %.0f s)" % (" ".join(args), timeout))
    return p, time.monotonic() - t0


def fifo(path):
    if os.path.lexists(path):
        os.unlink(path)
    os.mkfifo(path, 0o600)


def test_tokens(tmp):
    f = os.path.join(tmp, "token.fifo")
    fifo(f)
    for args in (["server", "--token-file", f, "--port", "0", "--host", "127.0.0.1"],
                 ["server", "--token-file", f, "--issue-key", "job1"],
                 ["--token-file", f, "--nnodes", "1", "--nproc-per-node", "1",
                  "--rdzv-endpoint", "127.0.0.1:1", "--no-python", "/bin/true"]):
        p, _ = run(args)
        expect(p.returncode != 0, "%s: exit 0 on a FIFO token file" % args)
        expect("is a FIFO, not a regular file" in p.stderr and f in p.stderr,
               "%s: stderr %r" % (args, p.stderr))
    big = os.path.join(tmp, "token.big")
    with open(big, "wb") as fh:
        fh.write(b"x" * (10 << 20))
    p, _ = run(["server", "--token-file", big, "--issue-key", "job1"])
    expect(p.returncode != 0 and "over the 4096-byte limit" in p.stderr
           and "server limit" not in p.stderr, p.stderr)
    ww = os.path.join(tmp, "token.ww")
    with open(ww, "w") as fh:
        fh.write("secret\n")
    os.chmod(ww, 0o666)
    p, _ = run(["server", "--token-file", ww, "--issue-key", "job1"])
    expect(p.returncode == 0 and p.stdout.strip(), p.stderr)
    expect("writable by every user" in p.stderr and ww in p.stderr, p.stderr)
    os.chmod(ww, 0o600)
    p, _ = run(["server", "--token-file", ww, "--issue-key", "job1"])
    expect(p.returncode == 0 and "writable" not in p.stderr, p.stderr)


def test_volcano(tmp):
    root = os.path.join(tmp, "volcano")
    os.makedirs(root)
    with open(os.path.join(root, "master.host"), "w") as fh:
        fh.write("vc-master-0\n")
    fifo(os.path.join(root, "worker.host"))
    env = {"LAUNCH_VOLCANO_ROOT": root, "VC_TASK_INDEX": "0",
           "VC_MASTER_HOSTS": "vc-master-0", "VC_MASTER_NUM": "1",
           "HOSTNAME": "vc-master-0", "LAUNCH_LINT": "warn"}
    p, _ = run(["env", "--nproc-per-node", "1"], env=env)
    expect("FIFO" not in p.stdout, p.stdout)  # it ended: the FIFO was skipped


def test_torch_version_fifo(tmp):
    """torch/version.py a FIFO in a PYTHONPATH directory: finding the
    workers' PyTorch version skips it instead of blocking."""
    d = os.path.join(tmp, "pypath")
    os.makedirs(os.path.join(d, "torch"))
    fifo(os.path.join(d, "torch", "version.py"))
    prog = os.path.join(d, "x.py")
    with open(prog, "w") as fh:
        fh.write("print(1)\n")
    p, _ = run(["env", "--nproc-per-node", "1", prog], env={"PYTHONPATH": d})
    expect(p.returncode == 0, p.stderr)


def launch_ckpt(tmp, name):
    d = os.path.join(tmp, name)
    subprocess.run([os.path.join(BUILD, "tests", "ckpt_writer"), d, "--mode", "single",
                    "--steps", "2", "--size", "5000"],
                   check=True, capture_output=True, timeout=60)
    return d


def verify(d, *extra):
    p, _ = run(["ckpt", "verify", d, "--json"] + list(extra))
    try:
        return json.loads(p.stdout), p
    except ValueError:
        fail("not JSON (exit %d): %r %r" % (p.returncode, p.stdout, p.stderr))


def test_launch_layout(tmp):
    # A shard that is /dev/zero, the manifest saying 0 bytes.
    d = launch_ckpt(tmp, "zero")
    m = os.path.join(d, "step-2", "manifest.json")
    man = json.load(open(m))
    shards = man.get("shards") or man.get("files")
    expect(isinstance(shards, list) and shards, "manifest: %r" % man)
    shards[0]["size"] = 0
    with open(m, "w") as fh:
        json.dump(man, fh)
    shard = os.path.join(d, "step-2", shards[0]["file"])
    os.unlink(shard)
    os.symlink("/dev/zero", shard)
    rep, p = verify(d)
    s = cl.step(rep, "step-2")
    expect(s["state"] != "complete" and "not a regular file" in (s["problem"] or ""),
           "step-2: %r" % s)
    cl.check_resume(rep, "step-1")
    # The shard a FIFO.
    os.unlink(shard)
    fifo(shard)
    rep, p = verify(d)
    cl.check_resume(rep, "step-1")
    # manifest.json a FIFO.
    d = launch_ckpt(tmp, "manfifo")
    fifo(os.path.join(d, "step-2", "manifest.json"))
    rep, p = verify(d)
    s = cl.step(rep, "step-2")
    expect("is a FIFO" in (s["problem"] or ""), "step-2: %r" % s)
    cl.check_resume(rep, "step-1")
    # latest a FIFO.
    fifo(os.path.join(d, "latest"))
    rep, p = verify(d)
    cl.check_resume(rep, "step-1")
    # A 100 MiB manifest: named with its limit.
    d = launch_ckpt(tmp, "bigman")
    with open(os.path.join(d, "step-2", "manifest.json"), "wb") as fh:
        fh.truncate(100 << 20)
    rep, p = verify(d)
    s = cl.step(rep, "step-2")
    expect("over the 67108864-byte limit" in (s["problem"] or "")
           and "server limit" not in s["problem"], "step-2: %r" % s)


def ls_ends(root, step=None, problem=None):
    """ckpt ls ends quickly (0 or 1); with step, its problem has `problem`."""
    p, took = run(["ckpt", "ls", root, "--json"])
    expect(p.returncode in (0, 1) and took < 10,
           "ls %s: exit %d after %.1f s: %s" % (root, p.returncode, took, p.stderr))
    if step is not None:
        s = cl.step(json.loads(p.stdout), step)
        expect(problem in (s["problem"] or ""), "%s: %r" % (step, s))


def test_big_manifest(tmp):
    """A manifest naming 100,000 shards: memory follows the manifest (once
    4.7 KB a shard, 2.9 GB for 600,000; a bound of 3.5 KB a shard holds
    under ASan too)."""
    d = launch_ckpt(tmp, "many")
    n = 100000
    many_shards(d, n)
    probe = ("import resource, subprocess, sys\n"
             "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL,"
             " stderr=subprocess.DEVNULL, timeout=120)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    p = subprocess.run([sys.executable, "-c", probe, LAUNCH, "ckpt", "ls", d],
                       capture_output=True, text=True, timeout=150)
    kb = int(p.stdout.strip())
    print("ckpt ls of %d shards: %d KB max RSS (%.0f bytes a shard)"
          % (n, kb, kb * 1024.0 / n))
    expect(kb * 1024 < 3500 * n, "%d KB for %d shards" % (kb, n))
    shutil.rmtree(d)


def many_shards(d, n):
    """Make step-2's manifest of the launch checkpoint d name n shards."""
    m = os.path.join(d, "step-2", "manifest.json")
    man = json.load(open(m))
    one = man["shards"][0]
    man["world_size"] = n
    man["shards"] = [{"rank": i, "file": "rank-%d.bin" % i, "size": one["size"],
                      "sha256": one["sha256"]} for i in range(n)]
    with open(m, "w") as fh:
        json.dump(man, fh)


def test_agent_ckpt_dir(tmp):
    """The agent's own scan of --ckpt-dir: FIFOs as latest and manifest.json
    do not keep it from starting its workers; SIGTERM during a long scan (a
    manifest of 450,000 shards, 61 MB: about 20 s under ASan) ends it within
    --stop-timeout + close_timeout + 2 s."""
    d = launch_ckpt(tmp, "agentfifo")
    fifo(os.path.join(d, "latest"))
    fifo(os.path.join(d, "step-2", "manifest.json"))
    p, took = run(["--standalone", "--nproc-per-node", "1", "--ckpt-dir", d,
                   "--no-python", "/bin/true"], timeout=60)
    expect(p.returncode == 0, "agent: exit %d: %s" % (p.returncode, p.stderr))
    d = launch_ckpt(tmp, "agentslow")
    many_shards(d, 450000)
    a = lt.launch(["--standalone", "--nproc-per-node", "1", "--ckpt-dir", d,
                   "--stop-timeout", "1", "--rdzv-conf", "close_timeout=1",
                   "--no-python", "/bin/sleep", "60"])
    try:
        time.sleep(3)
        t0 = time.monotonic()
        a.signal(signal.SIGTERM)
        rc = a.wait(60)
        took = time.monotonic() - t0
        print("SIGTERM during the scan: exit %d after %.1f s" % (rc, took))
        expect(rc == 128 + signal.SIGTERM and took < 8, "exit %d after %.1f s: %s"
               % (rc, took, a.output()))
    finally:
        a.kill()


def test_foreign(tmp):
    import argparse
    limit = "over launch's limit of 1048576 ranks"
    # Hugging Face: trainer_state.json a FIFO.
    root = os.path.join(tmp, "hf")
    cl.hf_ckpt(root, 500)
    fifo(os.path.join(root, "checkpoint-500", "trainer_state.json"))
    ls_ends(root, "checkpoint-500", "not a regular file")
    # Megatron: the tracker a FIFO.
    root = os.path.join(tmp, "megatron")
    cl.megatron_iter(root, 300)
    fifo(os.path.join(root, "latest_checkpointed_iteration.txt"))
    ls_ends(root)
    # Megatron: tensor 4096 x pipeline 4096 x expert 2^40 in the args, then
    # expert 2 (17 s before).
    root = os.path.join(tmp, "megatron-huge")
    f = os.path.join(root, "iter_0000010", "mp_rank_00_000_000", "model_optim_rng.pt")
    for ep in (1 << 40, 2):
        args = argparse.Namespace(tensor_model_parallel_size=4096,
                                  pipeline_model_parallel_size=4096,
                                  expert_model_parallel_size=ep,
                                  use_distributed_optimizer=False)
        cl.torch_save({"args": args, "iteration": 10, "checkpoint_version": 3.0}, f)
        ls_ends(root, "iter_0000010", limit)
    # DeepSpeed: latest a FIFO, then dp 2^20 x mp 4096.
    root = os.path.join(tmp, "deepspeed")
    cl.ds_step(root, 10)
    fifo(os.path.join(root, "latest"))
    ls_ends(root)
    root = os.path.join(tmp, "deepspeed-huge")
    d = os.path.join(root, "global_step10")
    cl.torch_save({"module": {"w": 1}, "dp_world_size": 1 << 20, "mp_world_size": 4096,
                   "global_steps": 10}, os.path.join(d, "mp_rank_00_model_states.pt"))
    cl.torch_save({"optimizer_state_dict": {"zero_stage": 2}},
                  os.path.join(d, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"))
    ls_ends(root, "global_step10", limit)


def test_names_and_ids(tmp):
    """File names with escape codes and bytes that are not UTF-8: `ckpt ls`
    prints them escaped, `--json` stays valid UTF-8. Run ids that would
    leave --log-dir are refused where they enter, naming the variable; so
    are bad PET_* values checked late (--tee, --redirects, ...)."""
    root = os.path.join(tmp, "names")
    cl.hf_ckpt(root, 7)
    evil = os.path.join(root.encode(), b"checkpoint-9\x1b[31m\xff")
    os.makedirs(evil)
    p, _ = run(["ckpt", "ls", root])
    expect("\x1b" not in p.stdout + p.stderr, repr(p.stdout + p.stderr))
    p = subprocess.run([LAUNCH, "ckpt", "ls", root, "--json"], capture_output=True,
                       timeout=QUICK)
    try:
        json.loads(p.stdout.decode("utf-8"))
    except ValueError as e:
        fail("ckpt ls --json: %s: %r" % (e, p.stdout))
    logs = os.path.join(tmp, "logs")
    os.makedirs(logs)
    for var in ("PET_RDZV_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        env = {var: "../escaped"}
        if var == "SLURM_JOB_ID":
            env.update({"SLURM_STEP_ID": "0", "SLURM_NNODES": "1", "SLURM_NODEID": "0",
                        "SLURM_JOB_NODELIST": "localhost", "SLURM_NTASKS_PER_NODE": "1"})
        p, _ = run(["--nnodes", "1", "--nproc-per-node", "1", "--log-dir", logs,
                    "--rdzv-endpoint", "127.0.0.1:1", "--no-python", "/bin/true"], env=env)
        if var == "TORCHELASTIC_RUN_ID" and p.returncode == 0:
            continue  # not a variable launch reads
        expect(p.returncode == 2 and "is not a job id" in p.stderr and var in p.stderr,
               "%s: exit %d: %s" % (var, p.returncode, p.stderr))
    expect(not os.path.exists(os.path.join(tmp, "escaped")) and
           not [f for f in os.listdir(tmp) if f.startswith("escaped")], os.listdir(tmp))
    for var, val in (("PET_TEE", "9"), ("PET_REDIRECTS", "7"),
                     ("PET_LOCAL_RANKS_FILTER", "zz")):
        p, _ = run(["env", "--nproc-per-node", "1"], env={var: val})
        expect(p.returncode != 0 and "(from %s)" % var in p.stderr,
               "%s=%s: %s" % (var, val, p.stderr))


def main():
    if not os.path.exists(LAUNCH):
        lt.skip("no launch binary at " + LAUNCH)
    tmp = tempfile.mkdtemp(prefix="launch-adv-files-")
    try:
        test_tokens(tmp)
        test_volcano(tmp)
        test_torch_version_fifo(tmp)
        test_launch_layout(tmp)
        test_big_manifest(tmp)
        test_agent_ckpt_dir(tmp)
        test_foreign(tmp)
        test_names_and_ids(tmp)
    finally:
        if not os.environ.get("LAUNCH_TEST_KEEP"):
            shutil.rmtree(tmp)
    print("ok")


if __name__ == "__main__":
    main()
