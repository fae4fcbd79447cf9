"""Host failover in the embedded mode (issue #28, docs/rendezvous.md#host-failover):
`kill -9` of the agent that hosts the server does not end the job. The first
successor (by node rank) hosts the server at its own address, the others join
it, the job re-forms without the lost node, and the workers' store moves with
it (MASTER_ADDR, MASTER_PORT, LAUNCH_RDZV_ENDPOINT). Agents on loopback:
127.0.0.x stand for hosts. The time from the kill to the first worker of the
new round is printed as a `figure:` line, never asserted."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "py", "worker.py")
PY = sys.executable


def agents(n, port, nnodes, d, run_id, extra=(), first=1, mode="hold", last_call=1):
    """Agents node<first>..node<n> on 127.0.0.<i>; node1's address is the
    endpoint's: it hosts. last_call: last_call_timeout, seconds."""
    out = []
    for i in range(first, n + 1):
        args = ["--nnodes", nnodes, "--nproc-per-node", "2",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:%d" % port,
                "--rdzv-id", run_id, "--local-addr", "127.0.0.%d" % i,
                "--rdzv-conf", "join_timeout=60,last_call_timeout=%d,heartbeat=0.3" % last_call,
                "--stop-timeout", "5", "--event-log", os.path.join(d, "events%d.jsonl" % i)
                ] + list(extra) + ["--no-python", PY, WORKER, d, mode]
        out.append(lt.launch(args, env={"LAUNCH_HOSTNAME": "node%d" % i}, name="agent%d" % i))
    return out


class Job:
    """n agents (node1 hosts), started and at work in round 0 on entry;
    every agent continued and killed, by pid, on exit."""

    def __init__(self, n, nnodes, run_id, extra=(), mode="hold"):
        self.d = tempfile.mkdtemp()
        self.port = lt.free_port()
        self.ags = agents(n, self.port, nnodes, self.d, run_id, extra, mode=mode,
                          last_call=lt.round0_last_call(n, nnodes))
        self.n = n

    def __enter__(self):
        try:
            lt.wait_until(lambda: len(lt.records(self.d, 0)) == 2 * self.n, 60,
                          "round 0's workers")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *a):
        for p in self.ags:
            p.signal(signal.SIGCONT)
            p.kill()


def kill_host_and_watch(n, nnodes, run_id, extra=()):
    with Job(n, nnodes, run_id, extra) as j:
        d, port, ags = j.d, j.port, j.ags
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
        # an event on every survivor (docs/events.md)
        for i in range(2, n + 1):
            with open(os.path.join(d, "events%d.jsonl" % i)) as f:
                evs = [json.loads(x) for x in f if '"host_failover"' in x]
            assert len(evs) == 1 and evs[0]["new_host"] == "node2", evs
            assert evs[0]["lost_host"] == "node1" and evs[0]["here"] == (i == 2), evs
        print("figure: host failover, %d nodes (%s, 2 workers each, heartbeat 0.3 s): "
              "kill -9 of the host -> the new round's last worker started in %.2f s"
              % (n, nnodes, took))
        return gen1, outs, took


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


def test_stopped_host_no_split_brain():
    """A host stopped (SIGSTOP) for longer than the silent-server bound: the
    two others are a majority of 3 and re-form under node2; the host,
    resumed, finds itself alone, and a round needs a majority: it waits and
    never trains again on its own, although --nnodes 1:3 would allow one."""
    with Job(3, "1:3", "fostop") as j:
        d, port, ags = j.d, j.port, j.ags
        ags[0].signal(signal.SIGSTOP)
        try:
            lt.wait_until(lambda: len(lt.records(d, 1)) == 4, 60,
                          "round 1 on node2 and node3")
        finally:
            ags[0].signal(signal.SIGCONT)
        assert [a.wait(60) for a in ags[1:]] == [0, 0], [a.output() for a in ags]
        for o in (a.output() for a in ags[1:]):
            assert "rendezvous host node1 (127.0.0.1:%d) lost: it went silent" % port in o, o
        lt.wait_until(lambda: "a new round needs a majority (2)" in ags[0].output(), 30,
                      "the resumed host to say why it waits")
        time.sleep(1)
        assert ags[0].running(), ags[0].output()
        hosts = [r["env"]["LAUNCH_HOSTNAME"] for r in lt.records(d) if
                 r["env"]["LAUNCH_ROUND"] != "0"]
        assert "node1" not in hosts, hosts


