"""What the agent does with the node: CPU binding applied to the workers
(Cpus_allowed_list, LAUNCH_CPUS), the locked NCCL profile in their
environment (NVLink multicast always off), the lint stopping a broken
environment at start, and node fingerprints compared at the rendezvous (a
node with another NCCL profile is refused with a diff, or runs with
--allow-mismatch)."""
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "py", "worker.py")
PY = sys.executable


records = lt.records


def run(args, env=None, timeout=120):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith(("NCCL_", "PET_", "TORCH_NCCL_")):
            del e[k]
    if env:
        e.update(env)
    p = subprocess.run([lt.launch_bin()] + args, capture_output=True, text=True,
                       env=e, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def allowed_cpus(pid_status_text):
    for line in pid_status_text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return None


def test_binding():
    ncpu = os.cpu_count()
    if ncpu < 2:
        print("binding: one CPU, skipped")
        return
    d = tempfile.mkdtemp()
    script = os.path.join(d, "cpus.py")
    with open(script, "w") as f:
        f.write("import os, json\n"
                "st = open('/proc/self/status').read()\n"
                "json.dump({'status': st, 'env': dict(os.environ)},"
                " open(os.path.join(%r, 'b.%%s.json' %% os.environ['LOCAL_RANK']), 'w'))\n" % d)
    rc, out = run(["--standalone", "--nproc-per-node", "2", "--cpu-bind", "1:0",
                   "--report-bindings", "--no-python", PY, script])
    assert rc == 0, out
    for r, want in ((0, "1"), (1, "0")):
        with open(os.path.join(d, "b.%d.json" % r)) as f:
            b = json.load(f)
        assert allowed_cpus(b["status"]) == want, (r, allowed_cpus(b["status"]))
        assert b["env"]["LAUNCH_CPUS"] == want, b["env"].get("LAUNCH_CPUS")
        assert "LAUNCH_NUMA_NODE" in b["env"]
    assert "rank 0: local rank 0" in out and "cpus 1" in out, out
    # a list for the wrong number of ranks is refused with its reason
    rc, out = run(["--standalone", "--nproc-per-node", "2", "--cpu-bind", "0",
                   "/bin/true"])
    assert rc != 0 and "list" in out.lower(), out


def test_foreign_topology():
    # another machine's topology binds nobody here and exports none of its
    # binding: the workers ran unbound after EINVAL, told LAUNCH_CPUS=48-63
    # of a DGX; --report-bindings still shows its plan
    topo = os.path.join(HERE, "topo", "dgx-a100.xml")
    d = tempfile.mkdtemp()
    rc, out = run(["--standalone", "--topology", topo, "--nproc-per-node", "2",
                   "--cpu-bind", "numa", "--mem-bind", "local", "--report-bindings",
                   "--no-python", PY, WORKER, d, "ok"])
    assert rc == 0, out
    assert "another machine's: the workers here are neither bound" in out, out
    assert "failed" not in out and "EINVAL" not in out, out
    assert "rank 0: local rank 0" in out and "cpus 48-63" in out, out
    envs = [r["env"] for r in records(d)]
    assert len(envs) == 2, out
    for e in envs:
        assert not any(k in e for k in ("LAUNCH_CPUS", "LAUNCH_NUMA_NODE",
                                        "LAUNCH_HCA", "LAUNCH_NETDEV")), e


def test_profile_lock():
    d = tempfile.mkdtemp()
    # the profile wins over inherited NCCL_* values; multicast stays off
    rc, out = run(["--standalone", "--nproc-per-node", "1", "--nccl-profile", "socket",
                   "--no-python", PY, WORKER, d, "ok"],
                  env={"NCCL_NVLS_ENABLE": "1", "NCCL_DEBUG": "INFO",
                       "NVSHMEM_DISABLE_NVLS": "0"})
    assert rc == 0, out
    env = records(d)[0]["env"]
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["NVSHMEM_DISABLE_NVLS"] == "1", env
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["LAUNCH_NCCL_PROFILE"] == "socket", env
    assert env["NCCL_IB_DISABLE"] == "1", env  # the socket profile
    assert env["NCCL_DEBUG"] == "INFO", env  # the user's debug setting stays
    assert "NCCL_NVLS_ENABLE" in out, out  # the refused value is reported
    # --allow-env-override: the user's value wins (but never for multicast)
    d = tempfile.mkdtemp()
    rc, out = run(["--standalone", "--allow-env-override", "--lint", "warn",
                   "--no-python", PY, WORKER, d, "ok"],
                  env={"NCCL_DEBUG": "INFO", "NCCL_NVLS_ENABLE": "1"})
    assert rc == 0, out
    env = records(d)[0]["env"]
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_NVLS_ENABLE"] == "0", env
    # a profile file of the user's own
    prof = os.path.join(d, "mine.env")
    with open(prof, "w") as f:
        f.write("# mine\nNCCL_SOCKET_NTHREADS=4\nNCCL_NSOCKS_PERTHREAD=${LOCAL_RANK:-0}\n")
    d2 = tempfile.mkdtemp()
    rc, out = run(["--standalone", "--nproc-per-node", "2", "--nccl-profile", prof,
                   "--no-python", PY, WORKER, d2, "ok"])
    assert rc == 0, out
    by_rank = {r["env"]["LOCAL_RANK"]: r["env"] for r in records(d2)}
    assert by_rank["0"]["NCCL_SOCKET_NTHREADS"] == "4"
    assert by_rank["1"]["NCCL_NSOCKS_PERTHREAD"] == "1", by_rank["1"]
    # a missing profile: a clear error before anything starts
    rc, out = run(["--standalone", "--nccl-profile", "/nonexistent.env", "/bin/true"])
    assert rc != 0 and "nonexistent.env" in out, out


def test_lint_at_start():
    # a node with GPUs (a DGX's topology stands for it here) refuses
    topo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "topo", "dgx-a100.xml")
    rc, out = run(["--standalone", "--topology", topo, "/bin/true"],
                  env={"NCCL_BUFFSIZE": "lots"})
    assert rc == 2, out
    assert "NCCL_BUFFSIZE" in out and "--lint warn" in out, out
    # this machine, where no GPU is used: NCCL never runs, a warning only
    rc, out = run(["--standalone", "/bin/true"],
                  env={"NCCL_SOCKET_IFNAME": "==x", "CUDA_VISIBLE_DEVICES": ""})
    assert rc == 0 and "no GPU is used here" in out, out
    rc, out = run(["--standalone", "--lint", "warn", "--no-python", "/bin/true"],
                  env={"NCCL_SOCKET_IFNAME": "==x"})
    assert rc == 0 and "NCCL_SOCKET_IFNAME" in out, out


