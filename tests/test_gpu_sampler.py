"""The GPU sampler (`launch gpu-sampler`, launcher/sampler.h,
docs/monitoring.md#the-gpu-sampler): NVML in a child process of the agent,
here with tests/fake_nvml.c as NVML (LAUNCH_NVML_LIBRARY).

- the GPU series come through it with launch_gpu_sampler_up 1; it is the
  agent's child, in a process group of its own;
- kill -9 of the sampler: it is reaped within seconds, scraped or not (no
  zombie), the agent says so in one warning naming signal 9, and the next
  scrape has launch_gpu_sampler_up 0 and no GPU series but the job's; it is started again after
  its backoff (10 s after its start) and the series come back;
- a worker that fails and is restarted: the workers' containment (the
  agent is the subreaper of its workers' orphans) neither kills nor reaps
  the sampler;
- after the agent ends (SIGTERM; or kill -9), no sampler is left;
- NVML that blocks (FAKE_NVML_HANG_MS): each scrape still answers, with
  launch_gpu_sampler_up 0, long before the hang ends;
- the prefetch: seconds after the last scrape, the agent's loop has kept
  the sample fresh; a sampler stopped (SIGSTOP) then still serves it, with
  launch_gpu_sampler_up 1 and its age under 2.5 s, until it is older: then
  launch_gpu_sampler_up 0 and no GPU series; resumed, it answers again;
- `launch server --metrics-port` has its sampler too; without NVML (no
  LAUNCH_NVML_LIBRARY, no /dev/nvidiactl) there is none.
Skips when launch was built without libevent."""
import os
import re
import signal
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

FAKE = os.environ.get("FAKE_NVML") or os.path.join(
    os.environ.get("LAUNCH_BUILD_DIR", "build"), "lib", "libfake_nvml.so")
UP1 = 'launch_gpu_sampler_up{node="gpuhost"} 1\n'
UP0 = 'launch_gpu_sampler_up{node="gpuhost"} 0\n'
GPU = 'launch_gpu_utilization_ratio{node="gpuhost",gpu="0"} 0.97\n'


def get(port, timeout=10):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                timeout=timeout) as r:
        return r.read().decode()


sampler_of = lt.gpu_sampler_of


def start(c, extra_env=None, worker=None, name="agent", extra=()):
    env = {"LAUNCH_HOSTNAME": "gpuhost", "LAUNCH_NVML_LIBRARY": FAKE}
    env.update(extra_env or {})
    agent = c.add(lt.launch(
        ["--standalone", "--nproc-per-node", "1", "--metrics-port",
         "127.0.0.1:0"] + list(extra) + ["--no-python"] +
        (worker or ["sleep", "600"]), env=env, name=name))
    port = []

    def printed():
        out = agent.output()
        if not agent.running():
            if "without libevent" in out:
                lt.skip("launch was built without libevent")
            raise AssertionError("the agent ended:\n" + out)
        m = re.search(r"metrics of job \S+ on http://127\.0\.0\.1:(\d+)/", out)
        if m:
            port.append(int(m.group(1)))
        return bool(port)
    lt.wait_until(printed, 30, "the metrics port line")
    return agent, port[0]


def wait_up(port, timeout=30, want=re.escape(UP1)):
    text = [""]

    def up():
        text[0] = get(port)
        return re.search(want, text[0])
    lt.wait_until(up, timeout, "launch_gpu_sampler_up 1")
    return text[0]


def test_kill_and_restart(c):
    agent, port = start(c)
    text = wait_up(port)
    t_up = time.time()
    assert GPU in text, text
    assert 'launch_gpu_xid_errors_total{node="gpuhost",gpu="0",xid="79"} 2\n' \
        in text, text
    assert "launch_job_workers_up" in text, text
    pid = sampler_of(agent.pid)
    assert pid
    assert os.getpgid(pid) == pid  # its own group: no terminal's Ctrl-C
    os.kill(pid, signal.SIGKILL)
    # reaped by the agent's loop (once a second), no scrape needed
    lt.wait_until(lambda: not os.path.exists("/proc/%d" % pid), 5,
                  "the sampler to be reaped")
    text = get(port)
    assert UP0 in text and "launch_gpu_utilization_ratio" not in text, text
    assert "launch_job_workers_up" in text, text  # the agent keeps serving
    lt.wait_until(lambda: "was killed by signal 9" in agent.output(), 10,
                  "the warning")
    warn = [x for x in agent.output().splitlines() if "GPU sampler" in x]
    assert len(warn) == 1 and "pid %d" % pid in warn[0], warn
    # back after the backoff, with its series
    text = wait_up(port, 30)
    back = time.time() - t_up
    assert GPU in text, text
    pid2 = sampler_of(agent.pid)
    assert pid2 and pid2 != pid
    print("kill -9 of the sampler: the next scrape without GPU series "
          "(launch_gpu_sampler_up 0), reaped, one warning; back %.1f s after "
          "the first answer" % back)
    agent.signal(signal.SIGTERM)
    agent.wait(60)
    assert not os.path.exists("/proc/%d" % pid2), "the sampler outlived the agent"
    print("agent ended by SIGTERM: its sampler (pid %d) is gone" % pid2)


def test_agent_killed(c):
    agent, port = start(c, name="agent-k")
    wait_up(port)
    pid = sampler_of(agent.pid)
    assert pid
    agent.kill()  # SIGKILL: no met_stop, PR_SET_PDEATHSIG does it
    lt.wait_until(lambda: not lt.pid_alive(pid), 10, "the sampler to die")
    print("agent killed (-9): its sampler (pid %d) died with it" % pid)