def test_two_nodes_stopped_host_minority():
    """2 nodes: the one left is no majority; it takes nothing over, says
    why and waits (the host may still run). Once the host is resumed, the
    waiting node finds the job there and both re-form and finish."""
    with Job(2, "1:2", "fomin") as j:
        d, ags = j.d, j.ags
        ags[0].signal(signal.SIGSTOP)
        try:
            lt.wait_until(lambda: "stopping the workers and waiting" in ags[1].output(),
                          60, "node2 to say why it waits")
        finally:
            ags[0].signal(signal.SIGCONT)
        out = ags[1].output()
        assert "no majority of the last round's 2" in out, out
        assert "new host" not in out, out
        lt.wait_until(lambda: len(lt.records(d, 1)) == 4, 60,
                      "round 1 with both nodes again")
        assert [a.wait(60) for a in ags] == [0, 0], [a.output() for a in ags]
        assert "job fomin runs on under 127.0.0.1:%d (round 0): joining it" % j.port \
            in ags[1].output(), ags[1].output()
        assert "new host" not in ags[0].output(), ags[0].output()


def test_four_nodes_kill_host_and_first_successor():
    """kill -9 of the host and of the first successor together: node3 does
    not reach node2 within the bound and hosts itself; node4 passes node2
    over the same way and joins node3; the job re-forms on the two and
    finishes."""
    return kill_host_and_successor("fo4")


def kill_host_and_successor(run_id):
    """RET the seconds from the kills to round 1's last worker started."""
    with Job(4, "2:4", run_id) as j:
        d, port, ags = j.d, j.port, j.ags
        t0 = time.time()
        ags[0].signal(signal.SIGKILL)
        ags[1].signal(signal.SIGKILL)
        ags[0].wait(10)
        ags[1].wait(10)
        lt.wait_until(lambda: len(lt.records(d, 1)) == 4, 90,
                      "round 1's workers on node3 and node4")
        took = time.time() - t0
        rcs = [a.wait(60) for a in ags[2:]]
        assert rcs == [0, 0], [a.output() for a in ags[2:]]
        for i, a in ((3, ags[2]), (4, ags[3])):
            out = a.output()
            assert "the new host is node2 (127.0.0.2:%d)" % port in out, out
            assert "successor node2 (127.0.0.2:%d) did not host" % port in out, out
            # passed over at the refused bound, not after the whole walk
            # bound: node2's agent is gone, and a live one would listen
            assert "every connection refused for 1.2 s (its agent is gone" in out, out
            assert "the new host is node3 (127.0.0.3:%d)%s" % (
                port, ", this node" if i == 3 else "") in out, out
        for r in lt.records(d, 1):
            env = r["env"]
            assert env["LAUNCH_HOSTNAME"] in ("node3", "node4"), env
            assert env["MASTER_ADDR"] == "127.0.0.3" and env["WORLD_SIZE"] == "4", env
        print("figure: host failover, 4 nodes (2:4, heartbeat 0.3 s, --stop-timeout 5): "
              "kill -9 of the host and the first successor -> the new round's last "
              "worker started in %.2f s (node2 passed over when it refused every "
              "connection for 0.9 + 0.3 s)" % took)
        return took


