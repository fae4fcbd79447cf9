"""Host failover and rendezvous under loss (issue #28): repeated runs of the
cases of tests/test_agent_failover.py and tests/test_netns.py, medians.

    LAUNCH_BIN=build/bin/launch python3 bench/run_failover_bench.py [RUNS] [loopback]

(loopback: the failover cases alone, without the network namespaces)

failover: kill -9 of the agent hosting the server -> the last worker of the
new round started on the survivors (2 nodes 1:2, 3 nodes 2:3; 2 workers per
node, heartbeat 0.3 s; loopback); 4 nodes 2:4 with the host and the first
successor killed together. netns: 16 agents in 16 namespaces, 25 ms delay
on every eth0's egress (50 ms RTT; netem, or NFQUEUE and tests/nfq_delay)
with 2 % loss, the delay alone, the loss alone: start -> the last agent in
its round; the host of 3 partitioned by nftables,
cut -> the majority done under the successor (needs root; skipped
otherwise)."""
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py"))
import netns  # noqa: E402
import test_agent_failover as fo  # noqa: E402
import test_netns as tn  # noqa: E402


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for n, nnodes in ((2, "1:2"), (3, "2:3")):
        t = [fo.kill_host_and_watch(n, nnodes, "fob%d%d" % (n, i))[2] for i in range(runs)]
        print("failover %d nodes %s: median %.3f s, min %.3f, max %.3f (%d runs)"
              % (n, nnodes, statistics.median(t), min(t), max(t), runs))
    t = [fo.kill_host_and_successor("fobw%d" % i) for i in range(runs)]
    print("failover 4 nodes 2:4, the host and the first successor killed: median %.3f s, "
          "min %.3f, max %.3f (%d runs)" % (statistics.median(t), min(t), max(t), runs))
    if sys.argv[2:3] == ["loopback"]:
        return
    if netns.can_make():
        print("netns: skipped: " + netns.can_make())
        return
    t = [tn.test_partition_host() for _ in range(runs)]
    print("netns host partitioned, 3 nodes 1:3 (heartbeat 1 s): cut -> the majority "
          "finished round 1 under node1: median %.3f s, min %.3f, max %.3f (%d runs)"
          % (statistics.median(t), min(t), max(t), runs))
    t = [tn.test_partition_host_heals() for _ in range(runs)]
    print("netns host partition healed (heartbeat 1 s): heal -> all three in one round "
          "under node1: median %.3f s, min %.3f, max %.3f (%d runs)"
          % (statistics.median(t), min(t), max(t), runs))
    # 25 ms on every egress: 50 ms RTT between two nodes
    for delay, loss in ((25, 2), (25, 0), (0, 2)):
        formed, total = [], []
        for _ in range(runs):
            f, a, applied = tn.rendezvous_under_loss(16, delay_ms=delay, loss_pct=loss)
            formed.append(f)
            total.append(a)
        print("netns 16 nodes (%s): in round: median %.3f s, min %.3f, max %.3f; all "
              "done: median %.3f s (%d runs); load %.1f on %d cores"
              % (applied, statistics.median(formed), min(formed), max(formed),
                 statistics.median(total), runs, *netns.load()))


if __name__ == "__main__":
    main()
