#!/usr/bin/env python3
"""test_volcano.py - examples/volcano/job.yaml and launch under Volcano.

  1. The YAML parses and holds what the runbook's cluster needs: a gang Job
     (schedulerName volcano, minAvailable = the pods, queue defined), the env
     and svc plugins, hostNetwork, IPC_LOCK, RDMA and GPU resources matching
     --nproc-per-node, the PVCs and ConfigMap it mounts, exit-code policies
     Volcano's admission accepts that restart the job for launch's
     recoverable codes and abort it for configuration errors
     (docs/exit-codes.md), no hand-set WORLD_SIZE/RANK/MASTER_ADDR, the
     launch server as a Deployment + Service the agents join with their
     job's key, and the NCCL profile of the ConfigMap a valid profile.
  2. The Job's entrypoint, run as Volcano would run it in each of its 8 pods
     (VC_TASK_INDEX, the svc plugin's /etc/volcano/trainer.host under a fake
     root, VC_TRAINER_HOSTS/_NUM): 8 agents on loopback, joined through a
     `launch server` with the job's key. Each of the 64 workers gets its
     own RANK, LOCAL_RANK, WORLD_SIZE, ..., the profile, the lock.
  3. The pytorch plugin's pod-level MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK
     (a master and 2 workers): pod 0 hosts the rendezvous at MASTER_ADDR,
     the workers get per-process values (pod names resolve through an
     /etc/hosts bound in a mount namespace of the test's own; skipped
     without one).
  4. A job of several tasks without the pytorch plugin, every pod given
     --nnodes and --rdzv-endpoint: one launch job, the run id the Volcano
     job's name in every task, each pod's node rank its place in the job
     (the master task's pod, then the worker task's).
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed (scripts/deps.sh --test)")
    sys.exit(77)

LAUNCH = os.path.abspath(os.environ.get("LAUNCH_BIN", "build/bin/launch"))
SRC = os.environ.get("LAUNCH_SOURCE_DIR",
                     os.path.join(os.path.dirname(__file__), ".."))
MULT = float(os.environ.get("LAUNCH_TEST_TIMEOUT_MULT", "1"))
JOB_YAML = os.path.join(SRC, "examples", "volcano", "job.yaml")

# launch's exit codes (docs/exit-codes.md): recoverable by a new try, and
# those that fail the same way again.
RESTART = {75, 70} | {128 + s for s in (6, 7, 9, 11, 15)}
ABORT = {2, 76, 126, 127}
# Volcano's admission (pkg/webhooks/admission/jobs/validate): events and
# actions a policy may name.
EVENTS = {"*", "PodPending", "PodRunning", "PodFailed", "PodEvicted",
          "Unknown", "TaskCompleted", "TaskFailed", "OutOfSync",
          "CommandIssued", "JobUpdated"}
ACTIONS = {"AbortJob", "RestartJob", "RestartTask", "RestartPod",
           "RestartPartition", "TerminateJob", "CompleteJob", "ResumeJob"}


def fail(why, *logs):
    for text in logs:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    print("FAIL: " + why)
    sys.exit(1)


def check(cond, why):
    if not cond:
        fail(why)


def flag(args, name):
    """The value of --name in args, or None."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def program_index(args):
    """Where PROGRAM starts in launch's arguments: the first word that is
    neither a flag nor a flag's value (launch's flags here all take one)."""
    i = 0
    while i < len(args):
        if not args[i].startswith("-"):
            return i
        i += 1 if "=" in args[i] else 2
    fail("no PROGRAM in the launch command: %s" % args)


# ---- 1. the YAML -------------------------------------------------------------

def load():
    with open(JOB_YAML) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    by = {}
    for d in docs:
        by.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    return by


