"""Several agents on loopback (127.0.0.x stand for hosts): rendezvous and
ranks, a restart counted once for the whole job, a kill -9'd agent under
--nnodes 3:4 (the others re-rendezvous and finish), a newcomer taken in
under --nnodes 4:5, static node ranks, a clash of --node-rank (a hint with
c10d, refused and named by node 0 with static), mismatched flags refused, and
`launch status` of a running job, and its ranks after the job shrank."""
import glob
import json
import os
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


def agents(n, port, nnodes, nproc, mode, d, extra=(), first=1, run_id="mn"):
    """n agents node<first>...; round 0 waits for all of them where they are
    the job's most nodes (lt.round0_last_call)."""
    last_call = lt.round0_last_call(n, nnodes)
    out = []
    for i in range(first, first + n):
        args = ["--nnodes", nnodes, "--nproc-per-node", str(nproc),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:%d" % port,
                "--rdzv-id", run_id, "--local-addr", "127.0.0.%d" % i,
                "--rdzv-conf", "join_timeout=60,last_call_timeout=%d,heartbeat=0.2" % last_call,
                "--stop-timeout", "5"] + list(extra) + ["--no-python", PY, WORKER, d] + mode
        out.append(lt.launch(args, env={"LAUNCH_HOSTNAME": "node%d" % i},
                             name="agent%d" % i))
    return out


def finish_all(ags, timeout=120):
    rcs = []
    for a in ags:
        rcs.append(a.wait(timeout))
    return rcs


def test_rendezvous_ranks():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    # the non-hosting agents start first: they wait for the server to appear
    ags = agents(2, port, "3", 2, ["ok"], d, first=2)
    time.sleep(0.5)
    ags += agents(1, port, "3", 2, ["ok"], d)
    try:
        rcs = finish_all(ags)
        assert rcs == [0, 0, 0], [a.output() for a in ags]
    finally:
        for a in ags:
            a.kill()


def test_three_nodes():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(3, port, "3", 2, ["ok"], d)
    try:
        assert finish_all(ags) == [0, 0, 0], [a.output() for a in ags]
    finally:
        for a in ags:
            a.kill()
    recs = records(d)
    assert len(recs) == 6
    by_rank = {int(r["env"]["RANK"]): r["env"] for r in recs}
    assert sorted(by_rank) == list(range(6))
    for rank, env in by_rank.items():
        assert env["WORLD_SIZE"] == "6" and env["GROUP_WORLD_SIZE"] == "3"
        assert env["LOCAL_WORLD_SIZE"] == "2"
        # node ranks by host name; global ranks contiguous per node
        node = int(env["GROUP_RANK"])
        assert env["LAUNCH_HOSTNAME"] == "node%d" % (node + 1), env
        assert rank == node * 2 + int(env["LOCAL_RANK"])
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == str(port)
        assert env["TORCHELASTIC_RUN_ID"] == "mn"


def test_restart_counted_once():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    # rank 3 (node 2) fails in generation 0: every node restarts, once
    ags = agents(2, port, "2", 2, ["fail-rank", "3", "4"], d, extra=["--max-restarts", "1"])
    try:
        assert finish_all(ags) == [0, 0], [a.output() for a in ags]
    finally:
        for a in ags:
            a.kill()
    g1 = records(d, 1)
    assert len(g1) == 4, len(g1)
    assert all(r["env"]["TORCHELASTIC_RESTART_COUNT"] == "1" for r in g1)
    # and with no restarts left, the job fails with rank 3's code on every node
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(2, port, "2", 2, ["fail-rank", "3", "4"], d)
    try:
        rcs = finish_all(ags)
    finally:
        for a in ags:
            a.kill()
    assert rcs == [4, 4], (rcs, [a.output() for a in ags])
    for a in ags:
        out = a.output()
        # every node prints the same root cause: rank 3 on node2, its stderr
        assert "Root cause" in out, out
        assert "host       : node2" in out and "rank       : 3 (local_rank 1, node 1)" in out, out
        assert "exit code  : 4" in out and "rank 3: something went wrong" in out, out


