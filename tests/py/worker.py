"""A worker for launcher tests: records what it saw and behaves as told.

    worker.py OUTDIR MODE [ARG]

Every worker writes OUTDIR/w.<RANK>.<GENERATION>.<pid>.json with its
environment and argv, then:
    ok            exit 0
    fail-first N  exit N in generation 0, else 0
    fail N        always exit N
    fail-rank R N rank R exits N in generation 0 (others wait for a restart)
    hold          generation 0 waits (until killed or OUTDIR/release exists);
                  later generations exit 0
    hold-all      every generation waits (until killed or OUTDIR/release exists)
    forever       wait until killed
    trap-int      on SIGINT write OUTDIR/sigint.<RANK> and exit 3; else wait
    ignore-term   ignore SIGTERM and SIGINT; wait until killed
    slow-stop     generation 0 waits, and on SIGTERM takes 3 s to exit 0;
                  later generations exit 0
    spawn-child   start a child (sleep) and record its pid; wait
    chatty N      print N numbered lines on stdout and stderr, exit 0
"""
import json
import os
import signal
import subprocess
import sys
import time

outdir, mode = sys.argv[1], sys.argv[2]
arg = sys.argv[3:] 
rank = int(os.environ.get("RANK", "-1"))
# the generation: LAUNCH_ROUND counts every restart, a node joining or
# leaving too; TORCHELASTIC_RESTART_COUNT only those after failures
gen = int(os.environ.get("LAUNCH_ROUND", os.environ.get("TORCHELASTIC_RESTART_COUNT", "-1")))
rec = {"env": dict(os.environ), "argv": sys.argv, "pid": os.getpid(), "ppid": os.getppid()}
path = os.path.join(outdir, "w.%d.%d.%d.json" % (rank, gen, os.getpid()))
with open(path + ".tmp", "w") as f:
    json.dump(rec, f)
os.rename(path + ".tmp", path)


def wait_release(limit=120):
    deadline = time.time() + limit
    while time.time() < deadline:
        if os.path.exists(os.path.join(outdir, "release")):
            return
        time.sleep(0.05)


if mode == "ok":
    sys.exit(0)
elif mode == "fail-first":
    sys.exit(int(arg[0]) if gen == 0 else 0)
elif mode == "fail":
    print("worker %d failing on purpose with %s" % (rank, arg[0]), file=sys.stderr, flush=True)
    sys.exit(int(arg[0]))
elif mode == "fail-rank":
    if gen == 0:
        if rank == int(arg[0]):
            time.sleep(0.3)
            print("rank %d: something went wrong" % rank, file=sys.stderr, flush=True)
            sys.exit(int(arg[1]))
        wait_release()
    sys.exit(0)
elif mode == "hold":
    if gen == 0:
        wait_release()
    sys.exit(0)
elif mode == "hold-all":
    wait_release()
    sys.exit(0)
elif mode == "forever":
    while True:
        time.sleep(1)
elif mode == "trap-int":
    def on_int(s, f):
        open(os.path.join(outdir, "sigint.%d" % rank), "w").close()
        sys.exit(3)
    signal.signal(signal.SIGINT, on_int)
    while True:
        time.sleep(0.05)
elif mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    open(os.path.join(outdir, "ready.%d" % rank), "w").close()
    while True:
        time.sleep(1)
elif mode == "slow-stop":
    if gen == 0:
        def on_term(s, f):
            time.sleep(3)
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        wait_release()
    sys.exit(0)
elif mode == "spawn-child":
    c = subprocess.Popen(["sleep", "1000"])
    with open(os.path.join(outdir, "child.%d" % rank), "w") as f:
        f.write(str(c.pid))
    while True:
        time.sleep(1)
elif mode == "chatty":
    for i in range(int(arg[0])):
        print("out %d line %d" % (rank, i), flush=True)
        print("err %d line %d" % (rank, i), file=sys.stderr, flush=True)
    sys.exit(0)
else:
    print("unknown mode " + mode, file=sys.stderr)
    sys.exit(2)