def check_yaml(by):
    for kind in ("ConfigMap", "Queue", "Job", "Deployment", "Service",
                 "PersistentVolumeClaim", "PersistentVolume"):
        check(kind in by, "job.yaml has no %s" % kind)
    (job,) = by["Job"].values()
    spec = job["spec"]
    check(spec.get("schedulerName") == "volcano", "the Job is not Volcano's")
    check(spec.get("queue") in by["Queue"], "the Job's queue is not defined")
    replicas = sum(t["replicas"] for t in spec["tasks"])
    check(spec.get("minAvailable") == replicas,
          "gang: minAvailable %s, but %d pods" % (spec.get("minAvailable"),
                                                  replicas))
    check("env" in spec["plugins"] and "svc" in spec["plugins"],
          "the env and svc plugins give launch the pods and their index")
    check(spec.get("maxRetry", 0) >= 1, "no maxRetry")

    # policies: what Volcano's admission accepts, and launch's codes
    codes, events = {}, set()
    for p in spec["policies"]:
        has_event = "event" in p or "events" in p
        check(has_event != ("exitCode" in p),
              "a policy names an event or an exit code: %s" % p)
        check(p["action"] in ACTIONS, "unknown action %s" % p["action"])
        if "exitCode" in p:
            check(p["exitCode"] != 0, "exit code 0 in a policy")
            check(p["exitCode"] not in codes, "exit code %d twice"
                  % p["exitCode"])
            codes[p["exitCode"]] = p["action"]
        else:
            for e in p.get("events", []) + ([p["event"]] if "event" in p
                                            else []):
                check(e in EVENTS and e not in events, "event %s" % e)
                events.add(e)
    check("*" not in events or len(events) == 1, "'*' with other events")
    for c in RESTART:
        check(codes.get(c) == "RestartJob",
              "exit code %d (recoverable, docs/exit-codes.md) does not "
              "restart the job" % c)
    for c in ABORT:
        check(codes.get(c) == "AbortJob",
              "exit code %d (a configuration error) does not abort" % c)
    for c in codes:
        check(c in RESTART | ABORT, "exit code %d is none of launch's" % c)

    (task,) = spec["tasks"]
    pod = task["template"]["spec"]
    check(pod.get("hostNetwork") is True, "no hostNetwork (InfiniBand)")
    check(pod.get("dnsPolicy") == "ClusterFirstWithHostNet",
          "hostNetwork pods resolve the Service with ClusterFirstWithHostNet")
    (c,) = pod["containers"]
    check(c["command"] == ["launch"], "the entrypoint is not launch")
    args = c["args"]
    check("IPC_LOCK" in c["securityContext"]["capabilities"]["add"],
          "no IPC_LOCK (GPUDirect RDMA)")
    limits = c["resources"]["limits"]
    check(any(k.startswith("rdma/") for k in limits), "no RDMA resource")
    check(str(limits["nvidia.com/gpu"]) == flag(args, "--nproc-per-node"),
          "--nproc-per-node is not the pod's GPU count")
    env = {e["name"] for e in c.get("env", [])}
    for name in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT",
                 "LOCAL_RANK"):
        check(name not in env, "%s is set by hand: launch sets it per "
              "worker" % name)
    check(not any(e.get("configMapRef") for e in c.get("envFrom", [])),
          "NCCL variables as env: they belong in the --nccl-profile file")
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    for v in vols.values():
        if "persistentVolumeClaim" in v:
            check(v["persistentVolumeClaim"]["claimName"]
                  in by["PersistentVolumeClaim"], "PVC %s not defined" %
                  v["persistentVolumeClaim"]["claimName"])
        if "configMap" in v:
            check(v["configMap"]["name"] in by["ConfigMap"],
                  "ConfigMap %s not defined" % v["configMap"]["name"])
    check(vols[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory",
          "/dev/shm is not memory")
    # the grace launch gives the workers fits in the pod's
    check(int(flag(args, "--stop-timeout")) <
          pod.get("terminationGracePeriodSeconds", 30),
          "--stop-timeout is not below terminationGracePeriodSeconds")

    # the launch server: Deployment + Service on the port the agents use,
    # its secret, the job's key mounted from a Secret
    ep = flag(args, "--rdzv-endpoint")
    host, port = ep.rsplit(":", 1)
    check(host.split(".")[0] in by["Service"], "the endpoint is no Service")
    svc = by["Service"][host.split(".")[0]]
    check(int(port) in [p["port"] for p in svc["spec"]["ports"]],
          "the Service does not serve port %s" % port)
    (dep,) = by["Deployment"].values()
    sc = dep["spec"]["template"]["spec"]["containers"][0]
    check(sc["command"] == ["launch"] and sc["args"][0] == "server",
          "the Deployment does not run launch server")
    check(flag(sc["args"], "--token-file"), "the server has no secret")
    check(dep["spec"]["template"]["metadata"]["labels"].items()
          >= svc["spec"]["selector"].items(), "the Service selects no server")
    key = flag(args, "--token-file")
    check(key and vols[mounts[os.path.dirname(key)]].get("secret"),
          "the job's key is not mounted from a Secret")
    check(flag(args, "--rdzv-id") == job["metadata"]["name"],
          "--rdzv-id is not the job's name (its key is issued for it)")
    print("job.yaml: gang of %d pods, %d exit-code policies, launch server "
          "Service, key in a Secret" % (replicas, len(codes)))
    return job, args


def check_profile(by, args, work):
    path = flag(args, "--nccl-profile")
    (cm,) = [m for m in by["ConfigMap"].values()
             if os.path.basename(path) in m.get("data", {})]
    text = cm["data"][os.path.basename(path)]
    f = os.path.join(work, os.path.basename(path))
    with open(f, "w") as fh:
        fh.write(text)
    r = subprocess.run([LAUNCH, "env", "--profile", f], capture_output=True,
                       text=True)
    check(r.returncode == 0, "the ConfigMap's profile does not load: %s"
          % r.stderr)
    for bad in ("NCCL_IB_GID_INDEX", "NCCL_SOCKET_TIMEOUT", "NCCL_P2P_LEVEL"):
        check(bad not in text, "the profile keeps the runbook's %s" % bad)
    return f


# ---- 2. the pods -------------------------------------------------------------

DUMP = 'env > "$0/$RANK"'


class Procs:
    def __init__(self):
        self.procs = []

    def start(self, argv, env, log):
        fh = open(log, "w")
        p = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT)
        fh.close()
        self.procs.append((p, log))
        return p

    def wait_all(self, timeout):
        end = time.time() + timeout * MULT
        rcs = []
        for p, log in self.procs:
            try:
                rcs.append(p.wait(max(1, end - time.time())))
            except subprocess.TimeoutExpired:
                rcs.append(None)
        return rcs

    def logs(self):
        out = []
        for _, log in self.procs:
            with open(log, errors="replace") as fh:
                out.append("--- %s\n%s" % (log, fh.read()[-3000:]))
        return "\n".join(out)

    def stop(self):
        for p, _ in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def base_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "VC_", "VK_", "PET_", "LAUNCH_"))
           and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                         "LOCAL_RANK", "HOSTNAME", "CUDA_VISIBLE_DEVICES")}
    return env


