"""Helpers for Python tests: start `launch server` by pid, free ports,
skip when a peer is missing (exit 77 = ctest skip)."""
import os
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77


def launch_bin():
    return os.environ.get("LAUNCH_BIN", "build/bin/launch")


def skip(why):
    print("SKIP: " + why)
    sys.exit(SKIP)


def need_torch():
    try:
        import torch  # noqa: F401
        import torch.distributed  # noqa: F401
    except Exception as e:  # pragma: no cover - environment dependent
        skip("PyTorch is not importable by %s: %s" % (sys.executable, e))


class Server:
    """`launch server` on 127.0.0.1 with an OS-chosen port, ended by pid."""

    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="launch-pytest-")
        pf = os.path.join(self.dir, "port")
        self.log = open(os.path.join(self.dir, "server.log"), "w+")
        self.proc = subprocess.Popen(
            [launch_bin(), "server", "--host", "127.0.0.1", "--port", "0",
             "--port-file", pf] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            if os.path.exists(pf):
                with open(pf) as f:
                    txt = f.read().strip()
                if txt:
                    self.port = int(txt)
                    return
            if self.proc.poll() is not None:
                raise RuntimeError("launch server exited: " + self.logtext())
            time.sleep(0.01)
        raise RuntimeError("launch server did not start")

    def logtext(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("launch server ignored SIGTERM")
            if rc != 0:
                raise RuntimeError("launch server exited %d: %s" % (rc, self.logtext()))

    def __enter__(self):
        return self

    def __exit__(self, *a):
        try:
            self.stop()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
