"""--rdzv-backend etcd (issue #28): repeated runs of the host cases of
tests/test_etcd.py against a real 3-member etcd cluster on loopback, medians.

    LAUNCH_BIN=build/bin/launch python3 bench/run_etcd_bench.py [RUNS]

killed: kill -9 of the agent that hosts the store -> the last worker of the
new round started on the 2 survivors (3 nodes 2:3, 2 workers each,
heartbeat 0.3 s, lease_ttl 10 s: the dead agent's key is removed at once).
stopped: SIGSTOP of that agent -> the same, lease_ttl 5 s (etcd lets its
key go when its lease expires: bounded by lease_ttl)."""
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py"))
import test_etcd as te  # noqa: E402


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for name, case in (("killed", te.test_host_killed), ("stopped", te.test_host_stopped)):
        t = [case() for _ in range(runs)]
        print("etcd host %s, 3 nodes 2:3: median %.3f s, min %.3f, max %.3f (%d runs)"
              % (name, statistics.median(t), min(t), max(t), runs), flush=True)


if __name__ == "__main__":
    main()