def read_env(path):
    with open(path) as fh:
        return dict(line.rstrip("\n").split("=", 1) for line in fh
                    if "=" in line)


def run_pods(job, args, profile, work):
    spec = job["spec"]
    (task,) = spec["tasks"]
    name, n = job["metadata"]["name"], task["replicas"]
    nproc = int(flag(args, "--nproc-per-node"))
    hosts = ["%s-%s-%d.%s" % (name, task["name"], i, name) for i in range(n)]
    root = os.path.join(work, "etc-volcano")
    os.mkdir(root)
    with open(os.path.join(root, task["name"] + ".host"), "w") as fh:
        fh.write("\n".join(hosts))
    dump = os.path.join(work, "env")
    os.mkdir(dump)
    secret = os.path.join(work, "token")
    with open(secret, "wb") as fh:
        fh.write(os.urandom(32))
    r = subprocess.run([LAUNCH, "server", "--token-file", secret,
                        "--issue-key", flag(args, "--rdzv-id")],
                       capture_output=True)
    check(r.returncode == 0, "launch server --issue-key: %s" % r.stderr)
    key = os.path.join(work, "key")
    with open(key, "wb") as fh:
        fh.write(r.stdout)
    pf = os.path.join(work, "port")
    procs = Procs()
    try:
        server = procs.start([LAUNCH, "server", "--host", "127.0.0.1",
                              "--port", "0", "--port-file", pf,
                              "--token-file", secret],
                             base_env(), os.path.join(work, "server.log"))
        end = time.time() + 10 * MULT
        while not (os.path.exists(pf) and open(pf).read().strip()):
            check(time.time() < end and server.poll() is None,
                  "launch server did not start")
            time.sleep(0.02)
        port = int(open(pf).read())
        # the pod's paths, here: the ConfigMap's file, the Secret's key, the
        # Service's address; the program dumps its environment
        a = list(args)
        a[a.index(flag(args, "--nccl-profile"))] = profile
        a[a.index(flag(args, "--token-file"))] = key
        a[a.index(flag(args, "--rdzv-endpoint"))] = "127.0.0.1:%d" % port
        a = a[:program_index(a)] + ["/bin/sh", "-c", DUMP, dump]
        agents = Procs()
        for i in range(n):
            env = base_env()
            c = task["template"]["spec"]["containers"][0]
            env.update({e["name"]: e["value"] for e in c.get("env", [])})
            env.update({
                # the env plugin
                "VC_TASK_INDEX": str(i), "VK_TASK_INDEX": str(i),
                # the svc plugin (its ConfigMap is the host file)
                "VC_TRAINER_HOSTS": ",".join(hosts),
                "VC_TRAINER_NUM": str(n),
                "LAUNCH_VOLCANO_ROOT": root,
                # hostNetwork: the pod's hostname is its node's
                "HOSTNAME": "gpu-node-%d" % i,
                # this machine has no InfiniBand for pcie-ib's lint
                "LAUNCH_LINT": "warn",
            })
            agents.start([LAUNCH] + a, env,
                         os.path.join(work, "pod%d.log" % i))
        rcs = agents.wait_all(120)
        agents.stop()
        if rcs != [0] * n:
            fail("pods exited %s" % rcs, agents.logs())
        logs = agents.logs()
    finally:
        procs.stop()
    world = n * nproc
    for rank in range(world):
        e = read_env(os.path.join(dump, str(rank)))
        node, local = divmod(rank, nproc)
        want = {"RANK": rank, "LOCAL_RANK": local, "WORLD_SIZE": world,
                "LOCAL_WORLD_SIZE": nproc, "GROUP_RANK": node,
                "GROUP_WORLD_SIZE": n, "ROLE_RANK": rank,
                "TORCHELASTIC_RUN_ID": name, "LAUNCH_RDZV_ID": name,
                "LAUNCH_HOSTNAME": hosts[node],
                "TORCHELASTIC_USE_AGENT_STORE": "False",
                "MASTER_ADDR": "127.0.0.1", "NCCL_P2P_DISABLE": "1",
                "NCCL_ALGO": "Tree", "NCCL_NVLS_ENABLE": "0",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TP_SIZE": "1",
                "PP_SIZE": "8", "LAUNCH_RDZV_TOKEN_FILE": key}
        for k, v in want.items():
            if e.get(k) != str(v):
                fail("rank %d: %s=%s, want %s" % (rank, k, e.get(k), v), logs)
    ports = {read_env(os.path.join(dump, str(r)))["MASTER_PORT"]
             for r in range(world)}
    check(len(ports) == 1 and ports != {str(port)},
          "rank 0's own store: one MASTER_PORT, not the server's (%s)" % ports)
    print("job.yaml's entrypoint in %d pods: %d workers, each with its own "
          "RANK/LOCAL_RANK/WORLD_SIZE, the profile and the lock" % (n, world))


