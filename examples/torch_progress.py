"""Progress reports from a PyTorch trainer for launch (hang detection with
`launch --hang-timeout S`, docs/launcher.md#hangs; the scalars in metrics,
events and `launch status`, docs/events.md#progress): each step sets the
job's store key launch/progress/<RANK> to one msgpack map
{step, time_ms, loss, grad_norm, lr, step_time, tokens, total_steps} (only
the scalars given), or to "<step> <unix time in ms>" when none are given.
LAUNCH_RDZV_ENDPOINT is launch's server, which speaks TCPStore; under the
default --torch-store agent it is also MASTER_ADDR:MASTER_PORT.

    launch --standalone --nproc-per-node 2 --hang-timeout 60 examples/torch_progress.py

The encoder needs nothing but the standard library (no msgpack package).
"""
import os
import struct
import time

FLOATS = ("loss", "grad_norm", "lr", "step_time", "compute_time")
INTS = ("tokens", "total_steps")


def _str(s):
    b = s.encode()
    return bytes([0xA0 | len(b)]) + b  # fixstr: every key is under 32 bytes


def encode_progress(step, time_ms=None, **scalars):
    """The bytes of a progress key: the codec's PROGRESS map (msg.h)."""
    if time_ms is None:
        time_ms = int(time.time() * 1000)
    if not scalars:
        return b"%d %d" % (step, time_ms)
    fields = [("step", int(step)), ("time_ms", int(time_ms))]
    for name in FLOATS + INTS:
        if scalars.get(name) is not None:
            fields.append((name, scalars.pop(name)))
    if scalars:
        raise TypeError("unknown progress scalars: %s" % ", ".join(scalars))
    out = bytes([0x80 | len(fields)])
    for name, v in fields:
        out += _str(name)
        if name in INTS or name in ("step", "time_ms"):
            out += b"\xd3" + struct.pack(">q", int(v))
        else:
            out += b"\xcb" + struct.pack(">d", float(v))
    return out


def progress_reporter():
    import torch.distributed as dist

    host, port = os.environ["LAUNCH_RDZV_ENDPOINT"].rsplit(":", 1)
    store = dist.TCPStore(host.strip("[]"), int(port), is_master=False)
    key = "launch/progress/" + os.environ["RANK"]

    def report(step, **scalars):
        store.set(key, encode_progress(step, **scalars))

    report(0)  # at once: a trainer that loads for minutes is not taken for hung
    return report


if __name__ == "__main__":
    report = progress_reporter()
    steps = int(os.environ.get("STEPS", "20"))
    for step in range(1, steps + 1):
        t0 = time.time()
        time.sleep(0.1)  # forward, backward, optimizer step
        # once a step, or about once a second when steps are short
        report(step, loss=4.0 / step, lr=3e-4, step_time=time.time() - t0,
               tokens=8192, total_steps=steps)