def kill_host_of_four(d, ags, before=None):
    """Round 0 of four nodes at work, then (after before()) kill -9 of the
    host: wait for round 1 on node2, node3 and node4 (their logs if not)."""
    lt.wait_until(lambda: len(lt.records(d, 0)) == 8, 60, "round 0's workers")
    if before:
        before()
    ags[0].signal(signal.SIGKILL)
    ags[0].wait(10)
    try:
        lt.wait_until(lambda: len(lt.records(d, 1)) == 6, 60,
                      "round 1 on node2, node3 and node4")
    except AssertionError:
        raise AssertionError("\n".join(a.output() for a in ags[1:]))


def test_slow_successor_is_not_passed_over():
    """kill -9 of the host while the first successor's workers take 3 s to
    stop (under --stop-timeout 5): the others find its port open from the
    moment it saw the loss (their connections wait there for its server),
    so none passes it over at the refused bound; it hosts round 1 with
    both, and nobody else hosts."""
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = (agents(1, port, "2:4", d, "foslow") +
           agents(2, port, "2:4", d, "foslow", first=2, mode="slow-stop") +
           agents(4, port, "2:4", d, "foslow", first=3))
    try:
        kill_host_of_four(d, ags)
        assert [a.wait(60) for a in ags[1:]] == [0, 0, 0], [a.output() for a in ags[1:]]
        for i, a in ((2, ags[1]), (3, ags[2]), (4, ags[3])):
            out = a.output()
            assert "the new host is node2 (127.0.0.2:%d)%s" % (
                port, ", this node" if i == 2 else "") in out, out
            assert "did not host" not in out, out
            assert "new host is node3" not in out and "new host is node4" not in out, out
        for r in lt.records(d, 1):
            assert r["env"]["MASTER_ADDR"] == "127.0.0.2", r["env"]
    finally:
        for p in ags:
            p.kill()


def test_successor_that_cannot_listen_passes_itself_over():
    """kill -9 of the host while something else holds the first successor's
    port (a socket that listens and never answers): node2 cannot open its
    port, says so and passes itself over, as the others do once node2's port
    does not answer within the walk bound (unsure: the round needs a
    majority); round 1 runs under node3 with all three, never under node2."""
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(4, port, "2:4", d, "fonolisten")
    squat = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        def hold_port():
            squat.bind(("127.0.0.2", port))
            squat.listen(16)
        kill_host_of_four(d, ags, hold_port)
        open(os.path.join(d, "release"), "w").close()
        assert [a.wait(60) for a in ags[1:]] == [0, 0, 0], [a.output() for a in ags[1:]]
        out2 = ags[1].output()
        assert "cannot listen on 127.0.0.2:%d" % port in out2, out2
        # its own move names the lost host and the one it moves to
        assert "rendezvous host node1 (127.0.0.1:%d) lost: its connection was closed; "\
            "the new host is node3 (127.0.0.3:%d); failover 1" % (port, port) in out2, out2
        for a in ags[1:]:
            assert "the new host is node3 (127.0.0.3:%d)" % port in a.output(), a.output()
        for r in lt.records(d, 1):
            assert r["env"]["MASTER_ADDR"] == "127.0.0.3", r["env"]
    finally:
        squat.close()
        for p in ags:
            p.kill()


def test_stopped_successor_resumes_after_the_walk():
    """1:4: the first successor is stopped (SIGSTOP) and the host killed;
    node3 and node4 pass node2 over and run round 1 under node3. node2,
    resumed, reads the closed connection: it stood still, so the others
    may have moved on without it; it hosts (it is first in its list) but
    its round needs a majority, it never trains alone although 1:4 allows
    one node, finds the job under node3 and joins it."""
    with Job(4, "1:4", "fosucc", mode="hold-all") as j:
        d, port, ags = j.d, j.port, j.ags
        ags[1].signal(signal.SIGSTOP)
        try:
            ags[0].signal(signal.SIGKILL)
            ags[0].wait(10)
            lt.wait_until(lambda: len(lt.records(d, 1)) == 4, 90,
                          "round 1 on node3 and node4")
        finally:
            ags[1].signal(signal.SIGCONT)

        def with_node2():
            last = max(int(r["env"]["LAUNCH_ROUND"]) for r in lt.records(d))
            return last > 1 and len(lt.records(d, last)) == 6
        try:
            lt.wait_until(with_node2, 90, "a round with node2, node3 and node4")
        except AssertionError:
            raise AssertionError("\n".join(a.output() for a in ags[1:]))
        alone = [r for r in lt.records(d) if r["env"]["LAUNCH_HOSTNAME"] == "node2" and
                 r["env"]["LAUNCH_ROUND"] != "0" and r["env"]["WORLD_SIZE"] != "6"]
        assert not alone, alone
        assert "runs on under 127.0.0.3:%d" % port in ags[1].output(), ags[1].output()
        open(os.path.join(d, "release"), "w").close()
        assert [a.wait(60) for a in ags[1:]] == [0, 0, 0], [a.output() for a in ags[1:]]


