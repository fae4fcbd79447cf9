"""Agents against servers that are not what they hoped (#11), on loopback
(127.0.0.x stand for hosts):
- a standalone `launch server` hosts the rendezvous: two agents holding
  their job's key (launch server --issue-key) run a job, `launch status`
  shows it;
- the same over mutual TLS, with certificates made here by the openssl
  command line; an agent without a certificate is refused in one line;
- a hosting agent stopped with SIGSTOP is noticed by the other agent within
  the heartbeat bound;
- a hosting agent resumed after a stop longer than the bound does not drop
  itself: its job finishes with exit 0;
- a worker that sends 16 MB TCPStore key lists on 20 connections to its
  agent's store, and leaves them idle, does not make the agent keep 16 MB
  a connection (the namespaced copy of a request is the request's only)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "py", "worker.py")
PY = sys.executable
records = lt.records


def agent(port, i, job, d, mode, nnodes="2", extra=(), hb="0.5"):
    args = ["--nnodes", nnodes, "--nproc-per-node", "1",
            "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", job,
            "--local-addr", "127.0.0.%d" % i,
            "--rdzv-conf", "join_timeout=60,last_call_timeout=1,heartbeat=%s" % hb,
            "--stop-timeout", "5"] + list(extra) + ["--no-python", PY, WORKER, d, mode]
    return lt.launch(args, env={"LAUNCH_HOSTNAME": "node%d" % i},
                     name="agent%d" % i)


def status(port, job, extra=()):
    p = subprocess.run([lt.launch_bin(), "status", "--json", "--rdzv-endpoint",
                        "127.0.0.1:%d" % port, "--rdzv-id", job, "--timeout", "5"]
                       + list(extra), capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def release(d):
    open(os.path.join(d, "release"), "w").close()


def run_two_agents(srv, d, job, agent_extra, status_extra):
    ags = [agent(srv.port, i, job, d, "hold", extra=agent_extra) for i in (2, 3)]
    try:
        lt.wait_until(lambda: len(records(d, 0)) == 2, 60, "both workers")
        st = status(srv.port, job, status_extra)
        assert st["state"] == "running" and len(st["members"]) == 2, st
        assert sorted(m["host"] for m in st["members"]) == ["node2", "node3"], st
        release(d)
        rcs = [a.wait(60) for a in ags]
        assert rcs == [0, 0], [a.output() for a in ags]
    finally:
        for a in ags:
            a.kill()


def test_standalone_server_with_job_keys():
    d = tempfile.mkdtemp()
    secret = os.path.join(d, "secret")
    key = os.path.join(d, "job.key")
    with open(secret, "w") as f:
        f.write("server-secret\n")
    with open(key, "w") as f:
        subprocess.run([lt.launch_bin(), "server", "--token-file", secret,
                        "--issue-key", "standalone"], stdout=f, check=True)
    with lt.Server("--token-file", secret) as srv:
        run_two_agents(srv, d, "standalone", ["--token-file", key],
                       ["--token-file", key])
        assert "no rendezvous module" not in srv.logtext()


def sh(d, cmd):
    subprocess.run(cmd, shell=True, cwd=d, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_certs(d):
    sh(d, "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem "
          "-days 2 -subj /CN=ca")
    for name, san in (("server", "IP:127.0.0.1"), ("node", "DNS:node")):
        sh(d, "openssl req -newkey rsa:2048 -nodes -keyout %s.key -out %s.csr "
              "-subj /CN=%s && printf 'subjectAltName=%s\\n' > %s.ext && "
              "openssl x509 -req -in %s.csr -CA ca.pem -CAkey ca.key "
              "-CAcreateserial -out %s.pem -days 2 -extfile %s.ext"
           % (name, name, name, san, name, name, name, name))


def test_mutual_tls():
    d = tempfile.mkdtemp()
    make_certs(d)
    p = lambda n: os.path.join(d, n)  # noqa: E731
    tls = ["--tls-ca", p("ca.pem"), "--tls-cert", p("node.pem"),
           "--tls-key", p("node.key")]
    with lt.Server("--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
                   "--tls-ca", p("ca.pem")) as srv:
        run_two_agents(srv, d, "tls", tls, tls)
        # an agent without a certificate of its own is refused, in one line
        a = agent(srv.port, 4, "tls-nocert", d, "ok", nnodes="1",
                  extra=["--tls-ca", p("ca.pem")])
        try:
            rc = a.wait(60)
        finally:
            a.kill()
        assert rc != 0 and "client certificate" in a.output(), a.output()


def test_stopped_host_is_noticed():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    # node1 hosts the server (it has the endpoint's address)
    ags = [agent(port, i, "stop", d, "hold") for i in (1, 2)]
    try:
        lt.wait_until(lambda: len(records(d, 0)) == 2, 60, "both workers")
        ags[0].signal(signal.SIGSTOP)
        t0 = time.time()
        # the other node, no majority of 2, stops its workers and waits
        # for the host (docs/rendezvous.md#host-failover)
        lt.wait_until(lambda: "did not answer" in ags[1].output(), 60,
                      "the other agent to notice the stopped host")
        took = time.time() - t0
        out = ags[1].output()
        print("the other agent noticed the stopped host after %.1f s" % took)
        assert ags[1].running() and "stopping the workers and waiting" in out, out
        # 3 heartbeats of 0.5 s, plus the watchdog's tick and slack
        assert took < 6, took
    finally:
        release(d)
        ags[0].signal(signal.SIGCONT)
        for a in ags:
            a.kill()


def test_host_resumes_after_a_stop():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    a = agent(port, 1, "resume", d, "hold", nnodes="1")
    try:
        lt.wait_until(lambda: len(records(d, 0)) == 1, 60, "the worker")
        a.signal(signal.SIGSTOP)
        time.sleep(3)  # twice the heartbeat bound of 1.5 s
        a.signal(signal.SIGCONT)
        time.sleep(1.5)
        assert a.running(), a.output()
        release(d)
        rc = a.wait(60)
        assert rc == 0, a.output()
        assert "stalled" in a.output() or "missed" not in a.output(), a.output()
    finally:
        release(d)
        a.kill()


def test_job_slots_refusal():
    """Issue #24: throw-away jobs do not use up an address's job slots (a
    sweep of short jobs), and when the slots of jobs in use are all taken
    the agent's error is the server's reason (the limit and the flag), not
    a hint about which agent hosts the server."""
    d = tempfile.mkdtemp()
    with lt.Server("--max-jobs-per-addr", "2") as srv:
        for i in range(4):  # one at a time: each run ends, its slot comes back
            st = subprocess.run([lt.launch_bin(), "status", "--rdzv-endpoint",
                                 "127.0.0.1:%d" % srv.port, "--rdzv-id", "sweep%d" % i,
                                 "--timeout", "5"], capture_output=True, text=True,
                                timeout=30)
            assert "per-address limit" not in st.stderr, st.stderr
            # a real one-node run leaves rendezvous state behind: the oldest
            # such job makes room for the next
            run = lt.launch(["--nnodes", "1", "--nproc-per-node", "1", "--rdzv-endpoint",
                             "127.0.0.1:%d" % srv.port, "--rdzv-id", "run%d" % i,
                             "--no-python", "/bin/true"], name="run%d" % i)
            rc = run.wait(60)
            assert rc == 0, run.output()
        # two agents waiting for a second node hold two jobs
        ags = [agent(srv.port, 2, "held%d" % i, d, "hold", extra=["--local-addr", "127.0.0.1"])
               for i in range(2)]
        try:
            time.sleep(2)  # both joined: their jobs are in use
            late = agent(srv.port, 2, "late", d, "hold", nnodes="1",
                         extra=["--local-addr", "127.0.0.1"])
            rc = late.wait(60)
            out = late.output()
            assert rc != 0, out
            assert "per-address limit of 2" in out and "--max-jobs-per-addr" in out, out
            assert "hosts the server" not in out, out
        finally:
            for a in ags:
                a.kill()
    shutil.rmtree(d, ignore_errors=True)


def test_hostile_host_name():
    """Issue #24: a host name with terminal escape codes and a newline is
    shown escaped by `launch status` (and the agents' logs); --json stays
    valid."""
    d = tempfile.mkdtemp()
    with lt.Server() as srv:
        a = lt.launch(["--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-endpoint",
                       "127.0.0.1:%d" % srv.port, "--rdzv-id", "evil",
                       "--rdzv-conf", "last_call_timeout=3",
                       "--no-python", "/bin/echo", "worker line"],
                      env={"LAUNCH_HOSTNAME": "evil\x1b[31m\x1b]0;pwned\x07\nfake"},
                      name="evil")
        try:
            time.sleep(2)
            p = subprocess.run([lt.launch_bin(), "status", "--rdzv-endpoint",
                                "127.0.0.1:%d" % srv.port, "--rdzv-id", "evil",
                                "--timeout", "5"], capture_output=True, timeout=30)
            out = p.stdout.decode("utf-8", "replace")
            assert p.returncode == 0 and "evil" in out, out
            assert "\x1b" not in out and "\x07" not in out, repr(out)
            assert "\\x1b[31m" in out, repr(out)
            st = status(srv.port, "evil")  # parses as JSON
            assert st["members"][0]["host"].startswith("evil\x1b"), st
            assert a.wait(60) == 0, a.output()
        finally:
            a.kill()
        assert "\x1b" not in a.output(), repr(a.output())
        assert "\\x1b[31m" in a.output() and "worker line" in a.output(), a.output()
    shutil.rmtree(d, ignore_errors=True)


# 20 TCPStore (>= 2.2 framing) connections to the agent's store, one CHECK
# of 1,990 keys of 8,000 bytes on each, then idle; the agent's RSS growth.
LISTS = r'''
import os, socket, struct, sys
def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
agent = os.getppid()
keys = [b"k%07d" % i + b"x" * 7992 for i in range(1990)]
check = bytes([5]) + struct.pack("<Q", len(keys)) + b"".join(
    struct.pack("<Q", len(k)) + k for k in keys)
conns, before = [], rss(agent)
for i in range(20):
    s = socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
    s.sendall(bytes([0]) + struct.pack("<I", 0x3C85F7CE) + check)
    if len(s.recv(1)) != 1:
        sys.exit("no reply to CHECK %d" % i)
    conns.append(s)
grew = (rss(agent) - before) // 1024
print("agent RSS grew by %d MiB over 20 idle connections" % grew, flush=True)
sys.exit(0 if grew < 64 else 1)
'''


def test_tcpstore_lists_not_kept():
    d = tempfile.mkdtemp()
    script = os.path.join(d, "lists.py")
    with open(script, "w") as f:
        f.write(LISTS)
    # ASan keeps freed blocks in a quarantine: returned at once here
    asan = os.environ.get("ASAN_OPTIONS", "")
    rc, out = lt.launch_wait(["--standalone", "--no-python", PY, script],
                             env={"ASAN_OPTIONS": asan + (":" if asan else "") +
                                  "quarantine_size_mb=0"}, name="lists")
    assert rc == 0, out
    assert "agent RSS grew by" in out, out


def main():
    test_tcpstore_lists_not_kept()
    test_hostile_host_name()
    test_job_slots_refusal()
    test_standalone_server_with_job_keys()
    test_mutual_tls()
    test_stopped_host_is_noticed()
    test_host_resumes_after_a_stop()
    print("test_adv_agents: ok")


if __name__ == "__main__":
    main()
