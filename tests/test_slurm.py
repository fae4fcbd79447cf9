#!/usr/bin/env python3
"""test_slurm.py - launch under a real Slurm (slurm-wlm from Debian): one
munged with its own key and socket, one slurmctld and four `slurmd -N` on
this machine (nodes 127.0.0.1-4: loopback addresses stand in for hosts, the
node names resolve without DNS), all under a mktemp -d and ended by pid.

  1. srun -N4 --ntasks-per-node=1 launch --nproc-per-node 2 allreduce_check:
     no --nnodes, --node-rank, endpoint or run id; world size 4 x 2, the
     right sum, job JOB.STEP (not "none").
  2. the same with train_gpt --preset tiny: the final loss of a standalone
     run of 8 ranks.
  3. srun --ntasks-per-node=2 launch --from-tasks: one task per worker,
     each with its own RANK/LOCAL_RANK/WORLD_SIZE/LOCAL_WORLD_SIZE, the
     locked NCCL environment, MASTER_ADDR the first node; task 0's store
     serves allreduce_check.
  4. preemption: scancel --signal=USR1 reaches every worker, scancel's
     SIGTERM then gives them --stop-timeout to checkpoint; one that ignores
     SIGTERM is killed after it.
  5. a late node is named while the others wait; --nnodes unlike the
     step's node count, or several agents a node (srun
     --ntasks-per-node=2 without --from-tasks), stops launch at start,
     saying so.
  6. examples/slurm/train.sbatch runs as written (but for GPUs and program).

Skipped (77) where Slurm cannot start (not root, no packages and no way to
install them, daemons that do not come up). docs/schedulers.md.
"""
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

LAUNCH = os.path.abspath(os.environ.get("LAUNCH_BIN", "build/bin/launch"))
BIN = os.path.dirname(LAUNCH)
MULT = float(os.environ.get("LAUNCH_TEST_TIMEOUT_MULT", "1"))
NODES = ["127.0.0.%d" % i for i in range(1, 5)]
DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "squeue",
           "scancel")


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


def fail(why, *logs):
    for text in logs:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    print("FAIL: " + why)
    sys.exit(1)


def which(name):
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def ensure_packages():
    """Slurm and munge from Debian when missing (CI runs as root)."""
    if all(which(d) for d in DAEMONS):
        return
    if os.geteuid() != 0:
        skip("slurm-wlm and munge are not installed, and installing them "
             "needs root")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-qq",
                    "--no-install-recommends", "slurm-wlm", "munge"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    missing = [d for d in DAEMONS if not which(d)]
    if missing:
        skip("could not install slurm-wlm and munge (missing: %s)"
             % ", ".join(missing))


# The sockets that hold free_ports()' ports until this test exits.
_RESERVED = []


def free_ports(n):
    """n ports of 127.0.0.1 for the daemons, kept bound here (SO_REUSEADDR,
    not listening) until the test exits: no test running beside this one
    gets them from a bind to port 0 or a connect before the daemons listen
    (Slurm's daemons bind with SO_REUSEADDR too)."""
    ports = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        _RESERVED.append(s)
        ports.append(s.getsockname()[1])
    return ports


