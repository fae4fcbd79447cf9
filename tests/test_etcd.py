"""--rdzv-backend etcd (issue #28, docs/rendezvous.md#etcd-backend) against a
real 3-member etcd cluster (Debian's etcd-server) on loopback: etcd elects
the host and holds the job's keys; the elected agent serves the workers'
store. Agents on loopback: 127.0.0.x stand for hosts.

(a) a 2-node job forms through etcd and finishes;
(b) the etcd leader is killed while one node waits for the other, and again
    while the workers run: the job carries on, without a restart;
(c) the agent that hosts the store is killed -9: the others find it dead
    (its kernel refuses them), remove its key (guarded by its revision),
    elect another and re-form there; the job finishes;
(d) every etcd member is killed: the agents say they wait; past the lease
    TTL they stop their workers; the members restarted, the job re-forms
    under the same host and finishes;
(e) the host agent is stopped (SIGSTOP): the others elect a new host when
    its lease expires; resumed, it leaves instead of training on;
(f) the host cut off from etcd alone: the others re-form without it, and it
    never starts workers of a round etcd did not record;
(g) the host's lease revoked under a 2-node job: the other node re-forms
    alone (etcd decides: no majority rule).

Every wait is on something observed (a worker's record, a line of an
agent, etcd's own status), never on a sleep."""
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "py", "worker.py")
PY = sys.executable
ETCD = "/usr/bin/etcd"


def b64(s):
    return base64.b64encode(s.encode()).decode()


def post(port, path, body, timeout=2):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class Etcd:
    """A 3-member etcd cluster on loopback, data under a mktemp -d (removed
    with the test's scratch directory); every member stopped by pid."""

    def __init__(self, n=3):
        self.d = tempfile.mkdtemp(prefix="etcd-")
        self.n = n
        self.client = [lt.free_port() for _ in range(n)]
        self.peer = [lt.free_port() for _ in range(n)]
        self.procs = [None] * n
        self.cluster = ",".join("m%d=http://127.0.0.1:%d" % (i + 1, self.peer[i])
                                for i in range(n))
        for i in range(n):
            self.start(i)
        self.wait_leader()

    def start(self, i):
        c = "http://127.0.0.1:%d" % self.client[i]
        p = "http://127.0.0.1:%d" % self.peer[i]
        self.procs[i] = lt.Proc(
            [ETCD, "--name", "m%d" % (i + 1), "--data-dir", os.path.join(self.d, "m%d" % (i + 1)),
             "--listen-client-urls", c, "--advertise-client-urls", c,
             "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
             "--initial-cluster", self.cluster, "--initial-cluster-state", "new",
             "--initial-cluster-token", os.path.basename(self.d),
             "--heartbeat-interval", "100", "--election-timeout", "1000"],
            name="etcd-m%d" % (i + 1))

    def endpoints(self):
        return ",".join("127.0.0.1:%d" % p for p in self.client)

    def status(self, i):
        try:
            return post(self.client[i], "/v3/maintenance/status", {})
        except Exception:
            return None

    def leader(self):
        """The index of the leader as a live member sees it, else None."""
        for i in range(self.n):
            if self.procs[i] is None or not self.procs[i].running():
                continue
            s = self.status(i)
            if s and s.get("leader") and s["leader"] != "0":
                for j in range(self.n):
                    if self.procs[j] and self.procs[j].running():
                        sj = self.status(j)
                        if sj and sj["header"]["member_id"] == s["leader"]:
                            return j
        return None

    def wait_leader(self, timeout=60):
        lt.wait_until(lambda: self.leader() is not None, timeout, "an etcd leader")
        return self.leader()

    def call(self, path, body):
        """POST body to the first live member that answers."""
        for i in range(self.n):
            if self.procs[i] and self.procs[i].running():
                try:
                    return post(self.client[i], path, body)
                except Exception:
                    continue
        raise AssertionError("no etcd member answers")

    def kv(self, key):
        """The key as etcd holds it (value, lease...), or None."""
        kvs = self.call("/v3/kv/range", {"key": b64(key)}).get("kvs") or []
        return kvs[0] if kvs else None

    def kv_at(self, i, key):
        """The key as member i holds it, or None."""
        kvs = post(self.client[i], "/v3/kv/range", {"key": b64(key)}).get("kvs") or []
        return kvs[0] if kvs else None

    def get(self, key):
        try:
            kv = self.kv(key)
        except AssertionError:
            return None
        return base64.b64decode(kv["value"]).decode() if kv else None

    def delete(self, key):
        return self.call("/v3/kv/deleterange", {"key": b64(key)})

    def hand_over(self, i, j):
        """Ask leader i to hand its leadership to member j (tried once)."""
        st = self.status(j)
        if st:
            try:
                post(self.client[i], "/v3/maintenance/transfer-leadership",
                     {"targetID": st["header"]["member_id"]}, timeout=10)
            except Exception:
                pass

    def stop_follower(self, i, timeout=60):
        """SIGSTOP member i while another member leads: before etcd 3.4.30
        (Debian's is 3.4.23), a leader stopped past a lease TTL, when it
        resumes, revokes every lease it saw last, live ones too, before it
        learns it is no longer the leader (etcd issue 15247): the others'
        keys would go, which no agent can help. Leadership moves off i
        first; the others still name another leader after the stop."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            time.sleep(0.02)
            me = self.status(i)
            if not me or me.get("leader") in (None, "0"):
                continue
            me_id = me["header"]["member_id"]
            others = [j for j in range(self.n) if j != i and self.procs[j]
                      and self.procs[j].running()]
            if me["leader"] == me_id:
                self.hand_over(i, others[0])
                continue
            self.procs[i].signal(signal.SIGSTOP)
            seen = [self.status(j) for j in others]
            if all(s and s.get("leader") not in (None, "0", me_id) for s in seen):
                return
            self.procs[i].signal(signal.SIGCONT)
        raise AssertionError("etcd member m%d stays the leader" % (i + 1))

    def lead_elsewhere(self, i, timeout=60):
        """Leadership off member i, as seen by every member (a leader
        elected later extends every lease by an election timeout)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            ld = self.leader()
            if ld is not None and ld != i:
                return
            if ld == i:
                self.hand_over(i, (i + 1) % self.n)
            time.sleep(0.05)
        raise AssertionError("etcd member m%d stays the leader" % (i + 1))

    def revoke(self, lease):
        return self.call("/v3/lease/revoke", {"ID": lease})

    def kill(self, i, sig=signal.SIGKILL):
        self.procs[i].signal(sig)
        self.procs[i].wait(30)

    def close(self):
        for p in self.procs:
            if p:
                p.kill()


