"""A worker that exited 0 while the others of its node run on (rank 0
saving the final model) is done, not down (docs/monitoring.md): the agent
serves launch_job_workers_done 1 and no progress age for it, so that
neither LaunchWorkersDown (workers_up < workers) nor LaunchNoProgress (its
age growing past 10 minutes) fires on a healthy job; the running rank keeps
its age. The step a rank reported right before its exit is shown: the
agent reads an exited rank's key once more."""
import os
import re
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def value(text, name, rank=None):
    lab = r'[^}]*rank="%d"[^}]*' % rank if rank is not None else r'[^}]*'
    m = re.search(r'^%s\{%s\} (\S+)$' % (name, lab), text, re.M)
    return float(m.group(1)) if m else None


def main():
    lt.need_torch()
    d = tempfile.mkdtemp()
    with lt.Cleanup() as c:
        agent = c.add(lt.launch(
            ["--standalone", "--nproc-per-node", "2", "--metrics-port",
             "127.0.0.1:0", os.path.join(HERE, "py", "progress_early_exit.py"),
             d], env={"PYTHON_EXEC": sys.executable}, name="agent"))
        m = lt.wait_match(agent, r"metrics of job \S+ on http://127\.0\.0\.1:(\d+)/",
                          30, "the metrics port line")
        url = "http://127.0.0.1:%s/metrics" % m.group(1)
        lt.wait_until(lambda: value(get(url), "launch_job_workers_up") == 1,
                      60, "rank 1's exit")
        time.sleep(3)  # a few more renders
        text = get(url)
        open(os.path.join(d, "go"), "w").close()
        assert agent.wait(60) == 0, agent.output()
    assert 'state="running"} 1' in text, text
    assert value(text, "launch_job_workers") == 2, text
    assert value(text, "launch_job_workers_done") == 1, text
    assert value(text, "launch_rank_progress_age_seconds", 0) is not None, text
    assert value(text, "launch_rank_progress_age_seconds", 1) is None, text
    assert value(text, "launch_rank_step", 1) == 4, text
    print("test_metrics_done: ok")


if __name__ == "__main__":
    main()
