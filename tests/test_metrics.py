"""Prometheus metrics of the agent (launch --metrics-port, docs/monitoring.md).

- `--metrics-port 127.0.0.1:0` picks a free port and prints it; during a
  train_gpt job (2 CPU workers) /metrics holds the job's and each rank's
  series with the scalars train_gpt reports (step, loss, grad norm, lr,
  step time, tokens/s, total steps), and `promtool check metrics` accepts
  the text;
- a real Prometheus (Debian's), started on loopback with its own
  configuration and storage in a temporary directory, scrapes the agent
  during the job, and a `launch server --metrics-port` with a job on it; its HTTP API returns the series with the agent's labels
  and values that move (the step grows);
- the standalone start line (round 0) names the job's endpoint and id, and `launch
  status` there shows each rank's step, age, steps/s, ETA and loss, and
  in --json a straggler score per rank.
Skips when launch was built without libevent, or when promtool or
prometheus are missing."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

JOB = None
BIN = os.path.dirname(os.path.abspath(lt.launch_bin()))
TRAIN = os.path.join(BIN, "train_gpt")


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def start_job(c):
    agent = c.add(lt.launch(
        ["--standalone", "--nproc-per-node", "2", "--metrics-port",
         "127.0.0.1:0", TRAIN, "--preset", "tiny",
         "--val-batches", "1", "--threads", "1", "--steps", "100000",
         "--val-every", "0", "--log-every", "1000"],
        env={"LAUNCH_HOSTNAME": "methost"}, name="agent"))
    m = lt.wait_match(agent, r"metrics of job (\S+) on http://127\.0\.0\.1:(\d+)/metrics",
                      30, "the metrics port line")
    global JOB
    JOB = m.group(1)  # --standalone makes the job id up
    return agent, int(m.group(2))


def series(text):
    """{(name, frozenset(labels)): value} of a text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, "not a sample line: %r" % line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"',
                                      m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def test_scrape_and_promtool(port, d):
    url = "http://127.0.0.1:%d/metrics" % port

    def ranks_report():
        s = series(get(url))
        return all(("launch_rank_loss", frozenset(
            {("job", JOB), ("node", "methost"), ("rank", r)})) in s
            for r in ("0", "1"))
    lt.wait_until(ranks_report, 60, "both ranks' loss in /metrics")
    text = get(url)
    s = series(text)
    base = {("job", JOB), ("node", "methost")}
    r0 = frozenset(base | {("rank", "0")})
    assert s[("launch_job_state", frozenset(base | {("state", "running")}))] == 1
    assert s[("launch_job_workers_up", frozenset(base))] == 2
    assert s[("launch_job_restarts_total", frozenset(base))] == 0
    assert s[("launch_rank_step", r0)] >= 1
    assert s[("launch_rank_total_steps", r0)] == 100000
    assert 0 < s[("launch_rank_loss", r0)] < 20
    assert s[("launch_rank_grad_norm", r0)] > 0
    assert 0 < s[("launch_rank_learning_rate", r0)] < 1
    assert s[("launch_rank_step_seconds", r0)] > 0
    assert s[("launch_rank_tokens_per_second", r0)] > 0
    assert s[("launch_node_memory_total_bytes",
              frozenset({("node", "methost")}))] > 0
    assert "# TYPE launch_job_restarts_total counter" in text
    # this agent hosts the job's server: its series too
    node = frozenset({("node", "methost")})
    assert s[("launch_server_jobs", node)] >= 1, text
    # requests by protocol and op: the agents' HELLO and JOIN at least, and
    # every op listed from 0 (rate() sees a series from its start)
    def req(proto, op):
        return s[("launch_server_requests_total",
                  frozenset(node | {("protocol", proto), ("op", op)}))]
    assert req("native", "hello") >= 1, text
    assert req("native", "rdzv_join") >= 1, text
    assert req("tcpstore", "compare_set") >= 0, text
    assert s[("launch_server_refusals_total",
              frozenset(node | {("limit", "max_conns")}))] == 0, text
    assert s[("launch_server_memory_limit_bytes", node)] > 0, text
    assert not get("http://127.0.0.1:%d/" % port).startswith("#")
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool missing: the text format is not checked by it")
        return
    p = subprocess.run([promtool, "check", "metrics"], input=text,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr + text
    print("scrape: job, rank and node series; promtool check metrics: ok")


def start_server(c):
    """`launch server --metrics-port` and a job of one sleeping worker on
    it: the server's metrics port, and its rendezvous port."""
    srv = c.add(lt.Proc([lt.launch_bin(), "server", "--host", "127.0.0.1",
                         "--port", "0", "--metrics-port", "127.0.0.1:0"],
                        name="server"))
    ports = {}

    def up():
        out = srv.output()
        m = re.search(r"listening on 127\.0\.0\.1 port (\d+)", out)
        n = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", out)
        if m and n:
            ports["rdzv"], ports["met"] = int(m.group(1)), int(n.group(1))
        return bool(ports)
    lt.wait_until(up, 30, "the server's ports")
    c.add(lt.launch(["--rdzv-endpoint", "127.0.0.1:%d" % ports["rdzv"],
                     "--rdzv-id", "srvjob", "--nproc-per-node", "1",
                     "--no-python", "sleep", "60"], name="srvjob"))
    return ports


def maps(pid):
    with open("/proc/%d/maps" % pid) as f:
        return f.read()


def test_loaded_on_demand(c, agent):
    """The endpoint speaks no TLS: an agent serving it maps no TLS library
    (libmicrohttpd's GnuTLS was 1.8 MB of it, issue #23). libevent is
    linked from its archives (CMakeLists.txt): a server without
    --metrics-port maps none of it either."""
    for lib in ("libgnutls", "libmicrohttpd", "libevent_openssl"):
        assert lib not in maps(agent.pid), (lib, maps(agent.pid))
    srv = c.add(lt.Proc([lt.launch_bin(), "server", "--host", "127.0.0.1",
                         "--port", "0"], name="server-nomet"))
    lt.wait_until(lambda: "listening on 127.0.0.1 port" in srv.output(), 30,
                  "the server without metrics")
    linked = subprocess.run(["ldd", lt.launch_bin()], capture_output=True,
                            text=True).stdout
    if "libevent" not in linked:
        assert "libevent" not in maps(srv.pid), maps(srv.pid)
    srv.signal(signal.SIGTERM)
    srv.wait(30)
    print("no TLS library mapped with --metrics-port; libevent %s" %
          ("shared" if "libevent" in linked else "not mapped without it"))


def test_prometheus(port, d, server):
    prom = shutil.which("prometheus")
    if prom is None:
        print("prometheus missing: not scraped by a real one")
        return False
    web = lt.free_port()
    cfg = os.path.join(d, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                "scrape_configs:\n  - job_name: launch\n    honor_labels: true\n"
                "    static_configs:\n"
                "      - targets: ['127.0.0.1:%d', '127.0.0.1:%d']\n" %
                (port, server["met"]))
    with lt.Cleanup() as c:
        p = c.add(lt.Proc([prom, "--config.file", cfg, "--storage.tsdb.path",
                           os.path.join(d, "tsdb"), "--web.listen-address",
                           "127.0.0.1:%d" % web], name="prometheus"))
        api = "http://127.0.0.1:%d/api/v1/query?query=" % web

        def query(q):
            try:
                r = json.loads(get(api + urllib.parse.quote(q)))
            except OSError:
                return []
            assert r["status"] == "success", r
            return r["data"]["result"]
        first = []

        def scraped():
            if not p.running():
                raise AssertionError("prometheus ended:\n" + p.output())
            first[:] = query('launch_rank_step{job="%s",rank="0"}' % JOB)
            return len(first) == 1
        try:
            lt.wait_until(scraped, 90, "prometheus to scrape launch_rank_step")
        except AssertionError:
            print(p.output()[-3000:])
            print(query("up"), query("launch_rank_step"))
            raise
        m = first[0]["metric"]
        assert m["node"] == "methost" and m["instance"] == \
            "127.0.0.1:%d" % port and m["job"] == JOB, m
        step0 = float(first[0]["value"][1])
        lt.wait_until(lambda: [x for x in query(
            'launch_rank_step{job="%s",rank="0"}' % JOB)
            if float(x["value"][1]) > step0], 60, "the step to grow")
        loss = query('launch_rank_loss{rank="1"}')
        assert len(loss) == 1 and 0 < float(loss[0]["value"][1]) < 20, loss
        up = query('launch_job_workers_up{node="methost"}')
        assert [float(x["value"][1]) for x in up] == [2.0], up
        mem = query("launch_node_memory_available_bytes")
        assert mem and float(mem[0]["value"][1]) > 0, mem
        # `launch server`: the job on it, its connections and requests
        inst = 'instance="127.0.0.1:%d"' % server["met"]
        lt.wait_until(lambda: [x for x in query("launch_server_jobs{%s}" % inst)
                               if float(x["value"][1]) == 1], 30,
                      "launch server's one job in prometheus")
        conns = query("launch_server_connections{%s}" % inst)
        reqs = query('sum(launch_server_requests_total{%s})' % inst)
        hello = query('launch_server_requests_total{%s,protocol="native",'
                      'op="hello"}' % inst)
        refused = query('launch_server_refusals_total{%s}' % inst)
        assert float(conns[0]["value"][1]) >= 1, conns
        assert float(reqs[0]["value"][1]) >= 1, reqs
        assert float(hello[0]["value"][1]) >= 1, hello
        assert {x["metric"]["limit"] for x in refused} >= {
            "max_conns", "conns_per_addr", "max_jobs", "max_memory"}, refused
        print("prometheus: scraped the agent (step %d -> grows, loss %s) "
              "and launch server (1 job, %s requests)" %
              (step0, loss[0]["value"][1], reqs[0]["value"][1]))
    return True


def test_status(agent):
    """`launch status` against the endpoint the standalone start line
    printed: each rank's step, age, steps/s, ETA, loss, and in --json a
    straggler score against the median step time."""
    m = re.search(r"round 0 of job (\S+): .*; standalone server (\S+):(\d+) "
                  r"\(launch status --rdzv-endpoint \S+ --rdzv-id (\S+)\)",
                  agent.output())
    assert m and m.group(1) == JOB and m.group(4) == JOB, agent.output()
    ep = ["--rdzv-endpoint", "%s:%s" % (m.group(2), m.group(3)),
          "--rdzv-id", JOB]
    p = lt.Proc([lt.launch_bin(), "status"] + ep, name="status")
    assert p.wait(30) == 0, p.output()
    out = p.output()
    rows = dict((int(x.group(1)), x) for x in re.finditer(
        r"^(\d+)\s+(\d+)/100000\s+([\d.]+) s\s+([\d.]+)\s+(\S+)\s+"
        r"([\d.]+)\s+([\d.]+) s$", out, re.M))
    assert sorted(rows) == [0, 1], out
    assert float(rows[0].group(4)) > 0 and 0 < float(rows[0].group(6)) < 20, out
    p = lt.Proc([lt.launch_bin(), "status", "--json"] + ep, name="status")
    assert p.wait(30) == 0, p.output()
    j = json.loads(p.output())
    ranks = j["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1], j
    for r in ranks:
        assert r["step"] >= 1 and r["total_steps"] == 100000, r
        assert 0 < r["loss"] < 20 and r["step_time"] > 0, r
        assert 0 < r["straggler_score"] < 10, r
    print("status: per-rank step, age, steps/s, ETA, loss; straggler "
          "scores %s" % [round(r["straggler_score"], 2) for r in ranks])


def main():
    d = tempfile.mkdtemp(prefix="launch-metrics-")
    try:
        with lt.Cleanup() as c:
            agent, port = start_job(c)
            test_scrape_and_promtool(port, d)
            test_loaded_on_demand(c, agent)
            server = start_server(c)
            test_prometheus(port, d, server)
            test_status(agent)
            agent.signal(signal.SIGTERM)
            agent.wait(60)
    finally:
        shutil.rmtree(d)
    print("test_metrics: ok")


if __name__ == "__main__":
    main()