def agents(n, ep, nnodes, d, run_id, port, mode="hold", first=1, extra=(), ttl=5,
           env=None, last_call=1):
    """n agents node<first>... of job run_id; ttl: lease_ttl, short where a
    case waits for a lease to expire, else 10 s (a loaded machine may
    delay renewals: a lost lease would restart the job); env: more
    environment; last_call: last_call_timeout, seconds (longer where agents
    started one after the other must all be in round 0)."""
    out = []
    for i in range(first, first + n):
        args = ["--nnodes", nnodes, "--nproc-per-node", "2",
                "--rdzv-backend", "etcd", "--rdzv-endpoint", ep,
                "--rdzv-id", run_id, "--local-addr", "127.0.0.%d" % i,
                "--rdzv-conf", "join_timeout=60,last_call_timeout=%g,heartbeat=0.3,"
                               "lease_ttl=%d,store_port=%d" % (last_call, ttl, port),
                "--stop-timeout", "5"] + list(extra) + \
               ["--no-python", PY, WORKER, d, mode]
        out.append(lt.launch(args, env=dict(env or {}, LAUNCH_HOSTNAME="node%d" % i),
                             name="agent%d" % i))
    return out


@contextlib.contextmanager
def etcd_job(n, nnodes, run_id, mode="hold", ttl=5, extra=(), env=None):
    """A fresh cluster and n agents of job run_id; every process ended, by
    pid, on the way out. Yields (cluster, worker dir, store port, agents).
    Round 0 waits for all n where they are the job's most nodes
    (lt.round0_last_call)."""
    e = Etcd()
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = []
    last_call = lt.round0_last_call(n, nnodes)
    try:
        ags += agents(n, e.endpoints(), nnodes, d, run_id, port, mode=mode, ttl=ttl,
                      extra=extra, env=env, last_call=last_call)
        yield e, d, port, ags
    except BaseException:
        # what each agent said is what tells a failure apart
        for a in ags:
            print("--- %s:\n%s" % (a.name, a.output()[-6000:]), flush=True)
        raise
    finally:
        for a in ags:
            a.kill()
        e.close()


def host_of(e, run_id):
    v = e.get("/launch/%s/host" % run_id)
    return v.split() if v else None


def release(d):
    open(os.path.join(d, "release"), "w").close()


def test_forms_and_finishes():
    """(a) a 2-node job: etcd elects one agent; both join its server."""
    with etcd_job(2, "2", "ea", mode="ok", ttl=10) as (e, d, port, ags):
        rcs = [a.wait(120) for a in ags]
        assert rcs == [0, 0], [a.output() for a in ags]
        recs = lt.records(d, 0)
        assert len(recs) == 4, recs
        hosts = {r["env"]["MASTER_ADDR"] for r in recs}
        assert len(hosts) == 1 and hosts <= {"127.0.0.1", "127.0.0.2"}, hosts
        for r in recs:
            assert r["env"]["MASTER_PORT"] == str(port), r["env"]
            assert r["env"]["WORLD_SIZE"] == "4", r["env"]
        assert sorted(int(r["env"]["RANK"]) for r in recs) == [0, 1, 2, 3]
        outs = [a.output() for a in ags]
        assert sum("this node" in [l for l in o.splitlines() if "is hosted by" in l][0]
                   for o in outs) == 1, outs
        # the agents left: their keys went with their leases
        assert host_of(e, "ea") is None


def lease_ttls(e, run_id):
    """The remaining TTL of each agent's lease (its node key's)."""
    out = {}
    for i in range(e.n):
        if not (e.procs[i] and e.procs[i].running()):
            continue
        try:
            pre = "/launch/%s/nodes/" % run_id
            end = pre[:-1] + chr(ord(pre[-1]) + 1)
            r = post(e.client[i], "/v3/kv/range", {"key": b64(pre), "range_end": b64(end)})
            for kv in r.get("kvs") or []:
                t = post(e.client[i], "/v3/lease/timetolive", {"ID": kv["lease"]})
                out[kv["lease"]] = int(t.get("TTL", "-1"))
            return out
        except Exception:
            continue
    return out


