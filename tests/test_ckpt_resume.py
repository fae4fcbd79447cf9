"""Automatic resume under launch --ckpt-dir (docs/checkpoints.md):
train_gpt --preset tiny on 2 agents x 2 workers on loopback (127.0.0.2,
.3) against a `launch server` of the test's own.

- chaos: 10 SIGKILLs of a random worker or agent at random times (a killed
  agent is started again, as a scheduler would); the job finishes and its
  final parameters equal an uninterrupted run's, bit for bit;
- a corrupted shard (one byte flipped) is skipped with a warning naming it,
  and the job resumes from the step before; also when the byte is flipped
  while the agents live, after a restart where they trusted the step
  without reading it again (LAUNCH_CKPT_VERIFIED told the workers);
- node-local directories holding different newest steps: the job resumes
  from the newest step both nodes hold;
- another world size: resumed when the state is replicated (train_gpt's),
  refused with exit 2 and a message saying what to do when it is not;
- crash consistency under launch: train_gpt saving every step, a rank
  SIGKILLed 50 times at random points (inside its background saves, its
  commits, the finalisation); after every kill `latest` names a step whose
  manifest and shards verify, and the job ends bit-identical.

The reference run is one process with --accum 4: the CPU sums have a fixed
order, so 4 ranks give bitwise what 4 micro-steps of accumulation give."""
import hashlib
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import ckptfix  # noqa: E402
import launchtest as lt  # noqa: E402

BIN = os.path.dirname(os.path.abspath(lt.launch_bin()))
TRAIN = os.path.join(BIN, "train_gpt")
MODEL = ["--preset", "tiny", "--val-batches", "2", "--log-every", "5"]


def reference(d, steps, world=4):
    """The parameters of an uninterrupted run of `steps` steps by `world`
    ranks."""
    out = os.path.join(d, "ref-%d-%d.bin" % (steps, world))
    if not os.path.exists(out):
        p = lt.Proc([TRAIN] + MODEL + ["--steps", str(steps), "--accum",
                                       str(world),
                                       "--dump-params", out],
                    env={"RANK": "", "WORLD_SIZE": ""}, name="ref")
        assert p.wait(300) == 0, p.output()
    with open(out, "rb") as f:
        return f.read()


class Job:
    """Two agents x 2 workers of train_gpt, each node with its own
    --ckpt-dir (node-local) or one shared."""

    def __init__(self, srv, d, run_id, steps, every, dirs, extra=(),
                 nproc=2, hosts=(2, 3), max_restarts=20, wrap=()):
        self.srv, self.d, self.run_id = srv, d, run_id
        self.steps, self.every, self.dirs = steps, every, dirs
        self.extra, self.nproc, self.hosts = list(extra), nproc, hosts
        self.max_restarts = max_restarts
        self.wrap = list(wrap)  # a command that runs train_gpt's
        self.dump = os.path.join(d, "params-%s.bin" % run_id)
        self.agents = {}
        self.old = []

    def start(self, h):
        args = ["--nnodes", str(len(self.hosts)), "--nproc-per-node",
                str(self.nproc), "--rdzv-endpoint",
                "127.0.0.1:%d" % self.srv.port, "--rdzv-id", self.run_id,
                "--local-addr", "127.0.0.%d" % h, "--max-restarts", str(self.max_restarts),
                "--stop-timeout", "5", "--ckpt-dir", self.dirs[h]] + \
            self.extra + self.wrap + [TRAIN] + MODEL + [
                "--steps", str(self.steps), "--ckpt-every", str(self.every),
                "--dump-params", self.dump]
        if h in self.agents:
            self.old.append(self.agents[h])
        self.agents[h] = lt.launch(args, env={"LAUNCH_HOSTNAME": "h%d" % h},
                                   name="agent%d" % h)

    def start_all(self):
        for h in self.hosts:
            self.start(h)

    def output(self):
        return "\n".join("--- %s (pid %d)\n%s" % (a.name, a.pid, a.output())
                         for a in self.old + list(self.agents.values()))

    def wait(self, timeout=300):
        rcs = [self.agents[h].wait(timeout) for h in self.hosts]
        return rcs

    def kill(self):
        for a in self.old + list(self.agents.values()):
            a.kill()


def latest_step(ck):
    try:
        with open(os.path.join(ck, "latest")) as f:
            return int(f.read().strip().split("-")[-1])
    except (FileNotFoundError, ValueError):
        return None


