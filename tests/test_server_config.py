"""`launch server`'s settings as rows of the configuration table (issue #25):
--help lists the options but not the debug knobs, --help-debug lists each
knob with its LAUNCH_SERVER_* variable, a bad knob is refused naming the
variable (it used to be ignored), the command line beats the variable, and
a knob set either way reaches the running server: the trace it turns on
shows in the server's log, and is absent without it."""
import os
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

L = lt.launch_bin()
KNOBS = ["LAUNCH_SERVER_TRACE_MS", "LAUNCH_SERVER_TURN_US", "LAUNCH_SERVER_PASS_US",
         "LAUNCH_SERVER_PLAIN_LOCK", "LAUNCH_SERVER_LOCK_SPINS",
         "LAUNCH_SERVER_BIG_CACHE_MB"]


def run(args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCH_SERVER_")}
    e.update(env or {})
    p = subprocess.run([L] + args, capture_output=True, text=True, env=e, timeout=30)
    return p.returncode, p.stdout + p.stderr


def expect(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)


def ping(port):
    """One TCPStore PING (a callback of the server's loop)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"\x00\xce\xf7\x85\x3c" + b"\x0d" + struct.pack("<I", 77))
    expect(s.recv(4) == struct.pack("<I", 77), "PING answered")
    s.close()


def served_log(env, *args):
    """The log of a server started with env and args, pinged, then stopped."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        with lt.Server(*args) as srv:
            ping(srv.port)
            srv.stop()
            return srv.logtext()
    finally:
        os.environ.clear()
        os.environ.update(saved)


rc, helptext = run(["server", "--help"])
expect(rc == 0 and "--max-memory B" in helptext, "--help lists the limits")
expect("--help-debug" in helptext, "--help points to --help-debug")
rc, debug = run(["server", "--help-debug"])
expect(rc == 0 and "\ndebugging" in debug, "--help-debug has a debugging section")
for k in KNOBS:
    expect(k not in helptext, "--help hides the debug knob " + k)
    expect("(%s)" % k in debug, "--help-debug lists " + k)
    rc, out = run(["server", "--port", "0"], {k: "bogus"})
    expect(rc == 2 and "%s='bogus'" % k in out, "%s=bogus refused naming it: %s" % (k, out))
rc, out = run(["server", "--port", "0", "--lock-spins", "-1"])
expect(rc == 2 and "--lock-spins: '-1'" in out, "--lock-spins -1 refused: " + out)

off = served_log({"LAUNCH_SERVER_THREADS": "1"})
expect("trace:" not in off, "no trace without the knob:\n" + off)
on = served_log({"LAUNCH_SERVER_THREADS": "1", "LAUNCH_SERVER_TRACE_MS": "0.001"})
expect("trace: longest callback" in on, "LAUNCH_SERVER_TRACE_MS reaches the server:\n" + on)
flag = served_log({"LAUNCH_SERVER_THREADS": "x"}, "--trace-ms", "0.001", "--threads", "2")
expect("2 event loops" in flag, "--threads beats LAUNCH_SERVER_THREADS:\n" + flag)
expect("trace: longest callback" in flag, "--trace-ms reaches the server:\n" + flag)

# The server an agent hosts takes the knobs from LAUNCH_SERVER_* as well
# (the agent has no flags for them); a bad one stops the agent naming it.
agent = ["--standalone", "--nproc-per-node", "1", "--no-python", "/bin/true"]
rc, out = run(agent, {"LAUNCH_SERVER_TRACE_MS": "0.001"})
expect(rc == 0 and "trace: " in out, "the agent's server traces:\n" + out)
rc, out = run(agent)
expect(rc == 0 and "trace: " not in out, "no trace without the knob:\n" + out)
rc, out = run(agent, {"LAUNCH_SERVER_TURN_US": "abc"})
expect(rc == 2 and "LAUNCH_SERVER_TURN_US" in out, "a bad knob stops the agent: " + out)
print("ok")