def wait_renewed(e, run_id, n):
    """Each of the n agents renewed its lease since now (observed: its
    remaining TTL went up), so they talk to the cluster as it is now."""
    seen = {}

    def renewed():
        cur = lease_ttls(e, run_id)
        for k, v in cur.items():
            if k in seen and v > seen[k]:
                seen[k] = 1 << 30
            elif seen.get(k, 1 << 31) != 1 << 30:
                seen[k] = v
        return len(cur) == n and all(seen.get(k) == 1 << 30 for k in cur)
    lt.wait_until(renewed, 60, "every agent renewing its lease")


def test_leader_killed():
    """(b) the etcd leader killed during the rendezvous, and a new leader
    killed while the workers run: no restart, the job finishes."""
    with etcd_job(1, "2", "eb", ttl=10) as (e, d, port, ags):
        lt.wait_until(lambda: "is hosted by" in ags[0].output(), 60, "node1 elected")
        first = e.wait_leader()
        e.kill(first)
        ags += agents(1, e.endpoints(), "2", d, "eb", port, first=2, ttl=10)
        lt.wait_until(lambda: len(lt.records(d, 0)) == 4, 90, "round 0's workers")
        # back to 3 members (2 of 3 keep a quorum), then the leader again
        e.start(first)
        lt.wait_until(lambda: e.status(first) is not None, 60, "the member back")
        e.kill(e.wait_leader())
        e.wait_leader()
        wait_renewed(e, "eb", 2)
        release(d)
        rcs = [a.wait(120) for a in ags]
        assert rcs == [0, 0], [a.output() for a in ags]
        assert len(lt.records(d)) == 4, "a restart: %s" % [a.output() for a in ags]


def test_host_killed(run_id="ec", extra=()):
    """(c) kill -9 of the agent that hosts the store: the others find it
    dead, remove its key and elect one of them through etcd; the job
    re-forms there (round 1, 2 nodes) and finishes."""
    with etcd_job(3, "2:3", run_id, ttl=10, extra=extra) as (e, d, port, ags):
        lt.wait_until(lambda: len(lt.records(d, 0)) == 6, 90, "round 0's workers")
        h = host_of(e, run_id)
        assert h is not None
        dead = int(h[0].split(".")[-1]) - 1
        t0 = time.time()
        ags[dead].signal(signal.SIGKILL)
        ags[dead].wait(10)
        lt.wait_until(lambda: len(lt.records(d, 1)) == 4, 90, "round 1's workers")
        took = time.time() - t0
        print("figure: etcd backend, 3 nodes (2:3, 2 workers each, lease_ttl 10 s): "
              "kill -9 of the host -> the new round's last worker started in %.2f s"
              % took, flush=True)
        live = [a for i, a in enumerate(ags) if i != dead]
        rcs = [a.wait(120) for a in live]
        assert rcs == [0, 0], [a.output() for a in live]
        gen1 = lt.records(d, 1)
        addrs = {r["env"]["MASTER_ADDR"] for r in gen1}
        assert len(addrs) == 1 and h[0] not in addrs, (h, addrs)
        for r in gen1:
            assert r["env"]["WORLD_SIZE"] == "4", r["env"]
            assert r["env"]["LAUNCH_HOSTNAME"] != h[2], r["env"]
        for a in live:
            o = a.output()
            assert "rendezvous host" in o and "lost" in o, o
        if extra:
            return took, gen1, [a.output() for a in live]
        return took


def test_host_key_deleted():
    """The host key removed from etcd (what etcd does when it lets the
    host's lease go) under a 1-node job: nothing else tells the host, whose
    server and agent are fine, so its etcd watch must (LAUNCH_DEBUG=rounds
    names what the watch saw; the read of the key is only the fallback,
    off while the watch works). The host stops its workers and leaves the
    job (exit 75)."""
    with etcd_job(1, "1:2", "eg", ttl=10, env={"LAUNCH_DEBUG": "rounds"}) as (e, d, port, ags):
        lt.wait_until(lambda: len(lt.records(d, 0)) == 2, 90, "round 0's workers")
        assert host_of(e, "eg") is not None
        e.delete("/launch/eg/host")
        assert ags[0].wait(60) == 75, ags[0].output()
        out = ags[0].output()
        assert "etcd watch: the host key was deleted" in out, out
        assert "no longer holds job eg's host key in etcd" in out, out


def test_long_job_id():
    """A long job id (200 bytes) and another node's long host name: its
    key under the job (275 bytes) reaches the host's watch, which decodes
    it (keys over 255 bytes were refused: the watch failed and fell back
    to polling), so the host key deleted next is seen by the watch."""
    run_id = "j" * 200
    e = Etcd(n=1)
    d = tempfile.mkdtemp()
    a = None
    try:
        a = lt.launch(one_node(e.endpoints(), run_id, d, lt.free_port(), mode="hold"),
                      env={"LAUNCH_DEBUG": "rounds"})
        lt.wait_until(lambda: len(lt.records(d, 0)) == 1, 60, "the worker")
        assert host_of(e, run_id) is not None
        lt.wait_until(lambda: (watchers(e, 0) or 0) > 0, 30, "the agent's watch")
        e.call("/v3/kv/put", {"key": b64("/launch/%s/nodes/%s" % (run_id, "n" * 60)),
                              "value": b64("127.0.0.2 29400 " + "n" * 60)})
        e.delete("/launch/%s/host" % run_id)
        assert a.wait(60) == 75, a.output()
        out = a.output()
        assert "etcd watch: the host key was deleted" in out, out
        assert "etcd watch failed" not in out, out
    finally:
        if a:
            a.kill()
        e.close()