def test_kill_agent():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(4, port, "3:4", 2, ["hold"], d)
    try:
        lt.wait_until(lambda: len(records(d, 0)) == 8, 60, "8 workers of round 0")
        victim = ags[3]  # node4: not the host (node1 hosts 127.0.0.1)
        victim_workers = [r["pid"] for r in records(d, 0)
                          if r["env"]["LAUNCH_HOSTNAME"] == "node4"]
        victim.signal(signal.SIGKILL)
        victim.wait(10)
        rcs = finish_all(ags[:3])
        assert rcs == [0, 0, 0], [a.output() for a in ags]
        lt.wait_until(lambda: not any(lt.pid_alive(p) for p in victim_workers), 10,
                      "the killed agent's workers gone")
    finally:
        for a in ags:
            a.kill()
    g1 = records(d, 1)
    assert len(g1) == 6, len(g1)
    assert all(r["env"]["WORLD_SIZE"] == "6" for r in g1)
    assert "lost node node4" in ags[0].output(), ags[0].output()


def test_newcomer():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(4, port, "4:5", 1, ["hold"], d)
    try:
        lt.wait_until(lambda: len(records(d, 0)) == 4, 60, "round 0")
        # status of the running job
        st = subprocess.run([lt.launch_bin(), "status", "--rdzv-endpoint",
                             "127.0.0.1:%d" % port, "--rdzv-id", "mn"],
                            capture_output=True, text=True, timeout=30)
        assert st.returncode == 0, st.stderr
        assert "running, round 0" in st.stdout, st.stdout
        for h in ("node1", "node2", "node3", "node4"):
            assert h in st.stdout, st.stdout
        stj = subprocess.run([lt.launch_bin(), "status", "--json", "--rdzv-endpoint",
                              "127.0.0.1:%d" % port, "--rdzv-id", "mn"],
                             capture_output=True, text=True, timeout=30)
        js = json.loads(stj.stdout)
        assert js["round"] == 0 and len(js["members"]) == 4, js
        assert all(m["heartbeat_age_ms"] < 5000 for m in js["members"]), js
        late = agents(1, port, "4:5", 1, ["hold"], d, first=5)
        ags += late
        rcs = finish_all(ags)
        assert rcs == [0] * 5, [a.output() for a in ags]
    finally:
        for a in ags:
            a.kill()
    g1 = records(d, 1)
    assert len(g1) == 5 and all(r["env"]["WORLD_SIZE"] == "5" for r in g1), g1


def test_static():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = []
    try:
        # node ranks given: 127.0.0.2 is node 0 and hosts the server
        for i, rank in ((3, 1), (2, 0)):
            ags.append(lt.launch(["--nnodes", "2", "--nproc-per-node", "1",
                                  "--node-rank", str(rank), "--master-addr", "127.0.0.2",
                                  "--master-port", str(port), "--local-addr",
                                  "127.0.0.%d" % i, "--no-python", PY, WORKER, d, "ok"],
                                 env={"LAUNCH_HOSTNAME": "zz%d" % i}))
        assert finish_all(ags) == [0, 0], [a.output() for a in ags]
    finally:
        for a in ags:
            a.kill()
    for r in records(d):
        env = r["env"]
        want = "0" if env["LAUNCH_HOSTNAME"] == "zz2" else "1"
        assert env["GROUP_RANK"] == want, env
        assert env["MASTER_ADDR"] == "127.0.0.2" and env["MASTER_PORT"] == str(port)


def test_node_rank_clash():
    # c10d: --node-rank is a preference (torchrun ignores it there): every
    # node given --node-rank 0 still forms the job, a free rank for the
    # second, and the hosting node says who asked for it
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(1, port, "2", 1, ["ok"], d, extra=["--node-rank", "0"])
    lt.wait_until(lambda: (status_json(port, "mn") or {}).get("members"), 30,
                  "the first node to join")
    ags += agents(1, port, "2", 1, ["ok"], d, extra=["--node-rank", "0"], first=2)
    try:
        assert finish_all(ags) == [0, 0], [a.output() for a in ags]
    finally:
        for a in ags:
            a.kill()
    got = {r["env"]["LAUNCH_HOSTNAME"]: r["env"]["GROUP_RANK"] for r in records(d)}
    assert got == {"node1": "0", "node2": "1"}, got
    out = ags[0].output()
    assert "node rank 0 is asked for by node1 and by node2" in out, out
    # static: strict, as torchrun's; the waiting node 0 names the refused
    # node at once, and again when it gives up
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = []
    try:
        for i in (1, 2):
            ags.append(lt.launch(["--nnodes", "2", "--nproc-per-node", "1",
                                  "--node-rank", "0", "--master-addr", "127.0.0.1",
                                  "--master-port", str(port), "--local-addr",
                                  "127.0.0.%d" % i, "--rdzv-conf", "join_timeout=6",
                                  "--no-python", PY, WORKER, d, "ok"],
                                 env={"LAUNCH_HOSTNAME": "node%d" % i}))
            if i == 1:
                lt.wait_until(lambda: (status_json(port, "none") or {}).get("members"),
                              30, "node 0 to join")
        rcs = finish_all(ags, 60)
        out = ags[0].output()
        assert rcs[0] != 0 and rcs[1] != 0, [a.output() for a in ags]
        assert "claimed twice (node1 and node2)" in ags[1].output(), ags[1].output()
        assert "refused node2: node rank 0 is claimed twice" in out, out
        assert "refused for their node rank" in out and "node2" in out, out
    finally:
        for a in ags:
            a.kill()