def test_worker_restarts(c):
    """A failing worker, restarted: the sampler is not one of its orphans."""
    agent, port = start(c, worker=["sh", "-c", "sleep 1; exit 1"],
                        extra=["--max-restarts", "5"], name="agent-r")
    wait_up(port)
    pid = sampler_of(agent.pid)

    def restarted():
        m = re.search(r"launch_job_restarts_total\{[^}]*\} (\d+)", get(port))
        return m and int(m.group(1)) >= 2
    lt.wait_until(restarted, 60, "two restarts")
    text = get(port)
    assert UP1 in text and GPU in text, text
    assert sampler_of(agent.pid) == pid, (pid, sampler_of(agent.pid))
    assert "GPU sampler" not in agent.output(), agent.output()
    agent.signal(signal.SIGTERM)
    agent.wait(60)
    print("two worker restarts: the same sampler (pid %d) answered" % pid)


def test_hang(c):
    agent, port = start(c, {"FAKE_NVML_HANG_MS": "60000"}, name="agent-h")
    lt.wait_until(lambda: sampler_of(agent.pid), 10, "the sampler")
    pid = sampler_of(agent.pid)
    # the job's series come once its worker runs: the sampler can be up
    # before that (under TSan, on a loaded machine, it was)
    lt.wait_until(lambda: "launch_job_workers_up" in get(port, timeout=30),
                  30, "the job's series beside the hung sampler")
    took = []
    for _ in range(3):
        t0 = time.time()
        text = get(port, timeout=30)
        took.append(time.time() - t0)
        assert UP0 in text and "launch_gpu_utilization_ratio" not in text, text
        assert "launch_job_workers_up" in text, text
    assert max(took) < 30, took  # not the minute NVML blocks
    assert sampler_of(agent.pid) == pid  # hung, not restarted
    agent.signal(signal.SIGTERM)
    agent.wait(60)
    assert not os.path.exists("/proc/%d" % pid)
    print("NVML blocked 60 s: scrapes answered in %s s without GPU series; "
          "the hung sampler ended with the agent" %
          ", ".join("%.2f" % t for t in took))


def age_of(text):
    m = re.search(r'launch_gpu_sample_age_seconds\{node="gpuhost"\} (\S+)\n',
                  text)
    assert m, text
    return float(m.group(1))


def test_stopped(c):
    agent, port = start(c, name="agent-s")
    wait_up(port)
    pid = sampler_of(agent.pid)
    time.sleep(3.5)  # no scrape: the block the scrape took is 3.5 s old
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.time()
        text = get(port)
        took = time.time() - t0
        # the loop asked since: a fresh sample, served without the sampler
        assert UP1 in text and GPU in text, text
        age = age_of(text)
        assert 0 <= age < 2.5, text
        time.sleep(3)
        text = get(port)
        assert UP0 in text and "launch_gpu_utilization_ratio" not in text, text
        age2 = age_of(text)
        assert age2 > 2.5, text
        assert "launch_job_workers_up" in text, text
    finally:
        os.kill(pid, signal.SIGCONT)
    text = wait_up(port)
    assert GPU in text and age_of(text) < 2.5, text
    assert sampler_of(agent.pid) == pid  # stopped, not restarted
    agent.signal(signal.SIGTERM)
    agent.wait(60)
    print("sampler stopped 3.5 s after the last scrape: the next served the "
          "loop's sample (%.2f s old) in %.4f s; 3 s later up 0 (age %.1f s); "
          "resumed, up 1" % (age, took, age2))


def test_server(c):
    srv = c.add(lt.Proc([lt.launch_bin(), "server", "--host", "127.0.0.1",
                         "--port", "0", "--metrics-port", "127.0.0.1:0"],
                        env={"LAUNCH_HOSTNAME": "gpuhost",
                             "LAUNCH_NVML_LIBRARY": FAKE}, name="server"))
    port = [int(lt.wait_match(srv, r"metrics on http://127\.0\.0\.1:(\d+)/metrics", 30,
                              "the server's metrics port").group(1))]
    # its node label is the host's name (launch server has no LAUNCH_HOSTNAME)
    text = wait_up(port[0], want=r'launch_gpu_sampler_up\{node="[^"]*"\} 1\n')
    assert re.search(r'launch_gpu_power_watts\{node="[^"]*",gpu="0"\} 650.5\n',
                     text), text
    pid = sampler_of(srv.pid)
    srv.signal(signal.SIGTERM)
    srv.wait(30)
    assert pid and not os.path.exists("/proc/%d" % pid)
    print("launch server: GPU series through its sampler, gone with it")


def test_no_nvml(c):
    if os.path.exists("/dev/nvidiactl"):
        print("/dev/nvidiactl here: the case without NVML is not run")
        return
    agent, port = start(c, {"LAUNCH_NVML_LIBRARY": ""}, name="agent-n")
    text = get(port)
    assert "launch_gpu_" not in text, text
    assert sampler_of(agent.pid) is None
    agent.signal(signal.SIGTERM)
    agent.wait(60)
    print("no NVML: no sampler, no launch_gpu_* series")


def main():
    if not os.path.exists(FAKE):
        raise AssertionError("no fake NVML at " + FAKE)
    with lt.Cleanup() as c:
        test_kill_and_restart(c)
        test_agent_killed(c)
        test_worker_restarts(c)
        test_hang(c)
        test_stopped(c)
        test_server(c)
        test_no_nvml(c)
    print("test_gpu_sampler: ok")


if __name__ == "__main__":
    main()