def test_host_lease_revoked():
    """(g) the host's lease revoked in etcd while its agent is stopped
    (what an etcd leader resumed after a stop does to the leases it saw
    last before 3.4.30: etcd issue 15247; or an operator) under a 2-node
    job, 1:2: the other node, a minority of the last round, is elected and
    re-forms alone (etcd decides; no majority rule: the deposed host
    records no round), and the old host, resumed, leaves (exit 75)."""
    with etcd_job(2, "1:2", "eh", env={"LAUNCH_DEBUG": "rounds"}) as (e, d, port, ags):
        lt.wait_until(lambda: len(lt.records(d, 0)) == 4, 90, "round 0's workers")
        h = host_of(e, "eh")
        old = int(h[0].split(".")[-1]) - 1
        ags[old].signal(signal.SIGSTOP)
        e.revoke(e.kv("/launch/eh/host")["lease"])
        try:
            lt.wait_until(lambda: len(lt.records(d, 1)) == 2, 90, "round 1's workers")
        finally:
            ags[old].signal(signal.SIGCONT)
        live = ags[1 - old]
        for r in lt.records(d, 1):
            assert r["env"]["WORLD_SIZE"] == "2", r["env"]
            assert r["env"]["MASTER_ADDR"] != h[0], r["env"]
        assert ags[old].wait(60) == 75, ags[old].output()
        assert "no longer holds job eh's host key in etcd" in ags[old].output()
        assert live.wait(120) == 0, live.output()
        assert "a new round needs a majority" not in live.output(), live.output()


def test_host_killed_ckpt():
    """(c) with --ckpt-dir: the survivors agree on the newest step again
    under the host etcd elected (a replicated step 7 of 6 ranks, resumed
    by the 4 left)."""
    sys.path.insert(0, HERE)
    from test_ckpt_resume import write_step
    ck = tempfile.mkdtemp()
    write_step(ck, 7, 6, True)
    _, gen1, outs = test_host_killed("eck", ["--ckpt-dir", ck])
    for r in gen1:
        assert r["env"]["LAUNCH_RESUME_STEP"] == "7", r["env"]
    for o in outs:
        assert o.count("resuming from checkpoint step 7") == 2, o


def test_host_stopped():
    """(e) the host agent stopped (SIGSTOP: silent, its lease not renewed):
    etcd lets its key go after the lease TTL, the others elect a new host
    and re-form; the old host, resumed, finds its key gone and leaves
    (exit 75) instead of training on: never two jobs."""
    with etcd_job(3, "2:3", "ee") as (e, d, port, ags):
        lt.wait_until(lambda: len(lt.records(d, 0)) == 6, 90, "round 0's workers")
        h = host_of(e, "ee")
        old = int(h[0].split(".")[-1]) - 1
        t0 = time.time()
        ags[old].signal(signal.SIGSTOP)
        try:
            lt.wait_until(lambda: len(lt.records(d, 1)) == 4, 90, "round 1's workers")
        except AssertionError:
            for a in ags:
                print(a.output()[-3000:])
            raise
        took = time.time() - t0
        new = host_of(e, "ee")
        assert new is not None and new[0] != h[0], (h, new)
        ags[old].signal(signal.SIGCONT)
        assert ags[old].wait(60) == 75, ags[old].output()
        assert "no longer holds job ee's host key in etcd" in ags[old].output()
        live = [a for i, a in enumerate(ags) if i != old]
        rcs = [a.wait(120) for a in live]
        assert rcs == [0, 0], [a.output() for a in live]
        for r in lt.records(d, 1):
            assert r["env"]["MASTER_ADDR"] == new[0], r["env"]
        assert not [r for r in lt.records(d) if r["env"]["LAUNCH_ROUND"] not in ("0", "1")]
        return took


def test_host_cut_off_from_etcd():
    """(f) the host cut off from etcd alone (it talks to member m1 only,
    which is stopped while a follower, stop_follower; the others talk to
    m2 and m3): its lease expires, the others elect a new host and re-form
    without it; the old host never starts workers again (its rounds cannot
    be recorded in etcd: no split brain, though --nnodes 1:3 would let it
    run alone), and when m1 is back it finds its key gone and leaves, exit
    75."""
    e = Etcd()
    d = tempfile.mkdtemp()
    port = lt.free_port()
    m1 = "127.0.0.1:%d" % e.client[0]
    rest = "127.0.0.1:%d,127.0.0.1:%d" % (e.client[1], e.client[2])
    ags = []
    try:
        # node1 is elected alone (--nnodes 1:3) before the others start: a
        # last call of 1 s closed round 0 with node1 only when node2 and
        # node3 took longer to join (CI, 2 cores, 3 tests at once)
        ags += agents(1, m1, "1:3", d, "ef", port, last_call=15)
        lt.wait_until(lambda: "this node" in ags[0].output(), 60, "node1 elected")
        ags += agents(2, rest, "1:3", d, "ef", port, first=2, last_call=15)
        lt.wait_until(lambda: len(lt.records(d, 0)) == 6, 90, "round 0's workers")
        e.stop_follower(0)
        lt.wait_until(lambda: [r for r in lt.records(d) if r["env"]["LAUNCH_ROUND"] != "0"
                               and r["env"]["WORLD_SIZE"] == "4"] and
                      "lease was not renewed" in ags[0].output(), 90,
                      "a round of node2 and node3, and node1's fence")
        e.procs[0].signal(signal.SIGCONT)
        assert ags[0].wait(60) == 75, ags[0].output()
        assert "no longer holds job ef's host key in etcd" in ags[0].output()
        rcs = [a.wait(120) for a in ags[1:]]
        assert rcs == [0, 0], [a.output() for a in ags[1:]]
        late = [r for r in lt.records(d) if r["env"]["LAUNCH_ROUND"] != "0"]
        assert late and all(r["env"]["LAUNCH_HOSTNAME"] != "node1" for r in late), late
        assert all(r["env"]["MASTER_ADDR"] != "127.0.0.1" for r in late), late
    finally:
        for p in e.procs:
            if p:
                p.signal(signal.SIGCONT)
        for a in ags:
            a.kill()
        e.close()