def test_async_error_old_name():
    # PyTorch >= 2.2 on a GPU node, the 1.13-era NCCL_ASYNC_ERROR_HANDLING=0
    # inherited alone: its value is carried over to the name PyTorch reads,
    # as PyTorch's own fallback would, and said; the job runs (the lint
    # refused it: our TORCH_NCCL_ASYNC_ERROR_HANDLING=1 "disagreed")
    topo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "topo", "dgx-a100.xml")
    common = ["--standalone", "--topology", topo, "--torch-version", "2.4",
              "--nproc-per-node", "1", "--cpu-bind", "none"]
    d = tempfile.mkdtemp()
    rc, out = run(common + ["--no-python", PY, WORKER, d, "ok"],
                  env={"NCCL_ASYNC_ERROR_HANDLING": "0"})
    assert rc == 0, out
    e = records(d)[0]["env"]
    assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0", e
    assert e["NCCL_ASYNC_ERROR_HANDLING"] == "0", e
    assert "carried its value over to TORCH_NCCL_ASYNC_ERROR_HANDLING=0" in out, out
    # both names set by the user, to different values: still refused
    rc, out = run(common + ["/bin/true"], env={"NCCL_ASYNC_ERROR_HANDLING": "0",
                                               "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
    assert rc == 2 and "disagree" in out and "--lint warn" in out, out
    # both the same: they agree
    rc, out = run(common + ["/bin/true"], env={"NCCL_ASYNC_ERROR_HANDLING": "0",
                                               "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"})
    assert rc == 0, out


def agents(port, n, profiles, extra=(), d=None):
    out = []
    for i in range(1, n + 1):
        args = ["--nnodes", "2:%d" % n, "--nproc-per-node", "1", "--rdzv-endpoint",
                "127.0.0.1:%d" % port, "--rdzv-id", "fp", "--local-addr", "127.0.0.%d" % i,
                "--rdzv-conf", "join_timeout=60,last_call_timeout=2",
                "--nccl-profile", profiles[i - 1], "--lint", "warn"] + list(extra) + \
               ["--no-python", PY, WORKER, d, "ok"]
        out.append(lt.launch(args, env={"LAUNCH_HOSTNAME": "fp%d" % i}, name="fp%d" % i))
    return out


def test_fingerprint():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(port, 3, ["auto", "auto", "socket"], d=d)
    try:
        rcs = [a.wait(120) for a in ags]
    finally:
        for a in ags:
            a.kill()
    outs = [a.output() for a in ags]
    assert rcs[0] == 0 and rcs[1] == 0, outs
    assert rcs[2] != 0, outs[2]
    assert "fp3 differs from node 0 (fp1)" in outs[2], outs[2]
    assert "NCCL_IB_DISABLE" in outs[2] and "profile" in outs[2], outs[2]
    assert "--allow-mismatch" in outs[2], outs[2]
    # with --allow-mismatch all three run
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(port, 3, ["auto", "auto", "socket"], extra=["--allow-mismatch"], d=d)
    try:
        rcs = [a.wait(120) for a in ags]
    finally:
        for a in ags:
            a.kill()
    assert rcs == [0, 0, 0], [a.output() for a in ags]
    assert all(r["env"]["WORLD_SIZE"] == "3" for r in records(d))


def main():
    test_binding()
    test_foreign_topology()
    test_profile_lock()
    test_lint_at_start()
    test_async_error_old_name()
    test_fingerprint()
    print("test_agent_node: ok")


if __name__ == "__main__":
    main()
