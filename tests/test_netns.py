"""Agents in network namespaces under real network faults (tests/py/netns.py):
a 16-node rendezvous with 2 % loss and 50 ms RTT (25 ms on each node's
egress: tc netem where the kernel has it; else, as on the development VM,
an iptables NFQUEUE rule and tests/nfq_delay holding each packet, with the
loss by nftables; the delay is checked by a connect's round trip and its
mechanism printed in the figure line), one worker node of an elastic job partitioned away (named, the job
re-forms without it; it waits, and rejoins when the network heals), the host partitioned from the others (they take over,
it waits: no split brain; when the network heals it joins them), an agent
restarted on its node while its old connection lingers on the host, and the
host's link going down and up (the job carries on). Skips (77) where namespaces cannot be made. Times are printed as
`figure:` lines for docs/BENCHMARKS.md, never asserted.

LAUNCH_NETNS_NODES sets the node count of the first case (16)."""
import os
import re
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402
import netns  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "py", "worker.py")
PY = sys.executable
PORT = 29400


def agent(c, i, nnodes, conf, prog, run_id):
    args = ["--nnodes", nnodes, "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", "%s:%d" % (c.addr(0), PORT),
            "--rdzv-id", run_id, "--local-addr", c.addr(i), "--rdzv-conf", conf,
            "--stop-timeout", "5", "--no-python"] + prog
    return c.launch(i, args, env={"LAUNCH_HOSTNAME": "node%d" % i}, name="node%d" % i)


def test_rendezvous_under_loss():
    rendezvous_under_loss(int(os.environ.get("LAUNCH_NETNS_NODES", "16")))


