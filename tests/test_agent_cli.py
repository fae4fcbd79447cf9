"""`launch` command line: every invalid flag or combination fails at once
with a message naming the flag and exit status 2; an unreachable or
unresolvable endpoint fails after the join timeout naming the endpoint;
--help names our additions with examples."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest  # noqa: E402
import launchtest as lt  # noqa: E402

L = launchtest.launch_bin()


def run(args, env=None, timeout=30):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("PET_"):
            del e[k]
    if env:
        e.update(env)
    p = subprocess.run([L] + args, capture_output=True, text=True, env=e, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


BAD = [
    (["--nproc-per-node", "0", "/bin/true"], "--nproc-per-node"),
    (["--nproc-per-node", "many", "/bin/true"], "--nproc-per-node"),
    (["--nnodes", "4:2", "--rdzv-endpoint", "h:1", "/bin/true"], "MIN is larger than MAX"),
    (["--nnodes", "0", "/bin/true"], "--nnodes"),
    (["--nnodes", "a:b", "/bin/true"], "--nnodes"),
    (["--master-port", "70000", "/bin/true"], "--master-port"),
    (["--rdzv-endpoint", "host:99999", "/bin/true"], "--rdzv-endpoint"),
    (["--rdzv-endpoint", "[::1", "/bin/true"], "--rdzv-endpoint"),
    (["--rdzv-endpoint", "a b:1", "/bin/true"], "--rdzv-endpoint"),
    (["--bogus-flag", "/bin/true"], "unknown option '--bogus-flag'"),
    (["--module", "--no-python", "x"], "--module and --no-python"),
    (["--nnodes", "2:3", "--rdzv-backend", "static", "/bin/true"], "static rendezvous needs a fixed"),
    (["--nnodes", "2", "--node-rank", "2", "/bin/true"], "--node-rank 2 is not below --nnodes 2"),
    (["--rdzv-backend", "zookeeper", "--rdzv-endpoint", "h:1", "/bin/true"],
     "'zookeeper' is not c10d, static or etcd"),
    (["--rdzv-backend", "etcd", "/bin/true"], "etcd needs --rdzv-endpoint"),
    (["--rdzv-backend", "c10d", "/bin/true"], "needs --rdzv-endpoint"),
    (["--rdzv-conf", "join_timeout=abc", "/bin/true"], "join_timeout"),
    (["--rdzv-conf", "is_host=maybe", "/bin/true"], "is_host: 'maybe' is not true/false"),
    (["--rdzv-conf", "join_timeout", "/bin/true"], "needs a value"),
    (["--max-restarts", "-1", "/bin/true"], "--max-restarts"),
    (["--redirects", "7", "/bin/true"], "--redirects"),
    (["--nproc-per-node", "2", "--tee", "5:1", "/bin/true"], "--tee"),
    (["--nproc-per-node", "2", "--local-ranks-filter", "2", "/bin/true"], "--local-ranks-filter"),
    (["--signals-to-handle", "SIGKILL", "/bin/true"], "--signals-to-handle"),
    (["--standalone", "--nnodes", "2", "/bin/true"], "--standalone runs one node"),
    (["--nproc-per-node"], "needs a value"),
    (["--torch-store", "nowhere", "/bin/true"], "--torch-store"),
    ([], "usage"),
    (["--standalone"], "no program given"),
]


def test_read_timeout():
    """--rdzv-conf read_timeout: a server that stops answering (here the
    agent hosting it is stopped: the connection stays open) is lost after
    it. The other node of this 2-node job is no majority: it stops its
    workers and waits for the host (docs/rendezvous.md#host-failover)."""
    import signal as sig
    import tempfile
    py = sys.executable
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "py", "worker.py")
    d = tempfile.mkdtemp()
    port = lt.free_port()
    common = ["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "rt",
              "--rdzv-conf", "read_timeout=4,heartbeat=2"]
    with lt.Cleanup() as c:
        host = c.add(lt.launch(common + ["--local-addr", "127.0.0.1", "--no-python", py,
                                         worker, d, "forever"], name="host"))
        other = c.add(lt.launch(common + ["--local-addr", "127.0.0.2", "--no-python", py,
                                          worker, d, "forever"], name="other"))
        try:
            try:
                lt.wait_until(lambda: len(lt.records(d)) == 2, 60, "the workers")
            except AssertionError:
                raise AssertionError(host.output() + other.output())
            host.signal(sig.SIGSTOP)
            t0 = time.time()
            lt.wait_until(lambda: "did not answer for" in other.output(), 30,
                          "the other node to lose the stopped host")
            dt = time.time() - t0
            assert other.running(), other.output()
        finally:
            host.signal(sig.SIGCONT)
        host.signal(sig.SIGTERM)
        other.signal(sig.SIGTERM)
        host.wait(30)
        other.wait(30)
        out = other.output()
        # read_timeout (4 s) is shorter than 3 heartbeats (6 s): it decides
        import re
        m = re.search(r"did not answer for ([0-9.]+) s", out)
        assert m and 4 <= float(m.group(1)) < 6 and "read_timeout" in out, out
        assert "stopping the workers and waiting" in out, out
        assert dt < 20, dt