def test_etcd_down_and_back():
    """(d) every member killed while the workers run: the agents say they
    wait; past the lease TTL they stop their workers (etcd may have let
    their leases go: no split brain); the members restarted, the leases
    live on and the job re-forms under the same host and finishes."""
    with etcd_job(2, "2", "ed") as (e, d, port, ags):
        lt.wait_until(lambda: len(lt.records(d, 0)) == 4, 90, "round 0's workers")
        host = host_of(e, "ed")
        for i in range(e.n):
            e.kill(i)
        line = "unreachable: waiting (the job goes on when it is back)"
        lt.wait_until(lambda: all(line in a.output() for a in ags), 60,
                      "the agents' wait line")
        fence = "lease was not renewed for 5 s (etcd unreachable): stopping the workers"
        lt.wait_until(lambda: all(fence in a.output() for a in ags), 60,
                      "the agents fencing their workers")
        assert all(a.running() for a in ags), [(a.proc.poll(), a.output()) for a in ags]
        for i in range(e.n):
            e.start(i)
        e.wait_leader()
        rcs = [a.wait(120) for a in ags]
        outs = [a.output() for a in ags]
        assert rcs == [0, 0], (rcs, outs)
        for o in outs:
            assert "etcd is back" in o and "joining it again" in o, o
        last = max(int(r["env"]["LAUNCH_ROUND"]) for r in lt.records(d))
        assert last >= 1 and len(lt.records(d, last)) == 4, lt.records(d, last)
        for r in lt.records(d, last):
            assert r["env"]["MASTER_ADDR"] == host[0], (host, r["env"])


def resume_and_close(e, *procs):
    """Every member resumed (SIGCONT) and ended, and procs (agents, None
    ones left out) killed: each by pid."""
    for p in e.procs:
        if p:
            p.signal(signal.SIGCONT)
    for a in procs:
        if a:
            a.kill()
    e.close()

def held_by_follower(e, run_id, d, conf, env=None):
    """A 1-node job holding its worker (released by release(d)), started
    with m1, the member asked first, a follower: moved off it at a stop, the
    leadership would lengthen the lease (and hide what is tested). RET the
    agent, once its worker runs."""
    e.lead_elsewhere(0)
    a = lt.launch(one_node(e.endpoints(), run_id, d, lt.free_port(), mode="hold",
                           conf=conf), env=env)
    try:
        lt.wait_until(lambda: len(lt.records(d, 0)) == 1, 60, "the worker")
    except BaseException:
        a.kill()
        raise
    return a


def test_member_stopped_short_lease():
    """A member the agent talks to stopped (SIGSTOP: it accepts connections
    and never answers) under lease_ttl=2: each request gives a member only
    its share of what is left of the lease, so the renewal goes through
    another member in time (at 2 s a member, the host lost its lease and
    key to that one member, and left the job, exit 75)."""
    e = Etcd()
    d = tempfile.mkdtemp()
    a = None
    try:
        a = held_by_follower(e, "estop", d, ",lease_ttl=2")
        e.stop_follower(0)  # the first member given: the one asked first
        # for 3 TTLs, member 2 sees the host key of the start, not let go
        # (etcd reports a 2 s lease renewed every 0.67 s as "TTL 1": its
        # renewals cannot be told apart); before, it went within a TTL
        rev = e.kv_at(1, "/launch/estop/host")["create_revision"]
        t0 = time.time()
        while time.time() - t0 < 6 and a.running():
            kv = e.kv_at(1, "/launch/estop/host")
            assert kv and kv["create_revision"] == rev, (kv, a.output())
            time.sleep(0.05)
        out = a.output()
        assert a.running() and "lease" not in out and "host key" not in out, out
        release(d)
        assert a.wait(60) == 0, a.output()
    finally:
        resume_and_close(e, a)

