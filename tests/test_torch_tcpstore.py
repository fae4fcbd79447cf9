"""A real PyTorch TCPStore client (Debian's python3-torch 1.13, or 2.x where
installed) against `launch server`: every store call a trainer makes, a wait
woken by another client, a timeout, waits polled with short timeouts past
--max-waits, and gloo process groups rendezvousing through our server."""
import datetime
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest  # noqa: E402

launchtest.need_torch()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

T = datetime.timedelta


def client(port, timeout=10):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=T(seconds=timeout))


def check_ops(port):
    s = client(port)
    s.set("a", "hello")
    assert s.get("a") == b"hello"
    assert s.add("ctr", 5) == 5
    assert s.add("ctr", -2) == 3
    assert s.get("ctr") == b"3"
    assert s.compare_set("a", "hello", "bye") == b"bye"
    assert s.compare_set("a", "nope", "x") == b"bye"
    assert s.compare_set("fresh", "", "v") == b"v"
    if hasattr(s, "check"):  # not exposed to Python in 1.13
        assert s.check(["a", "ctr"]) is True
        assert s.check(["a", "missing"]) is False
    n = s.num_keys()
    assert n == 3, n
    assert s.delete_key("fresh") is True
    assert s.delete_key("fresh") is False
    assert s.num_keys() == n - 1
    s.wait(["a", "ctr"])
    # a wait woken by another client's set
    def later():
        time.sleep(0.3)
        client(port).set("late", "1")
    t = threading.Thread(target=later)
    t.start()
    t0 = time.time()
    s.wait(["late"], T(seconds=10))
    assert time.time() - t0 >= 0.25
    t.join()
    assert s.get("late") == b"1"
    # a timeout raises
    s2 = client(port)
    t0 = time.time()
    try:
        s2.wait(["never"], T(milliseconds=500))
        raise AssertionError("wait did not time out")
    except RuntimeError:
        pass
    assert time.time() - t0 < 5


WORKER = r"""
import datetime, sys, torch, torch.distributed as dist
rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=30))
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)
print("rank=%d allreduce=%g" % (rank, x.item()), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def check_gloo(port, world=4):
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(r), str(world), str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=120)
            outs.append(out)
            assert p.returncode == 0, out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    want = world * (world + 1) / 2
    for r, out in enumerate(outs):
        assert ("rank=%d allreduce=%g" % (r, want)) in out, out


def check_polled_waits(port, n=1100):
    """A wait polled with a short timeout, more times than --max-waits
    (1024): 1.13 has no CANCEL_WAIT, so each timed-out wait stayed on the
    server and the 1,025th closed the connection; the store still answers
    (a wait its client gave up on ends with its next request)."""
    s = client(port)
    timed_out = 0
    for i in range(n):
        try:
            s.wait(["never-%d" % i], T(milliseconds=1))
        except RuntimeError:
            timed_out += 1
    assert timed_out == n, timed_out
    s.set("after-polls", "1")
    assert s.get("after-polls") == b"1"


def check_idle_client(port, idle):
    """A client that connects, then loads data for longer than the handshake
    timeout before its first request (a 1.13 client sends nothing until then,
    and its watch socket never sends): its store still answers."""
    s = client(port)
    time.sleep(idle)
    s.set("after-idle", "1")
    assert s.get("after-idle") == b"1"
    assert s.add("after-idle-ctr", 2) == 2


def main():
    with launchtest.Server("--handshake-timeout", "1s") as srv:
        check_idle_client(srv.port, 2.5)
        idle_log = srv.logtext()
    assert "closing" not in idle_log, idle_log
    with launchtest.Server() as srv:
        check_ops(srv.port)
        check_polled_waits(srv.port)
        check_gloo(srv.port)
        log = srv.logtext()
    print("torch %s: a client idle past the handshake timeout, TCPStore ops and "
          "gloo all_reduce through launch server: ok" % torch.__version__)
    assert "error" not in log.lower(), log


if __name__ == "__main__":
    main()