def main():
    for args, frag in BAD:
        rc, out = run(args)
        assert rc == 2, (args, rc, out)
        assert frag in out, (args, frag, out)
    # the environment fallbacks are checked like flags, and name the variable
    rc, out = run(["/bin/true"], env={"PET_NNODES": "3:1"})
    assert rc == 2 and "PET_NNODES" in out, out
    rc, out = run(["/bin/true"], env={"PET_NPROC_PER_NODE": "zero"})
    assert rc == 2 and "PET_NPROC_PER_NODE" in out, out
    # both spellings and --flag=value
    rc, out = run(["--nproc_per_node=0", "/bin/true"])
    assert rc == 2 and "--nproc-per-node" in out, out
    # help names launch's own additions, with examples
    rc, out = run(["--help"])
    assert rc == 0
    for frag in ["--torch-store", "--token-file", "--cpu-bind", "--nccl-profile",
                 "--start-method", "--monitor-interval", "separated by ':'",
                 "examples:", "launch --standalone"]:
        assert frag in out, frag
    # as torchrun (argparse), "--nproc 2" is --nproc-per-node 2; "--n" is
    # ambiguous and refused, naming what it could be
    rc, out = run(["--standalone", "--nproc", "2", "/bin/true"])
    assert rc == 0 and "ranks 0-1 of 2" in out, out
    rc, out = run(["--n", "2", "/bin/true"])
    assert rc == 2 and "ambiguous" in out and "--nproc-per-node" in out, out
    # an empty endpoint is refused (it used to serve 127.0.0.1:29500)
    rc, out = run(["--rdzv-endpoint", "", "/bin/true"])
    assert rc == 2 and "--rdzv-endpoint is empty" in out, out
    # log lines start with their time (UTC), unless asked not to
    import re
    rc, out = run(["--standalone", "/bin/true"])
    assert rc == 0 and re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} \[launch ", out,
                                 re.M), out
    for args, env in ((["--no-log-time"], None), ([], {"LAUNCH_LOG_TIME": "0"})):
        rc, out = run(["--standalone"] + args + ["/bin/true"], env=env)
        assert rc == 0 and out.startswith("[launch "), out
    test_read_timeout()
    # an endpoint nothing listens on: fails after the join timeout, naming it
    t0 = time.time()
    rc, out = run(["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1",
                   "--rdzv-conf", "join_timeout=1,is_host=false", "/bin/true"])
    dt = time.time() - t0
    assert rc != 0 and "127.0.0.1:1" in out, out
    assert 0.9 <= dt < 20, dt
    # a name that does not resolve
    rc, out = run(["--nnodes", "2", "--rdzv-endpoint", "no-such-host.invalid:29400",
                   "--rdzv-conf", "join_timeout=1", "/bin/true"])
    assert rc != 0 and "no-such-host.invalid" in out, out
    # stopped while it resolves the endpoint's name: a clean exit (under
    # ASan, no use of the client after it is freed)
    import random
    import signal as sig
    for i in range(10):
        p = lt.launch(["--nnodes", "2", "--rdzv-endpoint", "no-such-host.invalid:29400",
                       "--rdzv-conf", "join_timeout=30", "/bin/true"])
        time.sleep(random.uniform(0.01, 0.06))
        p.signal(sig.SIGTERM)
        rc = p.wait(30)
        out = p.output()
        # (-15: it was still starting, before its handlers were installed)
        assert rc in (128 + sig.SIGTERM, -sig.SIGTERM), (rc, out)
        assert "AddressSanitizer" not in out and "runtime error" not in out, out
    print("test_agent_cli: ok")


if __name__ == "__main__":
    main()