# ---- 3. the pytorch plugin ---------------------------------------------------

def have_mount_ns():
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return r.returncode == 0


def master_and_workers(work, job, hosts):
    """The svc plugin's host files of a master task (hosts[0]) and a worker
    task (the rest) under a fake /etc/volcano, a free port, a dump folder."""
    root = os.path.join(work, job + "-volcano")
    os.mkdir(root)
    with open(os.path.join(root, "master.host"), "w") as fh:
        fh.write(hosts[0] + "\n")
    with open(os.path.join(root, "worker.host"), "w") as fh:
        fh.write("\n".join(hosts[1:]) + "\n")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    dump = os.path.join(work, job + "-env")
    os.mkdir(dump)
    return root, port, dump


def run_pytorch_plugin(work):
    if not shutil.which("unshare") or not have_mount_ns():
        print("SKIP part: no mount namespace for a test /etc/hosts (root and "
              "unshare -m); the pytorch plugin's case did not run")
        return
    job, nproc = "pt", 2
    hosts = ["pt-master-0.pt", "pt-worker-0.pt", "pt-worker-1.pt"]
    root, port, dump = master_and_workers(work, job, hosts)
    etc_hosts = os.path.join(work, "hosts")
    with open("/etc/hosts") as src, open(etc_hosts, "w") as fh:
        fh.write(src.read())
        for i, h in enumerate(hosts):
            fh.write("\n127.0.0.%d %s %s\n" % (i + 1, h, h.split(".")[0]))
    agents = Procs()
    try:
        for i, h in enumerate(hosts):
            env = base_env()
            env.update({
                "VC_TASK_INDEX": "0" if i == 0 else str(i - 1),
                "VK_TASK_INDEX": "0" if i == 0 else str(i - 1),
                "LAUNCH_VOLCANO_ROOT": root,
                "VC_MASTER_HOSTS": hosts[0], "VC_MASTER_NUM": "1",
                "VC_WORKER_HOSTS": ",".join(hosts[1:]), "VC_WORKER_NUM": "2",
                # the pytorch plugin: pod-level
                "MASTER_ADDR": hosts[0], "MASTER_PORT": str(port),
                "WORLD_SIZE": "3", "RANK": str(i),
                "HOSTNAME": h.split(".")[0],
            })
            agents.start(["unshare", "-m", "sh", "-c",
                          'mount --bind "$0" /etc/hosts && exec "$@"',
                          etc_hosts, LAUNCH, "--nproc-per-node", str(nproc),
                          "--local-addr", "127.0.0.%d" % (i + 1),
                          "/bin/sh", "-c", DUMP, dump],
                         env, os.path.join(work, "pt%d.log" % i))
        rcs = agents.wait_all(120)
        if rcs != [0, 0, 0]:
            fail("pytorch plugin pods exited %s" % rcs, agents.logs())
        logs = agents.logs()
    finally:
        agents.stop()
    world = len(hosts) * nproc
    for rank in range(world):
        e = read_env(os.path.join(dump, str(rank)))
        want = {"RANK": rank, "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": nproc,
                "LOCAL_RANK": rank % nproc, "GROUP_RANK": rank // nproc,
                "MASTER_ADDR": hosts[0], "MASTER_PORT": port,
                "TORCHELASTIC_RUN_ID": job,
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                "LAUNCH_HOSTNAME": hosts[rank // nproc]}
        for k, v in want.items():
            if e.get(k) != str(v):
                fail("pytorch plugin, rank %d: %s=%s, want %s"
                     % (rank, k, e.get(k), v), logs)
    check(re.search(r"round 0 of job pt: node 0 of 3", logs),
          "the master pod is not node 0")
    print("pytorch plugin: pod-level WORLD_SIZE=3/RANK became %d workers' "
          "RANK and WORLD_SIZE; the master pod hosted at MASTER_ADDR" % world)


# ---- 4. several tasks, no pytorch plugin ------------------------------------

def run_tasks_one_job(work):
    """A master task and a worker task, every pod given the same --nnodes
    and --rdzv-endpoint and no --rdzv-id: one launch job, as torchrun's
    run id "none" makes it (each task was a job of its own, both waited)."""
    hosts = ["vj-master-0.vj", "vj-worker-0.vj", "vj-worker-1.vj"]
    index = [0, 0, 1]
    root, port, dump = master_and_workers(work, "vj", hosts)
    agents = Procs()
    try:
        for i, h in enumerate(hosts):
            env = base_env()
            env.update({"VC_TASK_INDEX": str(index[i]),
                        "LAUNCH_VOLCANO_ROOT": root,
                        "HOSTNAME": h.split(".")[0]})
            agents.start([LAUNCH, "--nnodes", "3", "--rdzv-endpoint",
                          "127.0.0.1:%d" % port, "--local-addr",
                          "127.0.0.%d" % (i + 1), "--rdzv-conf",
                          "join_timeout=%d" % (20 * MULT),
                          "/bin/sh", "-c", DUMP, dump],
                         env, os.path.join(work, "vj%d.log" % i))
        rcs = agents.wait_all(60)
        logs = agents.logs()
        if rcs != [0, 0, 0]:
            fail("the tasks' pods exited %s" % rcs, logs)
    finally:
        agents.stop()
    got = {}
    for rank in range(3):
        e = read_env(os.path.join(dump, str(rank)))
        check(e.get("TORCHELASTIC_RUN_ID") == "vj" and e.get("WORLD_SIZE") == "3",
              "rank %d: run id %s, world %s" % (rank, e.get("TORCHELASTIC_RUN_ID"),
                                               e.get("WORLD_SIZE")))
        got[e["LAUNCH_HOSTNAME"]] = e["GROUP_RANK"]
    check(sorted(got) == hosts, "the pods of the job: %s" % got)
    # each pod its own node rank, in the pytorch plugin's order (the master
    # task, then the workers): both tasks' pod 0 asked for node 0 before
    order = {h: str(i) for i, h in enumerate(hosts)}
    check(got == order, "node ranks %s, want %s" % (got, order))
    check("is asked for by" not in logs, "a node rank asked for twice:\n" + logs)
    print("several tasks, no pytorch plugin, --nnodes/--rdzv-endpoint given: "
          "one launch job 'vj' of 3 pods, node ranks in the plugin's order")


def main():
    check(os.path.exists(LAUNCH), "no %s" % LAUNCH)
    work = tempfile.mkdtemp(prefix="launch_volcano_")
    try:
        by = load()
        job, args = check_yaml(by)
        profile = check_profile(by, args, work)
        run_pods(job, args, profile, work)
        run_pytorch_plugin(work)
        run_tasks_one_job(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("test_volcano: ok")


if __name__ == "__main__":
    main()