def test_static_stopped_host():
    """The issue's case: --nnodes 3 (no elastic range), the host stopped
    until the two others moved to node2 (there they wait for a third
    node), then resumed: it finds the job under node2 and joins it; every
    agent reaches the same decision, and the job carries on with all three."""
    with Job(3, "3", "fost3") as j:
        d, port, ags = j.d, j.port, j.ags
        ags[0].signal(signal.SIGSTOP)
        try:
            for a in ags[1:]:
                lt.wait_until(lambda: "the new host is node2" in a.output(), 60,
                              "the others to move to node2")
        finally:
            ags[0].signal(signal.SIGCONT)
        try:
            lt.wait_until(lambda: len(lt.records(d, 1)) == 6, 90, "round 1 with all three")
        except AssertionError:
            raise AssertionError("\n".join(a.output() for a in ags))
        assert [a.wait(60) for a in ags] == [0, 0, 0], [a.output() for a in ags]
        assert "runs on under 127.0.0.2:%d (round 0)" % port in ags[0].output(), \
            ags[0].output()
        for r in lt.records(d, 1):
            assert r["env"]["MASTER_ADDR"] == "127.0.0.2", r["env"]


def test_static_kill_host_replacement():
    """--nnodes 3: kill -9 of the host; the two others move to node2 and
    wait for a third node. A replacement agent started on node1 with the
    same command hosts a fresh server at the old endpoint; node2 finds it
    there and leaves word where the job runs; the replacement joins node2
    and the job re-forms there with three nodes and finishes."""
    with Job(3, "3", "forepl") as j:
        d, port, ags = j.d, j.port, j.ags
        ags[0].signal(signal.SIGKILL)
        ags[0].wait(10)
        for a in ags[1:]:
            lt.wait_until(lambda: "the new host is node2" in a.output(), 60,
                          "the others to move to node2")
        new = agents(1, port, "3", d, "forepl")[0]
        j.ags.append(new)
        try:
            lt.wait_until(lambda: len(lt.records(d, 1)) == 6, 90,
                          "round 1 with the replacement")
        except AssertionError:
            raise AssertionError("\n".join(a.output() for a in ags[1:] + [new]))
        rcs = [a.wait(60) for a in (ags[1], ags[2], new)]
        assert rcs == [0, 0, 0], [a.output() for a in (ags[1], ags[2], new)]
        assert "runs on under 127.0.0.2:%d (round 0), as its host there left word" \
            % port in new.output(), new.output()
        for r in lt.records(d, 1):
            assert r["env"]["MASTER_ADDR"] == "127.0.0.2", r["env"]
        assert sorted(r["env"]["LAUNCH_HOSTNAME"] for r in lt.records(d, 1)) == \
            ["node1", "node1", "node2", "node2", "node3", "node3"]


