"""The job's page on the metrics port (GET /, docs/monitoring.md#page),
looked at in headless Chromium (Debian's chromium): train_gpt on CPU under
--ckpt-dir, a worker SIGKILLed after the first checkpoint, the job resumed.
Chromium renders the page and takes a screenshot; in the DOM it rendered,
the loss curve (inline SVG, no JavaScript) holds points that are the losses
train_gpt printed for those steps, the restart is marked, and the ranks'
table lists both ranks. Skips without libevent or chromium."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

BIN = os.path.dirname(os.path.abspath(lt.launch_bin()))
TRAIN = os.path.join(BIN, "train_gpt")


def get(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.headers.get("Content-Type"), r.read().decode()


def main():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        lt.skip("chromium missing (Debian's chromium)")
    d = tempfile.mkdtemp(prefix="launch-page-")
    try:
        with lt.Cleanup() as c:
            agent = c.add(lt.launch(
                ["--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                 "--stop-timeout", "5", "--metrics-port", "127.0.0.1:0",
                 "--ckpt-dir", os.path.join(d, "ck"), TRAIN, "--preset", "tiny",
                 "--val-batches", "1", "--threads", "1", "--steps", "100000",
                 "--val-every", "0", "--log-every", "1", "--ckpt-every", "5"],
                name="agent"))
            port = []

            def printed():
                out = agent.output()
                if "without libevent" in out:
                    lt.skip("launch was built without libevent")
                assert agent.running(), out
                m = re.search(r"on http://127\.0\.0\.1:(\d+)/metrics", out)
                port[:] = [int(m.group(1))] if m else []
                return bool(port)
            lt.wait_until(printed, 30, "the metrics port")
            url = "http://127.0.0.1:%d/" % port[0]
            lt.wait_until(lambda: os.path.exists(
                os.path.join(d, "ck", "latest")) and
                "data-points" in get(url)[1], 120, "a checkpoint and a curve")
            # rank 1: the agent's child whose environment has RANK=1
            pids = [int(x) for x in subprocess.check_output(
                ["pgrep", "-P", str(agent.pid)]).split()]
            pid = [x for x in pids if b"\0RANK=1\0" in b"\0" + open(
                "/proc/%d/environ" % x, "rb").read()][0]
            os.kill(pid, signal.SIGKILL)
            lt.wait_until(lambda: 'class="restart" data-round="1"' in
                          get(url)[1] and len(re.findall(
                              r"\d+:[\d.]+ ", get(url)[1])) >= 4, 120,
                          "the restart on the page, and points after it")
            ctype, _ = get(url)
            assert ctype.startswith("text/html"), ctype
            shot = os.path.join(d, "page.png")
            common = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
                      "--user-data-dir=" + os.path.join(d, "chromium"),
                      "--window-size=900,900"]
            p = c.add(lt.Proc(common + ["--screenshot=" + shot, url],
                              name="chromium-shot"))
            assert p.wait(120) == 0, p.output()
            with open(shot, "rb") as f:
                png = f.read()
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, len(png)
            p = c.add(lt.Proc(common + ["--dump-dom", url], name="chromium-dom"))
            assert p.wait(120) == 0, p.output()
            dom = p.output()
            out = agent.output()
            agent.signal(signal.SIGTERM)
            agent.wait(60)
        assert '<svg id="loss"' in dom and "<polyline" in dom, dom[-3000:]
        assert 'class="restart" data-round="1"' in dom, dom[-3000:]
        assert "<script" not in dom.lower()
        rows = re.findall(r"<tr><td>(\d+)</td>", dom)
        assert rows == ["0", "1"], rows
        # every point of the curve is a loss train_gpt printed for its step
        said = {}
        for m in re.finditer(r"step +(\d+)/\d+ \| loss ([\d.]+)", out):
            said.setdefault(int(m.group(1)), set()).add(float(m.group(2)))
        pts = [(int(s), float(v)) for s, v in
               re.findall(r"(\d+):([\d.]+) ", " ".join(
                   re.findall(r'data-points="([^"]*)"', dom)) + " ")]
        assert len(pts) >= 4, dom[-3000:]
        for s, v in pts:
            assert s in said and any(abs(v - x) < 2e-6 for x in said[s]), \
                (s, v, said.get(s))
        print("page: rendered by chromium (%d byte screenshot); %d curve "
              "points, each a loss train_gpt printed; restart 1 marked" %
              (len(png), len(pts)))
    finally:
        shutil.rmtree(d)
    print("test_page: ok")


if __name__ == "__main__":
    main()
