#!/usr/bin/env python3
"""Seeds of fuzz_status_vals: what `launch status` reads back after STATUS,
as the server replies (docs/protocol.md: [REPLY, id, 0, args...]): LIST of
the native launch/progress/ keys, LIST of the TCPStore namespace's, MGET of
their values, written by the ranks (docs/events.md#progress: the text
"<step> <unix ms>" or the PROGRESS map)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_corpus import REPLY, Bin, frame, mp, write  # noqa: E402

NS = "torch.ns/3//launch/progress/"  # RDZV_TORCH_NS round 3


def listing(rid, keys):
    return frame(mp([REPLY, rid, 0, [Bin(k.encode()) for k in keys]]))


def values(rid, vals):
    return frame(mp([REPLY, rid, 0, [None if v is None else Bin(v)
                                     for v in vals]]))


def prog(step, ms, **f):
    d = {"step": step, "time_ms": ms}
    d.update(f)
    return mp(d)


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                       "status_vals")
    t = 1764921600000
    native = ["launch/progress/%d" % r for r in range(4)]
    s = {}
    s["native_text"] = b"\x02" + listing(5, native) + listing(6, []) + \
        values(7, [b"%d %d" % (100 + r, t) for r in range(4)])
    s["native_map"] = b"\x02" + listing(5, native[:2]) + listing(6, []) + \
        values(7, [prog(120, t, loss=2.25, step_time=0.31, total_steps=1000,
                        tokens=524288, lr=6e-4, grad_norm=1.1),
                   prog(119, t - 900, loss=float("nan"), step_time=1.7,
                        total_steps=1000, compute_time=0.2)])
    s["tcpstore_ns"] = b"\x02" + listing(5, []) + \
        listing(6, ["/" + NS + "0", "/" + NS + "1"]) + \
        values(7, [b"5 %d" % t, b"6 %d tag" % t])
    s["missing_value"] = b"\x02" + listing(5, native[:3]) + listing(6, []) + \
        values(7, [b"1 %d" % t, None, b"not progress"])
    s["bad_rank_keys"] = b"\x02" + listing(5, ["launch/progress/x",
                                               "noslash", "a/-1",
                                               "a/1073741825"]) + \
        listing(6, []) + values(7, [b"1 1"] * 4)
    s["count_mismatch"] = b"\x02" + listing(5, native) + listing(6, []) + \
        values(7, [b"1 1"])
    s["list_error"] = b"\x02" + frame(mp([REPLY, 5, -1001, "no such"])) + \
        listing(6, native[:1]) + values(7, [b"3 3"])
    write(out, s)


if __name__ == "__main__":
    main()