def test_exit_members_stopped():
    """Every member stopped (SIGSTOP: connections accepted, never
    answered) and the agent asked to stop (SIGTERM) while a renewal waits
    on them: the request in flight is cut short and the revoke at exit
    takes 2 s at most, all members together (each member had 2 s, for the
    renewal in flight and again for the revoke: about 12 s). The bound
    asserted is a generous one."""
    e = Etcd()
    d = tempfile.mkdtemp()
    port = lt.free_port()
    a = None
    try:
        # a long lease: its end, far, does not bound the requests
        a = lt.launch(one_node(e.endpoints(), "eexit", d, port, mode="hold",
                               conf=",lease_ttl=30"))
        lt.wait_until(lambda: len(lt.records(d, 0)) == 1, 60, "the worker")
        for p in e.procs:
            p.signal(signal.SIGSTOP)
        # the first renewal failed on each member; after a nap of 1 s the
        # next one waits on them (the 2 s below put the stop within it)
        lt.wait_until(lambda: "unreachable: waiting" in a.output(), 60,
                      "the agent's wait line")
        time.sleep(2)
        t0 = time.time()
        a.signal(signal.SIGTERM)
        rc = a.wait(60)
        took = time.time() - t0
        print("exit with every etcd member stopped: %.2f s" % took, flush=True)
        assert rc is not None and took < 8, (rc, took, a.output())
    finally:
        resume_and_close(e, a)

def enable_auth(port):
    """Authentication on in etcd, through member port: user root,
    password s3cret."""
    post(port, "/v3/auth/user/add", {"name": "root", "password": "s3cret"})
    post(port, "/v3/auth/role/add", {"name": "root"})
    post(port, "/v3/auth/user/grant", {"user": "root", "role": "root"})
    post(port, "/v3/auth/enable", {})


def test_auth():
    """etcd with authentication on: an agent with the user and password
    (from $LAUNCH_ETCD_PASSWORD) forms the job; a wrong password is refused
    with etcd's reason (exit 75), not waited on."""
    e = Etcd()
    d = tempfile.mkdtemp()
    port = lt.free_port()
    ags = []
    try:
        p = e.client[e.wait_leader()]
        enable_auth(p)
        args = ["--nnodes", "1", "--rdzv-backend", "etcd", "--rdzv-endpoint", e.endpoints(),
                "--rdzv-id", "eauth", "--local-addr", "127.0.0.1",
                "--rdzv-conf", "user=root,lease_ttl=10,store_port=%d" % port,
                "--no-python", PY, WORKER, d, "ok"]
        rc, out = lt.launch_wait(args, env={"LAUNCH_ETCD_PASSWORD": "wrong"}, timeout=60)
        assert rc == 75 and "etcd refused this node" in out and "authentication failed" in out, (rc, out)
        ags.append(lt.launch(args, env={"LAUNCH_ETCD_PASSWORD": "s3cret"}))
        assert ags[0].wait(60) == 0, ags[0].output()
        assert len(lt.records(d, 0)) == 1
    finally:
        for a in ags:
            a.kill()
        e.close()


def test_auth_no_user():
    """etcd with authentication on and no user given: refused at once with
    what to give (exit 75); it was a silent wait without end."""
    e = Etcd(n=1)
    d = tempfile.mkdtemp()
    port = lt.free_port()
    try:
        p = e.client[0]
        enable_auth(p)
        rc, out = lt.launch_wait(one_node(e.endpoints(), "enouser", d, port), timeout=60)
        assert rc == 75 and "etcd refused this node" in out and \
            "etcd requires authentication: give --rdzv-conf user=NAME" in out, (rc, out)
    finally:
        e.close()