def test_dropped_node_rejoins_live_host():
    """A node stopped long enough to be dropped reads the closed connection
    when it resumes: the host is alive (it answers), so it joins it again
    rather than taking over; the job re-forms with both nodes."""
    with Job(2, "1:2", "forejoin") as j:
        d, ags = j.d, j.ags
        ags[1].signal(signal.SIGSTOP)
        lt.wait_until(lambda: "missed 3 heartbeats" in ags[0].output(), 30, "the drop")
        ags[1].signal(signal.SIGCONT)
        assert [a.wait(60) for a in ags] == [0, 0], [a.output() for a in ags]
        out = ags[1].output()
        assert "answers: joining it again" in out and "new host" not in out, out
        last = max(int(r["env"]["LAUNCH_ROUND"]) for r in lt.records(d))
        assert len(lt.records(d, last)) == 4, lt.records(d, last)


SET_KEY = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
c = ctypes.c_void_p()
rc = lib.rdzv_connect_from_env(ctypes.byref(c))
assert rc == 0, rc
val = sys.argv[3].encode()
rc = lib.rdzv_set(c, sys.argv[2].encode(), val, ctypes.c_size_t(len(val)), 10000)
lib.rdzv_close(c)
sys.exit(0 if rc == 0 else 1)
"""


def store_set(port, run_id, key, value):
    """key = value in job run_id's store at 127.0.0.1:port, through
    librdzv (ctypes; with the sanitizers' runtimes preloaded when the
    library was built with them)."""
    lib = os.path.join(os.environ.get("LAUNCH_BUILD_DIR", os.path.join(
        os.path.dirname(os.path.abspath(lt.launch_bin())), "..")), "lib", "librdzv.so")
    if not os.path.exists(lib):
        lt.skip("no librdzv.so at " + lib)
    env = dict(os.environ, LAUNCH_RDZV_ENDPOINT="127.0.0.1:%d" % port,
               LAUNCH_RDZV_ID=run_id, ASAN_OPTIONS="detect_leaks=0")
    ldd = subprocess.run(["ldd", lib], stdout=subprocess.PIPE, text=True).stdout
    pre = [x.split("=>")[1].split()[0] for x in ldd.splitlines()
           if ("libasan" in x or "libubsan" in x) and "=>" in x]
    if pre:
        env["LD_PRELOAD"] = " ".join(pre)
    r = subprocess.run([PY, "-c", SET_KEY, lib, key, value], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout


def test_moved_key_not_an_address():
    """The key a new host reads to find where the job moved holds garbage
    (a worker or a tool of the job wrote it): the fresh host says so,
    deletes it and goes on; the job forms when its second node comes."""
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = agents(1, port, "2", d, "fomk")
    try:
        lt.wait_until(lambda: "waiting for nodes of job fomk" in ags[0].output(), 30,
                      "node1 to wait for node2")
        store_set(port, "fomk", "launch/moved_to", "not an address!")
        lt.wait_until(lambda: "holds no address" in ags[0].output(), 30,
                      "node1 to refuse the key")
        assert ags[0].running(), ags[0].output()
        ags += agents(2, port, "2", d, "fomk", first=2)
        lt.wait_until(lambda: len(lt.records(d, 0)) == 4, 60, "round 0 with both nodes")
        open(os.path.join(d, "release"), "w").close()
        assert [a.wait(60) for a in ags] == [0, 0], [a.output() for a in ags]
        assert ags[0].output().count("holds no address") == 1, ags[0].output()
    finally:
        for a in ags:
            a.kill()


if __name__ == "__main__":
    only = sys.argv[1:]
    for t in (test_two_nodes_kill_host, test_three_nodes_kill_host,
              test_checkpoint_agreement_after_failover, test_stopped_host_no_split_brain,
              test_two_nodes_stopped_host_minority, test_dropped_node_rejoins_live_host,
              test_four_nodes_kill_host_and_first_successor,
              test_slow_successor_is_not_passed_over,
              test_successor_that_cannot_listen_passes_itself_over,
              test_stopped_successor_resumes_after_the_walk, test_static_stopped_host,
              test_static_kill_host_replacement, test_moved_key_not_an_address):
        if only and t.__name__ not in only:
            continue
        print("== " + t.__name__, flush=True)
        t()
    print("ok")