def status_json(port, job):
    p = subprocess.run([lt.launch_bin(), "status", "--json", "--rdzv-endpoint",
                        "127.0.0.1:%d" % port, "--rdzv-id", job, "--timeout", "2"],
                       capture_output=True, text=True, timeout=30)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return None


def test_shrink_progress():
    # --nnodes 1:2, 2 nodes of 2 ranks reporting progress (librdzv's
    # native key launch/progress/<rank>); node2 is killed and the job
    # re-forms with 2 ranks: `launch status` shows ranks 0 and 1 only,
    # never round 0's ranks 2 and 3 with their old steps (a last call of
    # 15 s: round 0 waits for both nodes, as agents() does)
    hw = os.path.join(os.environ.get("LAUNCH_BUILD_DIR", "build"), "tests",
                      "hang_worker")
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = []
    for i in (1, 2):
        ags.append(lt.launch(
            ["--nnodes", "1:2", "--nproc-per-node", "2", "--rdzv-endpoint",
             "127.0.0.1:%d" % port, "--rdzv-id", "shrink", "--local-addr",
             "127.0.0.%d" % i, "--rdzv-conf",
             "join_timeout=60,last_call_timeout=15,heartbeat=0.2",
             "--stop-timeout", "5", "--max-restarts", "1", "--no-python", hw,
             "150", "slow", d],
            env={"LAUNCH_HOSTNAME": "node%d" % i}, name="agent%d" % i))
    try:
        lt.wait_until(lambda: all(os.path.exists(os.path.join(d, "pid.0.%d" % r))
                                  for r in range(4)), 60, "round 0's 4 ranks")
        lt.wait_until(lambda: len((status_json(port, "shrink") or {})
                                  .get("ranks", ())) == 4, 30,
                      "4 ranks in launch status")
        ags[1].signal(signal.SIGKILL)
        ags[1].wait(10)
        lt.wait_until(lambda: all(os.path.exists(os.path.join(d, "pid.1.%d" % r))
                                  for r in range(2)), 60, "round 1's 2 ranks")
        js = status_json(port, "shrink")
        assert js and js["round"] == 1, js
        assert [r["rank"] for r in js["ranks"]] == [0, 1], js["ranks"]
        st = subprocess.run([lt.launch_bin(), "status", "--rdzv-endpoint",
                             "127.0.0.1:%d" % port, "--rdzv-id", "shrink"],
                            capture_output=True, text=True, timeout=30)
        rows = [ln.split()[0] for ln in st.stdout.splitlines()
                if ln[:1].isdigit() and "/150" in ln]
        assert rows == ["0", "1"], st.stdout
        assert ags[0].wait(120) == 0, ags[0].output()
    finally:
        for a in ags:
            a.kill()


def test_mismatch():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    a = agents(1, port, "2", 1, ["ok"], d)
    b = []
    try:
        # the first node sets the job's flags; a node asking for others is
        # refused with a message naming them
        lt.wait_until(lambda: (status_json(port, "mn") or {}).get("members"), 30,
                      "the first node to join")
        b = agents(1, port, "3", 1, ["ok"], d, first=2)
        rc = b[0].wait(60)
        out = b[0].output()
        assert rc != 0 and "--nnodes 3:3" in out and "--nnodes 2:2" in out, out
    finally:
        for p in a + b:
            p.kill()


def test_missed_heartbeats():
    # a frozen agent (SIGSTOP) keeps its connection but stops its
    # heartbeats: dropped after 3 intervals, the others carry on
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(3, port, "2:3", 1, ["hold"], d)
    try:
        lt.wait_until(lambda: len(records(d, 0)) == 3, 60, "round 0")
        t0 = time.time()
        ags[2].signal(signal.SIGSTOP)
        rcs = finish_all(ags[:2])
        assert rcs == [0, 0], [a.output() for a in ags]
        assert time.time() - t0 < 30
        out = ags[0].output()
        assert "missed 3 heartbeats" in out or "lost node node3" in out, out
        assert all(r["env"]["WORLD_SIZE"] == "2" for r in records(d, 1))
    finally:
        for a in ags:
            a.signal(signal.SIGKILL)
            a.kill()


