"""A restart whose workers saved a step on their way out (docs/checkpoints.md:
the agent commits their completion files after they stopped, before the
next round) while the host that runs the store goes silent (SIGSTOP): the
failover must not wait for that commit, which talks to the silent host
(each store call would wait its whole timeout). 3 agents on loopback
(127.0.0.x stand for hosts), --nnodes 1:3, node1 hosts; every process is
ended by pid."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
import launchtest as lt  # noqa: E402

# Round 0: every rank is up, then rank 2 saves step-3 and fails; the
# others save step-3 on the restart's SIGTERM and exit once $OUT/go exists.
# Later rounds wait to be ended.
WORKER = r'''
if [ "$LAUNCH_ROUND" != 0 ]; then while :; do sleep 0.05; done; fi
save() {
  d="$LAUNCH_CKPT_DIR/step-3"; mkdir -p "$d"
  printf 'rank %s' "$RANK" > "$d/.rank-$RANK.tmp"; mv "$d/.rank-$RANK.tmp" "$d/rank-$RANK.bin"
  printf '{"size": 6}' > "$d/.rank-$RANK.tmp"; mv "$d/.rank-$RANK.tmp" "$d/rank-$RANK.done"
}
touch "$OUT/up-$RANK"
if [ "$RANK" = 2 ]; then
  for r in 0 1 3 4 5; do while [ ! -e "$OUT/up-$r" ]; do sleep 0.05; done; done
  save; exit 1
fi
trap 'save; while [ ! -e "$OUT/go" ]; do sleep 0.05; done; exit 0' TERM
while :; do sleep 0.05; done
'''


def main():
    d = tempfile.mkdtemp()
    ck, out = os.path.join(d, "ck"), os.path.join(d, "out")
    os.makedirs(out)
    port = lt.free_port()
    ags = []
    try:
        # round 0 waits for all three (lt.round0_last_call)
        conf = "join_timeout=60,last_call_timeout=%d,heartbeat=0.3" % \
            lt.round0_last_call(3, "1:3")
        for i in (1, 2, 3):
            ags.append(lt.launch(
                ["--nnodes", "1:3", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "ckfo",
                 "--local-addr", "127.0.0.%d" % i, "--max-restarts", "3",
                 "--rdzv-conf", conf,
                 "--stop-timeout", "5", "--ckpt-dir", ck,
                 "--no-python", "/bin/sh", "-c", WORKER],
                env=dict(os.environ, OUT=out, LAUNCH_HOSTNAME="node%d" % i),
                name="agent%d" % i))
        lt.wait_until(lambda: all("restarting the workers" in a.output() for a in ags),
                      60, "the restart on every node")
        lt.wait_until(lambda: all(os.path.exists(os.path.join(ck, "step-3", "rank-%d.done" % r))
                                  for r in range(6)), 30, "every rank's save")
        ags[0].signal(signal.SIGSTOP)
        t0 = time.time()
        open(os.path.join(out, "go"), "w").close()
        try:
            lt.wait_until(lambda: any("re-formed under the new host" in a.output()
                                      for a in ags[1:]), 60, "the survivors' new round")
        except AssertionError:
            for a in ags:
                print("---- %s\n%s" % (a.name, a.output()))
            raise
        finally:
            ags[0].signal(signal.SIGCONT)
        took = time.time() - t0
        print("figure: host stopped during the restart's commit -> the job re-formed "
              "under the new host in %.2f s" % took)
        # the silent bound is 1 s here (3 heartbeats); a store call's timeout 10 s
        assert took < 8, "the failover waited for the restart's commit on the " \
            "silent host (%.1f s):\n%s\n----\n%s" % (took, ags[1].output(), ags[2].output())
        print("ok: the failover did not wait for the restart's commit")
    finally:
        for a in ags:
            a.signal(signal.SIGCONT)
            a.kill()


if __name__ == "__main__":
    main()