def wait_latest_past(ck, last, n, job, timeout=120):
    """Waits until `latest` in ck names a step at least n past `last` (or
    any step when last is None). Returns that step, or None when the job
    ended first; fails when nothing moves for `timeout` seconds."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        out = "".join(a.output() for a in job.agents.values())
        if "train_gpt: final" in out or \
                not all(a.running() for a in job.agents.values()):
            return None
        cur = latest_step(ck)
        if cur is not None and (last is None or cur >= last + n):
            return cur
        time.sleep(0.01)
    raise AssertionError("no checkpoint past step %s in %d s\n%s"
                         % (last, timeout, job.output()))


def test_chaos(srv, d):
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "0")) or None)
    seed = rng.randrange(1 << 30)
    rng = random.Random(seed)
    steps = 120
    ref = reference(d, steps)
    ck = os.path.join(d, "chaos-ck")
    job = Job(srv, d, "chaos", steps, 3, {2: ck, 3: ck})
    job.start_all()
    kills = []
    try:
        last = None
        while len(kills) < 10:
            # Kill once the job made 3-6 steps since the last kill (a
            # random point inside a step after that): a fast machine
            # cannot finish the job before the tenth kill, a slow one
            # is not killed before it made progress.
            last = wait_latest_past(ck, last, rng.choice((3, 6)), job)
            if last is None:
                break
            time.sleep(rng.uniform(0.0, 0.3))
            h = rng.choice(job.hosts)
            agent = job.agents[h]
            workers = lt.children(agent.pid)
            if rng.random() < 0.3 or not workers:
                agent.signal(signal.SIGKILL)
                agent.wait(10)
                kills.append("agent h%d" % h)
                time.sleep(rng.uniform(0.2, 1.0))
                job.start(h)  # as a scheduler restarts a failed task
            else:
                w = rng.choice(workers)
                try:
                    os.kill(w, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                kills.append("worker %d on h%d" % (w, h))
        rcs = job.wait(600)
        out = job.output()
        assert len(kills) == 10, "the job ended after %d kills (seed %d): " \
            "raise --steps\n%s" % (len(kills), seed, out)
        assert rcs == [0, 0], "seed %d, kills %s, exit codes %s\n%s" % (
            seed, kills, rcs, out)
        assert "resuming from checkpoint step" in out, out
        with open(job.dump, "rb") as f:
            got = f.read()
        assert got == ref, "seed %d, kills %s: final parameters differ from " \
            "an uninterrupted run's\n%s" % (seed, kills, out)
        print("chaos: seed %d, %d kills (%s); %d resumes; parameters "
              "bit-identical" % (seed, len(kills), ", ".join(kills),
                                  out.count("train_gpt: resumed from")))
    finally:
        job.kill()


def run_to_end(job, timeout=300):
    job.start_all()
    try:
        rcs = job.wait(timeout)
        assert rcs == [0] * len(job.hosts), "exit codes %s\n%s" % (
            rcs, job.output())
        return job.output()
    finally:
        job.kill()


def resumed_step(out):
    m = re.findall(r"train_gpt: resumed from step (\d+)", out)
    return int(m[-1]) if m else None


def flip_byte(path, at=1000):
    """One bit flipped by a write, as a disk error or a stray writer."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))


def test_corrupt_shard(srv, d):
    ck = os.path.join(d, "corrupt-ck")
    # steps 10, 15 and 20 kept (train_gpt saves its last step too)
    run_to_end(Job(srv, d, "corrupt1", 20, 5, {2: ck, 3: ck}))
    flip_byte(os.path.join(ck, "step-20", "rank-2.bin"))
    job = Job(srv, d, "corrupt2", 25, 5, {2: ck, 3: ck})
    out = run_to_end(job)
    assert re.search(r"warning: checkpoint step 20 on h3 is not usable: "
                     r"rank-2\.bin: SHA-256 .* does not match", out), out
    assert resumed_step(out) == 15, out
    with open(job.dump, "rb") as f:
        assert f.read() == reference(d, 25), "parameters differ\n" + out
    print("corrupt shard: step 20 skipped naming rank-2.bin; resumed from 15")