SLURM_CONF = """\
ClusterName=launchtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge/socket
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=30
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


class Cluster:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="launch_slurm_")
        self.procs = []
        for sub in ("munge", "state", "log", "spool", "work"):
            os.mkdir(os.path.join(self.dir, sub))
        os.chmod(os.path.join(self.dir, "munge"), 0o700)
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.dir,
                                                            "slurm.conf"))
        for k in [k for k in self.env if k.startswith("SLURM")
                  and k != "SLURM_CONF"]:
            del self.env[k]

    def spawn(self, name, argv):
        log = open(os.path.join(self.dir, "log", name + ".out"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                             env=self.env, cwd=self.dir)
        log.close()
        self.procs.append(p)
        return p

    def log_tail(self):
        out = []
        for f in sorted(glob.glob(os.path.join(self.dir, "log", "*"))):
            with open(f, errors="replace") as fh:
                out.append("--- %s\n%s" % (f, "".join(fh.readlines()[-15:])))
        return "\n".join(out)

    def start(self):
        key = os.path.join(self.dir, "munge", "munge.key")
        with open(key, "wb") as fh:
            fh.write(os.urandom(1024))
        os.chmod(key, 0o600)
        sock = os.path.join(self.dir, "munge", "socket")
        self.spawn("munged", [which("munged"), "-F", "-f", "--socket=" + sock,
                              "--key-file=" + key,
                              "--pid-file=" + sock + ".pid",
                              "--log-file=" + os.path.join(self.dir, "log",
                                                           "munged.log"),
                              "--seed-file=" + sock + ".seed"])
        if not wait_for(lambda: os.path.exists(sock), 10):
            self.stop()
            skip("munged did not start:\n" + self.log_tail())
        ports = free_ports(2 + len(NODES))
        nodes = "\n".join(
            "NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d "
            "CPUs=4 State=UNKNOWN" % (n, ports[2 + i])
            for i, n in enumerate(NODES))
        with open(self.env["SLURM_CONF"], "w") as fh:
            fh.write(SLURM_CONF.format(ctld_port=ports[0], d_port=ports[1],
                                       dir=self.dir, nodes=nodes))
        for n in NODES:
            os.mkdir(os.path.join(self.dir, "spool", n))
        self.spawn("slurmctld", [which("slurmctld"), "-D", "-i"])
        for n in NODES:
            self.spawn("slurmd." + n, [which("slurmd"), "-D", "-N", n])

        def idle():
            r = subprocess.run([which("sinfo"), "-h", "-N", "-o", "%T"],
                               env=self.env, capture_output=True, text=True)
            states = r.stdout.split()
            return len(states) == len(NODES) and all(
                s == "idle" for s in states)
        if not wait_for(idle, 30):
            tail = self.log_tail()
            self.stop()
            skip("Slurm did not come up (4 idle nodes):\n" + tail)

    def run(self, argv, timeout=120, **kw):
        return subprocess.run(argv, env=self.env, cwd=os.path.join(
            self.dir, "work"), capture_output=True, text=True,
            timeout=timeout * MULT, **kw)

    def job_id(self, name):
        r = self.run([which("squeue"), "-h", "-o", "%i", "-n", name])
        return r.stdout.strip()

    def stop(self):
        if self.procs and os.path.exists(self.env["SLURM_CONF"]):
            subprocess.run([which("scancel"), "--user", "root"], env=self.env,
                           capture_output=True, timeout=30)
        # daemons last to first: slurmd, slurmctld, munged
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_for(cond, seconds):
    end = time.time() + seconds * MULT
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def srun(cl, args, timeout=120):
    r = cl.run([which("srun")] + args, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


# ---- the cases -------------------------------------------------------------

def check_allreduce(what, rc, out, world):
    """allreduce_check's lines: every rank of world, the sum 1 + ... + world."""
    if rc != 0:
        fail("%s: exit %d" % (what, rc), out)
    ranks = sorted(int(m.group(1)) for m in re.finditer(
        r"rank=(\d+), local_rank=\d, world_size=%d, gpu=none, allreduce=%d\b"
        % (world, world * (world + 1) // 2), out))
    if ranks != list(range(world)):
        fail("%s: want ranks 0-%d with the sum %d, got %s" % (
            what, world - 1, world * (world + 1) // 2, ranks), out)


def case_allreduce(cl):
    rc, out = srun(cl, ["-N4", "--ntasks-per-node=1", LAUNCH,
                        "--nproc-per-node", "2",
                        os.path.join(BIN, "allreduce_check"), "--cpu"])
    check_allreduce("srun -N4 launch allreduce_check", rc, out, 8)
    jobs = set(re.findall(r"round 0 of job (\S+): node (\d) of 4", out))
    if len(jobs) != 4 or len({j for j, _ in jobs}) != 1:
        fail("want 4 nodes of one job in round 0, got %s" % sorted(jobs), out)
    job = jobs.pop()[0]
    if not re.fullmatch(r"\d+\.0", job):
        fail("the run id is '%s', want JOB.STEP" % job, out)
    print("allreduce: 4 nodes x 2 ranks, sum 36, job %s" % job)


def final_loss(out):
    m = re.findall(r"final: step 20 loss [0-9.]+ val [0-9.]+", out)
    return m[0] if len(m) == 1 else None


def case_train_gpt(cl):
    tg = [os.path.join(BIN, "train_gpt"), "--preset", "tiny", "--steps", "20",
          "--log-every", "10"]
    one = subprocess.run([LAUNCH, "--standalone", "--nproc-per-node", "8",
                          "-q"] + tg, capture_output=True, text=True,
                         timeout=300 * MULT, env=cl.env)
    if one.returncode != 0 or final_loss(one.stdout + one.stderr) is None:
        fail("standalone train_gpt: exit %d" % one.returncode,
             one.stdout + one.stderr)
    rc, out = srun(cl, ["-N4", "--ntasks-per-node=1", LAUNCH,
                        "--nproc-per-node", "2", "-q"] + tg, timeout=300)
    if rc != 0:
        fail("srun -N4 launch train_gpt: exit %d" % rc, out)
    a, b = final_loss(one.stdout + one.stderr), final_loss(out)
    if a != b:
        fail("final losses differ: standalone '%s', Slurm '%s'" % (a, b), out)
    print("train_gpt: 4 nodes x 2 ranks and one node x 8: %s" % a)


def case_from_tasks(cl):
    # the tasks' error files in the cluster's own folder (slurmd gives the
    # tasks TMPDIR=/tmp): a task execs its program, so it makes no folder,
    # and after a clean step nothing is there
    logs = os.path.join(cl.dir, "work", "logs")
    os.mkdir(logs)
    rc, out = srun(cl, ["-N4", "--ntasks-per-node=2", LAUNCH, "--from-tasks",
                        "--log-dir", logs,
                        os.path.join(BIN, "allreduce_check"), "--cpu"])
    check_allreduce("srun --ntasks-per-node=2 launch --from-tasks", rc, out, 8)
    if os.listdir(logs):
        fail("--from-tasks left %s in --log-dir" % os.listdir(logs), out)
    dump = os.path.join(cl.dir, "work", "env")
    os.mkdir(dump)
    ckd = os.path.join(cl.dir, "work", "ck")
    rc, out = srun(cl, ["-N2", "--ntasks-per-node=2", LAUNCH, "--from-tasks",
                        "--log-dir", logs, "--ckpt-dir", ckd, "--ckpt-keep", "5",
                        "/bin/sh", "-c", 'env > "$0/$SLURM_PROCID"', dump])
    if rc != 0:
        fail("--from-tasks env dump: exit %d" % rc, out)
    envs = []
    for procid in range(4):
        with open(os.path.join(dump, str(procid))) as fh:
            envs.append(dict(line.rstrip("\n").split("=", 1) for line in fh
                             if "=" in line))
    first = envs[0]["SLURMD_NODENAME"]  # task 0 runs on the step's node 0
    for procid, env in enumerate(envs):
        want = {"RANK": str(procid), "LOCAL_RANK": str(procid % 2),
                "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
                "GROUP_RANK": str(procid // 2), "GROUP_WORLD_SIZE": "2",
                "MASTER_ADDR": first, "NCCL_NVLS_ENABLE": "0",
                "LAUNCH_NCCL_PROFILE": "auto",
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                # issue 25: --ckpt-dir reaches a task as it reaches a worker
                "LAUNCH_CKPT_DIR": ckd, "LAUNCH_CKPT_KEEP": "5"}
        for k, v in want.items():
            if env.get(k) != v:
                fail("--from-tasks task %d: %s=%s, want %s" % (
                    procid, k, env.get(k), v))
        if env["LAUNCH_RDZV_ENDPOINT"] != first + ":" + env["MASTER_PORT"]:
            fail("task %d: LAUNCH_RDZV_ENDPOINT=%s, MASTER_PORT=%s" % (
                procid, env["LAUNCH_RDZV_ENDPOINT"], env["MASTER_PORT"]))
    print("--from-tasks: 8 tasks, sum 36; RANK, LOCAL_RANK, WORLD_SIZE, "
          "LOCAL_WORLD_SIZE, GROUP_RANK per task, NCCL lock set")


WORKER = r"""
import os, signal, sys, time
d, mode = sys.argv[1], sys.argv[2]
r = os.environ["RANK"]
def usr1(s, f):
    with open("%s/usr1.%s" % (d, r), "a") as fh:
        fh.write("x\n")
def term(s, f):
    with open("%s/term.%s" % (d, r), "w") as fh:
        fh.write("got\n")
    if mode == "stubborn":
        return
    time.sleep(1.0)  # a checkpoint that takes a while
    with open("%s/ckpt.%s" % (d, r), "w") as fh:
        fh.write("saved\n")
    sys.exit(0)
signal.signal(signal.SIGUSR1, usr1)
signal.signal(signal.SIGTERM, term)
open("%s/ready.%s" % (d, r), "w").close()
while True:
    time.sleep(0.05)
"""


def preempt(cl, mode, grace, nproc):
    d = tempfile.mkdtemp(dir=os.path.join(cl.dir, "work"))
    script = os.path.join(d, "worker.py")
    with open(script, "w") as fh:
        fh.write(WORKER)
    name = "preempt-" + mode
    out = open(os.path.join(d, "out"), "w+")
    p = subprocess.Popen([which("srun"), "-N2", "-J", name, LAUNCH,
                          "--nproc-per-node", str(nproc), "--stop-timeout",
                          str(grace), script, d, mode], env=cl.env,
                         stdout=out, stderr=subprocess.STDOUT,
                         cwd=os.path.join(cl.dir, "work"))
    world = 2 * nproc

    def count(prefix):
        return len(glob.glob(os.path.join(d, prefix + ".*")))
    try:
        if not wait_for(lambda: count("ready") == world, 60):
            fail("%s: the workers did not start" % name)
        job = cl.job_id(name)
        if mode == "ok":
            # Slurm's warning (what --signal=USR1@T sends before the end)
            cl.run([which("scancel"), "--signal=USR1", job])
            if not wait_for(lambda: count("usr1") == world, 20):
                fail("SIGUSR1 reached %d of %d workers" % (count("usr1"),
                                                           world))
        cl.run([which("scancel"), job])  # SIGTERM, SIGKILL after KillWait
        p.wait(60 * MULT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    out.seek(0)
    log = out.read()
    out.close()
    return d, world, count, log


def case_preemption(cl):
    d, world, count, log = preempt(cl, "ok", 20, 2)
    if count("ckpt") != world:
        fail("after SIGTERM %d of %d workers checkpointed within the grace"
             % (count("ckpt"), world), log)
    if "sending SIGKILL" in log:
        fail("a worker that exits within the grace was killed", log)
    print("preemption: SIGUSR1 then SIGTERM reached all %d workers, each "
          "saved within --stop-timeout" % world)
    d, world, count, log = preempt(cl, "stubborn", 2, 1)
    if count("term") != world or count("ckpt") != 0:
        fail("stubborn workers: %d got SIGTERM" % count("term"), log)
    if log.count("did not exit within the grace period; sending SIGKILL") \
            != world:
        fail("workers ignoring SIGTERM were not killed after --stop-timeout",
             log)
    print("preemption: workers ignoring SIGTERM killed after --stop-timeout")


def case_missing_node(cl):
    late = ("if [ \"$SLURM_NODEID\" = 2 ]; then echo \"late: $SLURMD_NODENAME\"; "
            "sleep 7; fi; exec \"$0\" "
            "--nproc-per-node 1 --rdzv-conf join_timeout=20 \"$1\" --cpu")
    rc, out = srun(cl, ["-N3", "/bin/sh", "-c", late, LAUNCH,
                        os.path.join(BIN, "allreduce_check")])
    if rc != 0:
        fail("a late node: exit %d" % rc, out)
    m = re.search(r"late: (\S+)", out)
    if m is None:
        fail("the late node did not say its name", out)
    if not re.search(r"waiting for nodes of job \S+: 2 joined of 3.*"
                     r"missing: " + re.escape(m.group(1)) + "$", out, re.M):
        fail("the waiting nodes did not name the missing one, %s" % m.group(1),
             out)
    print("a late node: named as missing while the others waited")


def case_step_disagrees(cl):
    """--nnodes that the step's node list contradicts: a clear error at
    start on every node (it waited out the join timeout, exit 75, or the
    node beyond --nnodes found the job finished)."""
    for nn, nodes in (("4", 2), ("1", 2)):
        t0 = time.time()
        rc, out = srun(cl, ["-N%d" % nodes, LAUNCH, "--nnodes", nn,
                            "--nproc-per-node", "1", "--rdzv-conf",
                            "join_timeout=20",
                            os.path.join(BIN, "allreduce_check"), "--cpu"])
        want = ("--nnodes %s, but this Slurm step runs on %d nodes "
                "(SLURM_STEP_NODELIST=" % (nn, nodes))
        if rc != 2 or out.count(want) != nodes or "srun -N%s" % nn not in out:
            fail("srun -N%d launch --nnodes %s: exit %d, want 2 and '%s' "
                 "from each node" % (nodes, nn, rc, want), out)
        if time.time() - t0 > 15 * MULT:
            fail("srun -N%d launch --nnodes %s: took %.0f s" % (
                nodes, nn, time.time() - t0), out)
    print("--nnodes unlike the step's nodes: exit 2 at start, saying so")
    # srun --ntasks-per-node=2 launch, no --from-tasks: two agents a node
    # (one hosted, the other found the port taken; exit 75)
    rc, out = srun(cl, ["-N2", "--ntasks-per-node=2", LAUNCH,
                        "--nproc-per-node", "1", "--rdzv-conf",
                        "join_timeout=20",
                        os.path.join(BIN, "allreduce_check"), "--cpu"])
    want = ("srun started 2 tasks on this node "
            "(SLURM_STEP_TASKS_PER_NODE=2(x2)), each a launch agent")
    if rc != 2 or out.count(want) != 4 or "--from-tasks" not in out:
        fail("srun --ntasks-per-node=2 launch: exit %d, want 2 and '%s' "
             "from each task" % (rc, want), out)
    print("srun --ntasks-per-node=2 launch: exit 2 at start, saying so")


def case_sbatch(cl):
    """examples/slurm/train.sbatch as it is, but for the GPUs and the
    program: this cluster has no GPU (--gpus-per-node=0 on the command line
    beats the script's)."""
    src = os.environ.get("LAUNCH_SOURCE_DIR", ".")
    script = os.path.join(src, "examples", "slurm", "train.sbatch")
    with open(script) as fh:
        text = fh.read()
    if re.search(r"^\s*(export\s+)?NCCL_\w+=", text, re.M):
        fail("train.sbatch sets NCCL variables by hand: they belong in "
             "--nccl-profile")
    if "--ckpt-dir" not in text:
        fail("train.sbatch says it resumes from checkpoints but passes no "
             "--ckpt-dir")
    logs = os.path.join(cl.dir, "work", "sbatch")
    os.mkdir(logs)
    env = dict(cl.env, TRAIN=os.path.join(BIN, "allreduce_check"), LOGS=logs,
               CKPT=os.path.join(logs, "ckpt"), LAUNCH=LAUNCH)
    r = subprocess.run([which("sbatch"), "--gpus-per-node=0", "--wait", "-o",
                        os.path.join(logs, "out"), script, "--cpu"], env=env,
                       capture_output=True, text=True, timeout=120 * MULT,
                       cwd=os.path.join(cl.dir, "work"))
    with open(os.path.join(logs, "out")) as fh:
        out = fh.read()
    check_allreduce("sbatch train.sbatch", r.returncode, r.stderr + out, 4)
    print("examples/slurm/train.sbatch: 4 nodes, one agent each, sum 10")


def main():
    if not os.path.exists(LAUNCH):
        fail("no %s" % LAUNCH)
    if os.geteuid() != 0:
        skip("Slurm's daemons run as root here; not root")
    ensure_packages()
    cl = Cluster()
    try:
        cl.start()
        case_allreduce(cl)
        case_from_tasks(cl)
        case_missing_node(cl)
        case_step_disagrees(cl)
        case_preemption(cl)
        case_sbatch(cl)
        case_train_gpt(cl)
    finally:
        cl.stop()
    print("test_slurm: ok")


if __name__ == "__main__":
    main()
