"""Progress reports, the resume step and the checkpoint directory for a
trainer started by launch (docs/events.md#progress in launch's tree).

    from launch_progress import Reporter, resume_step
    report = Reporter()
    report(step, loss=2.31, lr=3e-4)

A report sets the job's store key launch/progress/<RANK> to the codec's
PROGRESS message: one msgpack map {step, time_ms, loss, grad_norm, lr,
step_time, tokens, total_steps, compute_time, tag} (only the scalars given),
or "<step> <unix ms> <tag>" when none are; the tag is LAUNCH_PROGRESS_TAG. The encoder needs only the standard
library."""
import atexit
import os
import struct
import time
import warnings

__all__ = ["Reporter", "encode_progress", "resume_step", "ckpt_dir",
           "FLOATS", "INTS"]
__version__ = "0.1.0"

FLOATS = ("loss", "grad_norm", "lr", "step_time", "compute_time")
INTS = ("tokens", "total_steps")


def _str(s):
    b = s.encode()
    return bytes([0xA0 | len(b)]) + b  # fixstr: every key is under 32 bytes


def encode_progress(step, time_ms=None, tag=None, **scalars):
    """The bytes of a progress key (rendezvous/msg.h, msg_progress_t). tag:
    the worker's LAUNCH_PROGRESS_TAG (default: from the environment), the
    agent's secret without which a value never arms hang detection."""
    if time_ms is None:
        time_ms = int(time.time() * 1000)
    if step < 0:
        raise ValueError("a step is >= 0")
    if tag is None:
        tag = os.environ.get("LAUNCH_PROGRESS_TAG", "")
    if len(tag) >= 32 or " " in tag:
        tag = ""  # not the agent's: left out
    if not scalars or all(v is None for v in scalars.values()):
        return b"%d %d" % (step, time_ms) + (b" " + tag.encode() if tag else b"")
    fields = [("step", int(step)), ("time_ms", int(time_ms))]
    for name in FLOATS + INTS:
        if scalars.get(name) is not None:
            fields.append((name, scalars.pop(name)))
        else:
            scalars.pop(name, None)
    if scalars:
        raise TypeError("unknown progress scalars: %s" % ", ".join(scalars))
    if tag:
        fields.append(("tag", tag))
    out = bytes([0x80 | len(fields)])
    for name, v in fields:
        out += _str(name)
        if name == "tag":
            out += _str(v)
        elif name in FLOATS:
            out += b"\xcb" + struct.pack(">d", float(v))
        else:
            out += b"\xd3" + struct.pack(">q", int(v))
    return out


def resume_step():
    """The step launch --ckpt-dir agreed to resume from, None for a fresh
    start."""
    v = os.environ.get("LAUNCH_RESUME_STEP", "")
    return int(v) if v else None


def ckpt_dir():
    """launch's --ckpt-dir (LAUNCH_CKPT_DIR), None without one."""
    return os.environ.get("LAUNCH_CKPT_DIR") or None


def _store():
    import torch.distributed as dist

    host, port = os.environ["LAUNCH_RDZV_ENDPOINT"].rsplit(":", 1)
    return dist.TCPStore(host.strip("[]"), int(port), is_master=False)


class Reporter:
    """report(step, **scalars) sets this rank's progress key. store: any
    object with set(key, bytes) (default: a TCPStore client of launch's
    server at LAUNCH_RDZV_ENDPOINT). Reports step 0 when created, so that
    a trainer that loads for minutes is seen alive. min_interval: least
    seconds between two reports (0 sends every one); a report that comes
    sooner is held, not sent (report() returns False), and the newest one
    held is sent by the next report after the interval, by flush(), by
    close() (or the end of a `with Reporter(...) as report:` block), and
    at the latest when the interpreter exits: the last step of a job is
    always reported. Not started by launch (plain python, torchrun: no
    LAUNCH_RDZV_ENDPOINT) and no store given, it warns once and reports
    nothing: report() returns False, and the trainer runs as it would
    without it."""

    def __init__(self, store=None, rank=None, min_interval=0.0,
                 first_step=0):
        if store is None and not os.environ.get("LAUNCH_RDZV_ENDPOINT"):
            warnings.warn("launch_progress: not started by launch (no "
                          "LAUNCH_RDZV_ENDPOINT): progress is not reported",
                          RuntimeWarning, stacklevel=2)
            self.store = None
        else:
            self.store = store if store is not None else _store()
        if rank is None:
            rank = os.environ.get("RANK", "0") if self.store is None \
                else os.environ["RANK"]
        self.key = "launch/progress/%d" % int(rank)
        self.min_interval = min_interval
        self.last = 0.0
        self.held = None  # the newest report min_interval held back
        if self.store is not None and min_interval:
            atexit.register(self._flush_at_exit)
        self(first_step)

    def __call__(self, step, **scalars):
        if self.store is None:
            return False
        # encoded now: the time of the step, and bad arguments raise here
        value = encode_progress(step, **scalars)
        now = time.monotonic()
        if self.min_interval and self.last and \
                now - self.last < self.min_interval:
            self.held = value
            return False
        self.last = now
        self.held = None
        self.store.set(self.key, value)
        return True

    def flush(self):
        """Send the report min_interval held back, if any. RET whether one
        was sent."""
        value, self.held = self.held, None
        if value is None or self.store is None:
            return False
        self.last = time.monotonic()
        self.store.set(self.key, value)
        return True

    def close(self):
        """flush(); a report after it is sent at once, none held."""
        atexit.unregister(self._flush_at_exit)
        self.min_interval = 0.0
        self.flush()

    def _flush_at_exit(self):
        try:
            self.flush()
        except Exception:  # the job's store may be gone already
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