def rendezvous_under_loss(n, delay_ms=25, loss_pct=2):
    """n agents in n namespaces running /bin/true; RET (the seconds until
    the last one was in its round, until all ended, what was applied)."""
    with netns.Cluster(n) as c:
        applied = [c.degrade(i, delay_ms=delay_ms, loss_pct=loss_pct) for i in range(n)]
        rtt = "RTT not measured"
        if delay_ms and "no delay" not in applied[0]:
            # every packet is held delay_ms on each side: a connect takes at
            # least two of them (what the delayer promises, not a speed)
            ms = c.rtt_ms(0, n - 1)
            assert ms[0] >= 2 * delay_ms - 0.5, (applied[0], ms)
            rtt = "connect RTT node0 -> node%d median %.1f ms" % (n - 1, ms[len(ms) // 2])
        t0 = time.time()
        ags = [agent(c, i, str(n), "join_timeout=120,last_call_timeout=1", ["/bin/true"],
                     "nn%d" % n) for i in range(n)]
        formed = {}
        deadline = t0 + 150
        while len(formed) < n and time.time() < deadline:
            for i, a in enumerate(ags):
                if i not in formed and "round 0 of job" in a.output():
                    formed[i] = time.time() - t0
                if i not in formed and not a.running():
                    raise AssertionError("node%d ended before its round:\n%s" % (i, a.output()))
            time.sleep(0.02)
        rcs = [a.wait(120) for a in ags]
        total = time.time() - t0
        assert rcs == [0] * n, [(i, a.output()) for i, a in enumerate(ags) if a.proc.returncode]
        assert len(formed) == n
        # every node got its own node rank of n
        ranks = set()
        for a in ags:
            line = [x for x in a.output().splitlines() if "round 0 of job" in x][0]
            ranks.add(line.split(": node ")[1].split(" of ")[0])
            assert (" of %d, ranks" % n) in line, line
        assert ranks == set(str(i) for i in range(n)), ranks
        load, cores = netns.load()
        print("figure: netns rendezvous, %d nodes, each eth0: %s (%s); last node in "
              "its round %.2f s after the start, all agents done %.2f s; load %.1f on "
              "%d cores" % (n, applied[0], rtt, max(formed.values()), total, load, cores))
        return max(formed.values()), total, applied[0]


def three(c, d, nnodes, conf, run_id, mode="hold"):
    """3 agents of `hold` workers, at work in round 0, which waits for all
    three (lt.round0_last_call in place of conf's last call)."""
    conf = re.sub(r"last_call_timeout=[0-9.]+", "last_call_timeout=%d"
                  % lt.round0_last_call(3, nnodes), conf)
    ags = [agent(c, i, nnodes, conf, [PY, WORKER, d, mode], run_id) for i in range(3)]
    lt.wait_until(lambda: len(lt.records(d, 0)) == 3, 60, "3 workers of round 0")
    return ags


def wait_full_round(d, after, limit, what, ags):
    """Until a round later than `after` has the workers of all the nodes
    of `ags` (one each); their consoles in the error when none comes."""
    def full():
        last = max(int(r["env"]["LAUNCH_ROUND"]) for r in lt.records(d))
        return last > after and len(lt.records(d, last)) == len(ags)
    try:
        lt.wait_until(full, limit, what)
    except AssertionError:
        raise AssertionError("\n".join(a.output() for a in ags))


def test_partition_worker_node():
    """node2 of a 2:3 job cut off (nftables): the host names the lost node
    and the two others run round 1 without it. node2 hears nothing: to it
    the host went silent; it passes the unreachable successor over, hosts
    alone, needs a majority and waits (never training alone). When the
    network heals, it finds the job under the old host and joins it: the
    job re-forms with all three."""
    d = tempfile.mkdtemp()
    with netns.Cluster(3) as c:
        ags = three(c, d, "2:3", "join_timeout=120,last_call_timeout=1,heartbeat=0.3,"
                    "read_timeout=8", "part", mode="hold-all")
        t0 = time.time()
        c.partition(2)
        lt.wait_until(lambda: len(lt.records(d, 1)) == 2, 60, "round 1 on node0 and node1")
        took = time.time() - t0
        out0 = ags[0].output()
        assert "lost node node2" in out0, out0
        gen1 = lt.records(d, 1)
        for r in gen1:
            assert r["env"]["WORLD_SIZE"] == "2" and r["env"]["LAUNCH_HOSTNAME"] != "node2"
        lt.wait_until(lambda: "a new round needs a majority (2)" in ags[2].output(), 60,
                      "node2 to say why it waits")
        assert ags[2].running(), ags[2].output()
        assert not [r for r in lt.records(d) if r["env"]["LAUNCH_HOSTNAME"] == "node2"
                    and r["env"]["LAUNCH_ROUND"] != "0"], "node2 trained alone"
        t1 = time.time()
        c.heal(2)
        wait_full_round(d, 1, 90, "a round with node2 again", ags)
        back = time.time() - t1
        assert "runs on under %s:%d (round 1)" % (c.addr(0), PORT) in ags[2].output(), \
            ags[2].output()
        open(os.path.join(d, "release"), "w").close()
        assert [a.wait(60) for a in ags] == [0, 0, 0], [a.output() for a in ags]
        print("figure: netns partition of a worker node (heartbeat 0.3 s): the "
              "two others in round 1 %.2f s after the cut; node2 in a round again "
              "%.2f s after the heal" % (took, back))


def test_partition_two_of_five():
    """Two worker nodes of a 1:5 job cut off (each alone): the host and two
    others, a majority, run round 1. Each cut-off node hears nothing, walks
    the successor list (none answers), hosts alone, needs a majority (3)
    and waits: neither trains, although --nnodes 1:5 would allow one node.
    When the network heals, both find the job under the host and join it:
    one round with all five."""
    d = tempfile.mkdtemp()
    # a last call of 15 s: round 0 waits for all five (it forms when the
    # fifth joins), not one slow to start left to round 1
    conf = "join_timeout=180,last_call_timeout=15,heartbeat=1"
    with netns.Cluster(5) as c:
        ags = [agent(c, i, "1:5", conf, [PY, WORKER, d, "hold-all"], "five")
               for i in range(5)]
        lt.wait_until(lambda: len(lt.records(d, 0)) == 5, 60, "5 workers of round 0")
        c.partition(3)
        c.partition(4)
        lt.wait_until(lambda: len(lt.records(d, 1)) == 3, 60, "round 1 on nodes 0-2")
        for i in (3, 4):
            lt.wait_until(lambda: "a new round needs a majority (3)" in ags[i].output(),
                          120, "node%d to say why it waits" % i)
        assert not [r for r in lt.records(d) if r["env"]["LAUNCH_ROUND"] != "0" and
                    r["env"]["LAUNCH_HOSTNAME"] in ("node3", "node4")], "a minority trained"
        t0 = time.time()
        c.heal(3)
        c.heal(4)
        wait_full_round(d, 1, 120, "a round with all five", ags)
        took = time.time() - t0
        last = max(int(r["env"]["LAUNCH_ROUND"]) for r in lt.records(d))
        assert all(r["env"]["MASTER_ADDR"] == c.addr(0) for r in lt.records(d, last))
        open(os.path.join(d, "release"), "w").close()
        assert [a.wait(60) for a in ags] == [0] * 5, [a.output() for a in ags]
        print("figure: netns, two of five nodes cut off, then healed (heartbeat 1 s): "
              "all five in one round %.2f s after the heal" % took)


def test_partition_host():
    """The host cut off from the two others (nftables, the links stay up):
    they are a majority of 3, node1 hosts at its own address and both
    finish round 1; the host's side, alone, waits and says why, and never
    trains again (no split brain)."""
    d = tempfile.mkdtemp()
    with netns.Cluster(3) as c:
        ags = three(c, d, "1:3", "join_timeout=60,last_call_timeout=1,heartbeat=1", "phost")
        t0 = time.time()
        c.partition(0)
        assert [a.wait(60) for a in ags[1:]] == [0, 0], [a.output() for a in ags]
        took = time.time() - t0
        for a in ags[1:]:
            out = a.output()
            assert "lost: it went silent; the new host is node1 (%s:%d)" % (c.addr(1), PORT) \
                in out, out
        gen1 = lt.records(d, 1)
        assert len(gen1) == 2 and all(r["env"]["MASTER_ADDR"] == c.addr(1) for r in gen1), gen1
        lt.wait_until(lambda: "a new round needs a majority (2)" in ags[0].output(), 30,
                      "the host to say why it waits")
        assert ags[0].running(), ags[0].output()
        assert "node0" not in [r["env"]["LAUNCH_HOSTNAME"] for r in lt.records(d)
                               if r["env"]["LAUNCH_ROUND"] != "0"]
        c.heal(0)
        print("figure: netns partition of the host (heartbeat 1 s): the majority "
              "finished round 1 under node1 %.2f s after the cut" % took)
        return took


def test_partition_host_heals():
    """The host cut off, the two others go on under node1; when the network
    heals, the host (waiting alone) finds the job under node1 and joins it:
    the job re-forms with all three nodes there."""
    d = tempfile.mkdtemp()
    with netns.Cluster(3) as c:
        ags = three(c, d, "1:3", "join_timeout=60,last_call_timeout=1,heartbeat=1",
                    "heal", mode="hold-all")
        c.partition(0)
        lt.wait_until(lambda: len(lt.records(d, 1)) == 2, 60, "round 1 under node1")
        lt.wait_until(lambda: "a new round needs a majority (2)" in ags[0].output(), 30,
                      "the host to wait")
        t0 = time.time()
        c.heal(0)
        try:
            lt.wait_until(lambda: len(lt.records(d, 2)) == 3, 60, "round 2 with all three")
        except AssertionError:
            raise AssertionError("\n".join(a.output() for a in ags))
        took = time.time() - t0
        gen2 = lt.records(d, 2)
        assert all(r["env"]["MASTER_ADDR"] == c.addr(1) for r in gen2), gen2
        assert "runs on under %s:%d (round 1)" % (c.addr(1), PORT) in ags[0].output(), \
            ags[0].output()
        open(os.path.join(d, "release"), "w").close()
        assert [a.wait(60) for a in ags] == [0, 0, 0], [a.output() for a in ags]
        print("figure: netns partition of the host healed: all three in one round "
              "again %.2f s after the heal" % took)
        return took


def test_restarted_agent_old_connection_lingers():
    """node2's agent is killed while cut off (its connection's end never
    reaches the host: it lingers there) and started again at once after the
    heal, as a scheduler would: the new agent is taken into the job, which
    re-forms with three nodes, and every node finishes."""
    d = tempfile.mkdtemp()
    conf = "join_timeout=60,last_call_timeout=1,heartbeat=1"
    with netns.Cluster(3) as c:
        ags = three(c, d, "2:3", conf, "linger", mode="hold-all")
        c.partition(2)
        ags[2].signal(signal.SIGKILL)
        ags[2].wait(10)
        c.heal(2)
        new = agent(c, 2, "2:3", conf, [PY, WORKER, d, "hold-all"], "linger")
        wait_full_round(d, 0, 60, "a round with the new agent", ags[:2] + [new])
        last = max(int(r["env"]["LAUNCH_ROUND"]) for r in lt.records(d))
        assert any(r["env"]["LAUNCH_HOSTNAME"] == "node2" for r in lt.records(d, last))
        open(os.path.join(d, "release"), "w").close()
        rcs = [a.wait(60) for a in (ags[0], ags[1], new)]
        assert rcs == [0, 0, 0], [a.output() for a in (ags[0], ags[1], new)]
        if "-v" in sys.argv:
            print(ags[0].output())


def test_host_link_flap():
    d = tempfile.mkdtemp()
    with netns.Cluster(2) as c:
        conf = "join_timeout=60,last_call_timeout=1,heartbeat=1"
        ags = [agent(c, i, "2", conf, [PY, WORKER, d, "hold"], "flap") for i in range(2)]
        lt.wait_until(lambda: len(lt.records(d, 0)) == 2, 60, "2 workers of round 0")
        # down for less than the silent-server bound (3 heartbeats): TCP
        # retransmits what was sent meanwhile, nothing restarts
        c.link(0, up=False)
        time.sleep(1.0)
        c.link(0, up=True)
        time.sleep(2.0)
        assert all(a.running() for a in ags), [a.output() for a in ags]
        open(os.path.join(d, "release"), "w").close()
        rcs = [a.wait(60) for a in ags]
        assert rcs == [0, 0], [a.output() for a in ags]
        assert len(lt.records(d, 1)) == 0, "a restart happened"
        for a in ags:
            assert "restarting" not in a.output(), a.output()


if __name__ == "__main__":
    netns.need_netns()
    cases = [test_rendezvous_under_loss, test_partition_worker_node,
             test_partition_two_of_five, test_partition_host,
             test_partition_host_heals, test_restarted_agent_old_connection_lingers,
             test_host_link_flap]
    only = sys.argv[1:]
    for t in cases:
        if only and t.__name__ not in only:
            continue
        print("== " + t.__name__, flush=True)
        t()
    print("ok")
