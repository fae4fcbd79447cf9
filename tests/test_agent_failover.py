"""Host failover in the embedded mode (issue #28, docs/rendezvous.md#host-failover):
`kill -9` of the agent that hosts the server does not end the job. The first
successor (by node rank) hosts the server at its own address, the others join
it, the job re-forms without the lost node, and the workers' store moves with
it (MASTER_ADDR, MASTER_PORT, LAUNCH_RDZV_ENDPOINT). Agents on loopback:
127.0.0.x stand for hosts. The time from the kill to the first worker of the
new round is printed as a `figure:` line, never asserted."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "py", "worker.py")
PY = sys.executable


def agents(n, port, nnodes, d, run_id, extra=()):
    out = []
    for i in range(1, n + 1):
        args = ["--nnodes", nnodes, "--nproc-per-node", "2",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:%d" % port,
                "--rdzv-id", run_id, "--local-addr", "127.0.0.%d" % i,
                "--rdzv-conf", "join_timeout=60,last_call_timeout=1,heartbeat=0.3",
                "--stop-timeout", "5"] + list(extra) + ["--no-python", PY, WORKER, d, "hold"]
        out.append(lt.launch(args, env={"LAUNCH_HOSTNAME": "node%d" % i}, name="agent%d" % i))
    return out


def kill_host_and_watch(n, nnodes, run_id, extra=()):
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(n, port, nnodes, d, run_id, extra)
    try:
        lt.wait_until(lambda: len(lt.records(d, 0)) == 2 * n, 60, "round 0's workers")
        t0 = time.time()
        ags[0].signal(signal.SIGKILL)
        ags[0].wait(10)
        lt.wait_until(lambda: len(lt.records(d, 1)) == 2 * (n - 1), 60,
                      "round 1's workers on the survivors")
        took = time.time() - t0
        rcs = [a.wait(60) for a in ags[1:]]
        assert rcs == [0] * (n - 1), [a.output() for a in ags[1:]]
        outs = [a.output() for a in ags[1:]]
        # one line names the lost and the new host, on every survivor
        for o in outs:
            assert "rendezvous host node1 (127.0.0.1:%d) lost" % port in o, o
            assert "the new host is node2 (127.0.0.2:%d)" % port in o, o
        assert "this node" in [l for l in outs[0].splitlines() if "new host is" in l][0]
        gen1 = lt.records(d, 1)
        for r in gen1:
            env = r["env"]
            assert env["LAUNCH_HOSTNAME"] != "node1", env
            assert env["WORLD_SIZE"] == str(2 * (n - 1)), env
            assert env["MASTER_ADDR"] == "127.0.0.2", env
            assert env["MASTER_PORT"] == str(port), env
            assert env["LAUNCH_RDZV_ENDPOINT"] == "127.0.0.2:%d" % port, env
        assert sorted(int(r["env"]["RANK"]) for r in gen1) == list(range(2 * (n - 1)))
        print("figure: host failover, %d nodes (%s, 2 workers each, heartbeat 0.3 s): "
              "kill -9 of the host -> the new round's last worker started in %.2f s"
              % (n, nnodes, took))
        return gen1, outs, took
    finally:
        for a in ags:
            a.kill()


def test_two_nodes_kill_host():
    """The case of the issue: --nnodes 1:2, the hosting agent killed."""
    kill_host_and_watch(2, "1:2", "fo2")


def test_three_nodes_kill_host():
    """node2 hosts, node3 joins it; the round waits for both survivors."""
    kill_host_and_watch(3, "2:3", "fo3")


def test_checkpoint_agreement_after_failover():
    """--ckpt-dir: the survivors agree on the newest step again under the
    new host (a replicated step 7 of 4 ranks, resumed by the 2 left)."""
    sys.path.insert(0, HERE)
    from test_ckpt_resume import write_step
    ck = tempfile.mkdtemp()
    write_step(ck, 7, 4, True)
    gen1, outs, _ = kill_host_and_watch(2, "1:2", "fock", ["--ckpt-dir", ck])
    for r in gen1:
        assert r["env"]["LAUNCH_RESUME_STEP"] == "7", r["env"]
    assert outs[0].count("resuming from checkpoint step 7") == 2, outs[0]


if __name__ == "__main__":
    for t in (test_two_nodes_kill_host, test_three_nodes_kill_host,
              test_checkpoint_agreement_after_failover):
        print("== " + t.__name__, flush=True)
        t()
    print("ok")