def wait_output(job, what, pred, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        out = job.output()
        if pred(out):
            return out
        time.sleep(0.1)
    raise AssertionError("timed out waiting for %s\n%s" % (what,
                                                          job.output()))


def test_corrupt_live_agent(srv, d):
    """The agents that verified step 20 trust it at the next restart
    (nothing changed), and hash it again once a byte was flipped."""
    ck = os.path.join(d, "live-ck")
    run_to_end(Job(srv, d, "live1", 20, 5, {2: ck, 3: ck}))
    go = os.path.join(d, "live-go")
    wrap = os.path.join(d, "live-wrap.sh")
    with open(wrap, "w") as f:
        f.write("#!/bin/sh\n"
                "echo \"worker $RANK: resume=${LAUNCH_RESUME_STEP-} "
                "verified=${LAUNCH_CKPT_VERIFIED-}\"\n"
                "[ -e '%s' ] || exec sleep 600\n"
                "exec \"$@\"\n" % go)
    os.chmod(wrap, 0o755)
    job = Job(srv, d, "live2", 25, 5, {2: ck, 3: ck}, wrap=[wrap])
    agreed = re.compile(r"checkpoint agreement on step (\d+) took [0-9.]+ s: "
                        r"SHA-256 computed for (\d+) shards? \([0-9.]+ MiB\), "
                        r"trusted for (\d+)")

    def kill_worker(h):
        for pid in lt.children(job.agents[h].pid):
            try:
                with open("/proc/%d/comm" % pid) as f:
                    if f.read().strip() != "sleep":
                        continue  # the agent's guardian, not a worker
            except FileNotFoundError:
                continue
            os.kill(pid, signal.SIGKILL)
            return
        raise AssertionError("no worker of h%d\n%s" % (h, job.output()))

    def rounds(out, n):
        return out.count("resume=20 verified=20") >= 4 * n
    job.start_all()
    try:
        # Round 0: new agents hash their shards of step 20.
        out = wait_output(job, "round 0's workers", lambda o: rounds(o, 1))
        assert sorted(agreed.findall(out)) == [("20", "2", "0")] * 2, out
        kill_worker(2)
        # Round 1: the same agents, nothing changed: trusted, not read.
        out = wait_output(job, "round 1's workers", lambda o: rounds(o, 2))
        assert sorted(agreed.findall(out)) == \
            [("20", "0", "2")] * 2 + [("20", "2", "0")] * 2, out
        # A byte flipped while the agents live, then a restart: hashed
        # again, caught, named; the job resumes from step 15 and trains.
        flip_byte(os.path.join(ck, "step-20", "rank-2.bin"))
        open(go, "w").close()
        kill_worker(3)
        rcs = job.wait(300)
        out = job.output()
        assert rcs == [0, 0], "exit codes %s\n%s" % (rcs, out)
    finally:
        job.kill()
    assert re.search(r"warning: checkpoint step 20 on h\d is not usable: "
                     r"rank-2\.bin: SHA-256 .* does not match", out), out
    assert resumed_step(out) == 15, out
    assert "resume=15 verified=15" in out, out
    with open(job.dump, "rb") as f:
        assert f.read() == reference(d, 25), "parameters differ\n" + out
    print("corrupt shard, live agents: step 20 trusted after a restart, "
          "hashed again after a flipped byte, skipped; resumed from 15")


def test_node_local(srv, d):
    dirs = {2: os.path.join(d, "local-h2"), 3: os.path.join(d, "local-h3")}
    run_to_end(Job(srv, d, "local1", 20, 5, dirs))
    for h in (2, 3):
        have = sorted(os.listdir(dirs[h]))
        assert "step-20" in have and "step-15" in have, have
    # node h3 lost its newest step (its disk, a late write): 15 is the
    # newest step both nodes hold.
    shutil.rmtree(os.path.join(dirs[3], "step-20"))
    job = Job(srv, d, "local2", 25, 5, dirs)
    out = run_to_end(job)
    assert resumed_step(out) == 15, out
    assert "resuming from checkpoint step 15" in out, out
    with open(job.dump, "rb") as f:
        assert f.read() == reference(d, 25), "parameters differ\n" + out
    print("node-local: newest steps 20 and 15, resumed from 15")


def write_step(ck, step, world, replicated):
    ckptfix.launch_step(ck, step, world, replicated)


def test_world_size_change(srv, d):
    # train_gpt's state is replicated: 4 ranks' checkpoint, resumed by 2
    ck = os.path.join(d, "elastic-ck")
    run_to_end(Job(srv, d, "el1", 10, 5, {2: ck, 3: ck}))
    job = Job(srv, d, "el2", 15, 5, {2: ck}, hosts=(2,))
    out = run_to_end(job)
    assert "another world size: replicated state" in out, out
    assert resumed_step(out) == 10, out  # el1's last step
    # not replicated: refused, exit 2, the message says what to do
    ck2 = os.path.join(d, "sharded-ck")
    write_step(ck2, 7, 4, False)
    a = lt.launch(["--standalone", "--nproc-per-node", "2", "--ckpt-dir", ck2,
                   "--no-python", "/bin/true"], name="refuse")
    try:
        rc = a.wait(60)
        out = a.output()
        assert rc == 2, (rc, out)
        assert "step 7 was written by 4 ranks and this job has 2" in out, out
        assert "run with 4 ranks" in out, out
    finally:
        a.kill()
    print("world size: replicated resumed on 2 of 4 ranks; sharded refused")


def verify_latest(ck):
    """`latest` names a final step whose shards match its manifest."""
    try:
        with open(os.path.join(ck, "latest")) as f:
            name = f.read().strip()
    except FileNotFoundError:
        return None
    sd = os.path.join(ck, name)
    with open(os.path.join(sd, "manifest.json")) as f:
        m = json.load(f)
    assert "step-%d" % m["step"] == name, (name, m["step"])
    assert len(m["shards"]) == m["world_size"], m
    for sh in m["shards"]:
        with open(os.path.join(sd, sh["file"]), "rb") as f:
            data = f.read()
        assert len(data) == sh["size"], (name, sh)
        assert hashlib.sha256(data).hexdigest() == sh["sha256"], (name, sh)
    return m["step"]


def test_crash_consistency(srv, d):
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "0")) or None)
    seed = rng.randrange(1 << 30)
    rng = random.Random(seed)
    steps = 300
    ck = os.path.join(d, "crash-ck")
    job = Job(srv, d, "crash", steps, 1, {2: ck}, hosts=(2,),
              max_restarts=60)
    job.start_all()
    seen = []
    try:
        last = None
        while len(seen) < 50:
            # 1-3 committed steps between kills, then a random point inside
            # the next step (mid-write included): 50 kills fit in 300 steps
            # whatever the machine's speed
            last = wait_latest_past(ck, last, rng.randint(1, 3), job)
            if last is None:
                break
            time.sleep(rng.uniform(0.0, 0.1))
            agent = job.agents[2]
            workers = lt.children(agent.pid)
            if not workers:
                continue
            try:
                os.kill(rng.choice(workers), signal.SIGKILL)
            except ProcessLookupError:
                continue
            step = verify_latest(ck)
            seen.append(step)
        rcs = job.wait(600)
        out = job.output()
        assert len(seen) == 50, "the job ended after %d kills (seed %d): " \
            "raise --steps\n%s" % (len(seen), seed, out)
        assert rcs == [0], "seed %d: exit codes %s\n%s" % (seed, rcs, out)
        with open(job.dump, "rb") as f:
            assert f.read() == reference(d, steps, 2), \
                "seed %d: final parameters differ\n%s" % (seed, out)
        print("crash consistency: seed %d, 50 kills, latest verified after "
              "each (steps %s); %d resumes; parameters bit-identical"
              % (seed, ",".join(str(x) for x in seen),
                 out.count("train_gpt: resumed from")))
    finally:
        job.kill()


def main():
    if not os.access(TRAIN, os.X_OK):
        lt.skip("no train_gpt next to " + lt.launch_bin())
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LAUNCH_CKPT_DIR",
              "LAUNCH_RESUME_STEP", "LAUNCH_CKPT_VERIFIED"):
        os.environ.pop(k, None)
    tests = [test_chaos, test_crash_consistency, test_corrupt_shard,
             test_corrupt_live_agent,
             test_node_local, test_world_size_change]
    only = sys.argv[1:]
    d = tempfile.mkdtemp(prefix="launch-ckpt-resume-")
    try:
        with lt.Server() as srv:
            for t in tests:
                if only and t.__name__ not in only:
                    continue
                t0 = time.time()
                t(srv, d)
                print("%s: ok (%.1f s)" % (t.__name__, time.time() - t0))
                sys.stdout.flush()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("test_ckpt_resume: ok")


if __name__ == "__main__":
    main()