def test_below_min_and_waiting():
    d = tempfile.mkdtemp()
    port = lt.free_port()
    # one node of --nnodes 2, with the expected hosts known: it prints who
    # is missing while it waits, then gives up after the join timeout
    env_extra = {"LAUNCH_EXPECTED_HOSTS": "node[1-2]"}
    a = lt.launch(["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint",
                   "127.0.0.1:%d" % port, "--rdzv-id", "lonely", "--local-addr",
                   "127.0.0.1", "--rdzv-conf", "join_timeout=4", "--no-python", PY,
                   WORKER, d, "ok"], env=dict(env_extra, LAUNCH_HOSTNAME="node1"))
    try:
        rc = a.wait(60)
    finally:
        a.kill()
    out = a.output()
    assert rc != 0, out
    assert "1 joined of 2..2 (node1)" in out and "missing: node2" in out, out
    assert "rendezvous timed out after 4 s" in out and "missing: node2" in out, out
    # below MIN after a loss: the survivor waits, then fails clearly
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(2, port, "2:3", 1, ["hold"], d,
                 extra=["--rdzv-conf", "join_timeout=3,last_call_timeout=1"])
    try:
        lt.wait_until(lambda: len(records(d, 0)) == 2, 60, "round 0")
        ags[1].signal(signal.SIGKILL)
        rc = ags[0].wait(60)
        out = ags[0].output()
        assert rc != 0, out
        assert "1 of 2..3 nodes joined" in out, out
    finally:
        for p in ags:
            p.kill()


def test_directory_argument():
    # The fingerprint hashes the program; a directory among its arguments
    # (an output or data directory) is not hashed and fails nothing.
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = []
    try:
        for i in (1, 2):
            ags.append(lt.launch(
                ["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:%d" % port,
                 "--rdzv-id", "dirarg", "--local-addr", "127.0.0.%d" % i,
                 "--rdzv-conf", "join_timeout=60", "--no-python", "/bin/true", d],
                env={"LAUNCH_HOSTNAME": "node%d" % i}, name="agent%d" % i))
        assert finish_all(ags) == [0, 0], [a.output() for a in ags]
    finally:
        for a in ags:
            a.kill()


def test_program_fingerprint():
    # The fingerprint hashes the program a worker runs, here the script of
    # `python -u train.py`, never its arguments: each node's own data shard
    # (./data.bin, relative to its directory) fails nothing, and a script
    # that differs is refused by name.
    d = tempfile.mkdtemp()
    with open(WORKER) as f:
        script = f.read()

    def start(tag, scripts, conf):
        port = lt.free_port()
        ags = []
        for i in (1, 2):
            cwd = tempfile.mkdtemp()
            with open(os.path.join(cwd, "train.py"), "w") as f:
                f.write(scripts[i - 1])
            with open(os.path.join(cwd, "data.bin"), "w") as f:
                f.write("shard %d\n" % i)
            ags.append(lt.Proc(
                [lt.launch_bin(), "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:%d" % port,
                 "--rdzv-id", tag, "--local-addr", "127.0.0.%d" % i, "--rdzv-conf", conf,
                 "--no-python", PY, "-u", "train.py", d, "ok", "--data", "./data.bin"],
                env={"LAUNCH_HOSTNAME": "node%d" % i}, name="agent%d" % i, cwd=cwd))
            time.sleep(0.5 if i == 1 else 0)
        return ags

    ags = start("shards", [script, script], "join_timeout=60")
    try:
        assert finish_all(ags) == [0, 0], [a.output() for a in ags]
    finally:
        for a in ags:
            a.kill()
    ags = start("scripts", [script, script + "# changed\n"], "join_timeout=5")
    try:
        rcs = finish_all(ags)
        out = ags[1].output()
        assert rcs[1] != 0 and "node2 differs from node 0 (node1)" in out, out
        assert "sha256.train.py" in out and "data.bin" not in out, out
    finally:
        for a in ags:
            a.kill()


def main():
    if len(sys.argv) > 1:  # one test by name
        globals()[sys.argv[1]]()
        return
    test_program_fingerprint()
    test_directory_argument()
    test_three_nodes()
    test_rendezvous_ranks()
    test_restart_counted_once()
    test_kill_agent()
    test_newcomer()
    test_static()
    test_node_rank_clash()
    test_mismatch()
    test_missed_heartbeats()
    test_below_min_and_waiting()
    test_shrink_progress()
    print("test_agent_multinode: ok")


if __name__ == "__main__":
    main()