def post_as(port, path, body, token, timeout=5):
    """POST with an auth token (etcd with authentication on)."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": token})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def test_etcd_prefix():
    """torchrun's --rdzv-conf etcd_prefix: the job's keys lie under it, so
    a user whose etcd role allows only that prefix forms the job (the key
    was ignored as unknown: launch wrote under /launch/, and etcd said
    permission denied); without etcd_prefix that user is refused, with the
    prefix among what to check."""
    e = Etcd(n=1)
    d = tempfile.mkdtemp()
    port = lt.free_port()
    a = None
    try:
        p = e.client[0]
        pre = "/team/a/"
        end = pre[:-1] + chr(ord(pre[-1]) + 1)
        post(p, "/v3/auth/user/add", {"name": "alice", "password": "pw"})
        post(p, "/v3/auth/role/add", {"name": "team-a"})
        post(p, "/v3/auth/role/grant", {"name": "team-a", "perm": {
            "permType": "READWRITE", "key": b64(pre), "range_end": b64(end)}})
        post(p, "/v3/auth/user/grant", {"user": "alice", "role": "team-a"})
        enable_auth(p)
        env = {"LAUNCH_ETCD_PASSWORD": "pw", "LAUNCH_DEBUG": "rounds"}
        a = lt.launch(one_node(e.endpoints(), "epre", d, port, mode="hold",
                               conf=",user=alice,etcd_prefix=/team/a"), env=env)
        lt.wait_until(lambda: len(lt.records(d, 0)) == 1, 60, "the worker")
        tok = post(p, "/v3/auth/authenticate", {"name": "root", "password": "s3cret"})["token"]
        kvs = post_as(p, "/v3/kv/range", {"key": b64(pre), "range_end": b64(end)},
                      tok).get("kvs") or []
        keys = sorted(base64.b64decode(kv["key"]).decode() for kv in kvs)
        assert "/team/a/epre/host" in keys and \
            all(k.startswith("/team/a/epre/") for k in keys), keys
        # the watch works under the prefix too (the role allows it)
        release(d)
        assert a.wait(60) == 0, a.output()
        assert "etcd watch failed" not in a.output(), a.output()
        rc, out = lt.launch_wait(one_node(e.endpoints(), "epre2", d, port,
                                          conf=",user=alice"), env=env, timeout=60)
        assert rc == 75 and "permission denied" in out and "etcd_prefix" in out, (rc, out)
    finally:
        if a:
            a.kill()
        e.close()


def watchers(e, i):
    """How many watches member i serves (etcd's /metrics), None when down."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % e.client[i],
                                    timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("etcd_debugging_mvcc_watcher_total "):
                    return int(float(line.split()[1]))
    except Exception:
        return None
    return None


def test_auth_watch_member_down():
    """Authentication on and the first member down: the watch moves to
    another member (it asked the dead one for its token at every try, and
    fell back to polling for good), so the host key deleted is seen by the
    watch."""
    e = Etcd()
    d = tempfile.mkdtemp()
    port = lt.free_port()
    a = None
    try:
        p = e.client[e.wait_leader()]
        enable_auth(p)
        e.kill(0)
        p = e.client[e.wait_leader()]
        a = lt.launch(one_node(e.endpoints(), "eaw", d, port, mode="hold",
                               conf=",user=root,lease_ttl=3"),
                      env={"LAUNCH_ETCD_PASSWORD": "s3cret", "LAUNCH_DEBUG": "rounds"})
        lt.wait_until(lambda: len(lt.records(d, 0)) == 1, 60, "the worker")
        lt.wait_until(lambda: (watchers(e, 1) or 0) + (watchers(e, 2) or 0) > 0, 30,
                      "the agent's watch on a live member")
        # the host key, read with the root user's token
        tok = post(p, "/v3/auth/authenticate", {"name": "root", "password": "s3cret"})["token"]
        req = urllib.request.Request("http://127.0.0.1:%d/v3/kv/deleterange" % p,
                                     data=json.dumps({"key": b64("/launch/eaw/host")}).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": tok})
        urllib.request.urlopen(req, timeout=5).read()
        assert a.wait(30) == 75, a.output()
        assert "etcd watch: the host key was deleted" in a.output(), a.output()
    finally:
        if a:
            a.kill()
        e.close()


def test_watch_member_stopped():
    """The member the watch is on stopped (SIGSTOP: it takes connections and
    never answers): a watch opened on it gets no answer, and moves to
    another member, so the host key deleted is seen (the watch reopened on
    the stopped member and stayed silent, and the deletion went unseen)."""
    e = Etcd()
    d = tempfile.mkdtemp()
    a = None
    try:
        a = held_by_follower(e, "ews", d, ",lease_ttl=3", {"LAUNCH_DEBUG": "rounds"})
        lt.wait_until(lambda: (watchers(e, 0) or 0) > 0, 30, "the watch on m1")
        e.stop_follower(0)
        time.sleep(3)  # a renewal or two: the watch reopens
        e.delete("/launch/ews/host")
        rc = a.wait(30)
        assert rc == 75, (rc, a.output())
        assert "etcd watch: the host key was deleted" in a.output(), a.output()
    finally:
        resume_and_close(e, a)


def make_certs(d):
    """A CA, a certificate for 127.0.0.1 (the member) and one for a client,
    and another CA that signed neither, with the openssl command."""
    def run(*a):
        subprocess.run(["openssl"] + list(a), cwd=d, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other"):
        run("req", "-x509", *ec, "-keyout", ca + ".key", "-out", ca + ".pem",
            "-days", "1", "-subj", "/CN=" + ca)
    for name, usage in (("member", "serverAuth,clientAuth"), ("client", "clientAuth")):
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=%s\n" % usage)
        run("req", *ec, "-keyout", name + ".key", "-out", name + ".csr",
            "-subj", "/CN=" + name)
        run("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", name + ".pem", "-days", "1",
            "-extfile", name + ".ext")


def test_tls():
    """etcd over TLS with client certificates: the agent with cacert, cert
    and key forms the job; one that does not trust the member's CA is
    refused with the reason (exit 75); one without a certificate waits,
    saying what to give."""
    if shutil.which("openssl") is None:
        print("test_tls: skipped: no openssl command")
        return
    d = tempfile.mkdtemp()
    make_certs(d)
    cp, pp = lt.free_port(), lt.free_port()
    url, peer = "https://127.0.0.1:%d" % cp, "http://127.0.0.1:%d" % pp
    m = lt.Proc([ETCD, "--name", "t1", "--data-dir", os.path.join(d, "data"),
                 "--listen-client-urls", url, "--advertise-client-urls", url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", "t1=" + peer,
                 "--cert-file", os.path.join(d, "member.pem"),
                 "--key-file", os.path.join(d, "member.key"),
                 "--trusted-ca-file", os.path.join(d, "ca.pem"), "--client-cert-auth"],
                name="etcd-tls")
    port = lt.free_port()
    work = os.path.join(d, "w")
    os.mkdir(work)

    def job(conf):
        return ["--nnodes", "1", "--rdzv-backend", "etcd", "--rdzv-endpoint", "127.0.0.1:%d" % cp,
                "--rdzv-id", "etls", "--local-addr", "127.0.0.1",
                "--rdzv-conf", "lease_ttl=10,store_port=%d,%s" % (port, conf),
                "--no-python", PY, WORKER, work, "ok"]
    f = lambda n: os.path.join(d, n)  # noqa: E731
    try:
        rc, out = lt.launch_wait(job("cacert=%s,cert=%s,key=%s" % (
            f("ca.pem"), f("client.pem"), f("client.key"))), timeout=90)
        assert rc == 0, out
        assert len(lt.records(work, 0)) == 1
        rc, out = lt.launch_wait(job("cacert=%s,cert=%s,key=%s" % (
            f("other.pem"), f("client.pem"), f("client.key"))), timeout=60)
        assert rc == 75 and "etcd refused this node" in out, (rc, out)
        # no certificate: the member refuses the handshake (exit 75), or,
        # with TLS 1.3, ends the session after it, which looks like a
        # network error: waited on, with a hint
        a = lt.launch(job("cacert=%s" % f("ca.pem")), name="nocert")
        try:
            try:
                lt.wait_until(lambda: "give --rdzv-conf cert=F,key=F" in a.output() or
                              not a.running(), 60, "the refusal, or the hint")
            except AssertionError:
                raise AssertionError(a.output())
            if a.running():
                assert "unreachable: waiting" in a.output(), a.output()
            else:
                assert a.wait() == 75 and "etcd refused this node" in a.output(), a.output()
        finally:
            a.kill()
    finally:
        m.kill()


def one_node(ep, run_id, d, port, conf="", mode="ok"):
    """The arguments of a 1-node job at etcd members ep."""
    return ["--nnodes", "1", "--rdzv-backend", "etcd", "--rdzv-endpoint", ep,
            "--rdzv-id", run_id, "--local-addr", "127.0.0.1",
            "--rdzv-conf", "lease_ttl=10,store_port=%d%s" % (port, conf),
            "--no-python", PY, WORKER, d, mode]


def test_not_etcd():
    """A member that answers, but not as etcd's JSON gateway (here etcd's
    peer port: HTTP 404), passes the request to the next member; alone, the
    wait line says what is wrong (it was a silent wait)."""
    e = Etcd(n=1)
    d = tempfile.mkdtemp()
    port = lt.free_port()
    a = None
    try:
        ep = "127.0.0.1:%d,127.0.0.1:%d" % (e.peer[0], e.client[0])
        rc, out = lt.launch_wait(one_node(ep, "enot", d, port), timeout=60)
        assert rc == 0 and len(lt.records(d, 0)) == 1, (rc, out)
        a = lt.launch(one_node("127.0.0.1:%d" % e.peer[0], "enot2", d, port))
        lt.wait_until(lambda: "not etcd's v3 JSON gateway" in a.output(), 30,
                      "the wait line naming the member that is no etcd")
    finally:
        if a:
            a.kill()
        e.close()


def test_unreachable_at_start():
    """etcd never reached at the start (nothing listens at the member
    given): the agent waits read_timeout, then fails saying what to check
    (exit 75); it waited without end, join_timeout too."""
    d = tempfile.mkdtemp()
    ep = "127.0.0.1:%d" % lt.free_port()
    rc, out = lt.launch_wait(one_node(ep, "eunr", d, lt.free_port(),
                                      conf=",read_timeout=3,join_timeout=4"), timeout=60)
    assert rc == 75 and "unreachable: waiting up to 3 s" in out and \
        "cannot reach etcd at %s: gave up after 3 s" % ep in out and \
        "Check --rdzv-endpoint" in out, (rc, out)


def test_bad_endpoint():
    """A member list that does not parse is refused with what to give."""
    rc, out = lt.launch_wait(["--rdzv-backend", "etcd", "--rdzv-endpoint", "h1:2379,h2:99999",
                              "--rdzv-id", "x", "--no-python", "/bin/true"], timeout=30)
    assert rc == 2 and "etcd member 'h2:99999' does not parse" in out, (rc, out)
    rc, out = lt.launch_wait(["--rdzv-endpoint", "h1:2379,h2:2379", "--rdzv-id", "x",
                              "--no-python", "/bin/true"], timeout=30)
    assert rc == 2 and "give --rdzv-backend etcd" in out, (rc, out)


if __name__ == "__main__":
    if not os.access(ETCD, os.X_OK):
        lt.skip("%s is not installed (Debian's etcd-server)" % ETCD)
    # a build without libcurl refuses the backend at once
    probe = lt.launch(["--rdzv-backend", "etcd", "--rdzv-endpoint", "127.0.0.1:1",
                       "--rdzv-id", "probe", "--no-python", "/bin/true"], name="probe")
    try:
        lt.wait_until(lambda: "etcd" in probe.output(), 30, "the probe's first line")
        if "built without libcurl" in probe.output():
            lt.skip("this launch was built without libcurl")
    finally:
        probe.kill()
    tests = [test_bad_endpoint, test_forms_and_finishes, test_leader_killed,
             test_host_killed, test_host_key_deleted, test_long_job_id, test_host_lease_revoked, test_host_killed_ckpt,
             test_host_stopped, test_etcd_down_and_back, test_member_stopped_short_lease,
             test_exit_members_stopped,
             test_host_cut_off_from_etcd, test_auth, test_auth_no_user, test_auth_watch_member_down, test_watch_member_stopped, test_etcd_prefix, test_tls, test_not_etcd, test_unreachable_at_start]
    only = sys.argv[1:]
    for t in tests:
        if only and t.__name__ not in only:
            continue
        print("==", t.__name__, flush=True)
        t()
    print("ok")
