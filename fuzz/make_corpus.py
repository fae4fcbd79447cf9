#!/usr/bin/env python3
"""make_corpus.py - write the seed corpus of every fuzz target under
fuzz/corpus/<target>/ from the wire formats (rendezvous/proto.h and
docs/protocol.md for the native protocol; the TCPStore opcodes of PyTorch
1.13 and >= 2.2 from reference/torchrun.md section 4). Deterministic: running
it again rewrites the same files. Inputs found by fuzzing are not written
here; they are kept in the same directories under their hash names.

usage: fuzz/make_corpus.py [OUT_DIR]   (default: fuzz/corpus next to this file)
"""
import os
import struct
import sys

# ---- msgpack, packed the way msgpack-c packs (smallest form) ---------------


class Bin(bytes):
    """A msgpack bin (proto_pack_bytes); plain str is a msgpack str."""


class Raw(bytes):
    """Bytes inserted as they are (hand-made encodings)."""


def mp(o):
    if isinstance(o, Raw):
        return bytes(o)
    if o is None:
        return b"\xc0"
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, int):
        if 0 <= o <= 0x7F:
            return bytes([o])
        if -32 <= o < 0:
            return struct.pack("b", o)
        if o >= 0:
            for tag, fmt, lim in ((0xCC, ">B", 0xFF), (0xCD, ">H", 0xFFFF),
                                  (0xCE, ">I", 0xFFFFFFFF),
                                  (0xCF, ">Q", 0xFFFFFFFFFFFFFFFF)):
                if o <= lim:
                    return bytes([tag]) + struct.pack(fmt, o)
        for tag, fmt, lo in ((0xD0, ">b", -0x80), (0xD1, ">h", -0x8000),
                             (0xD2, ">i", -0x80000000),
                             (0xD3, ">q", -0x8000000000000000)):
            if o >= lo:
                return bytes([tag]) + struct.pack(fmt, o)
    if isinstance(o, float):
        return b"\xcb" + struct.pack(">d", o)
    if isinstance(o, Bin):
        n = len(o)
        if n <= 0xFF:
            return b"\xc4" + bytes([n]) + o
        if n <= 0xFFFF:
            return b"\xc5" + struct.pack(">H", n) + o
        return b"\xc6" + struct.pack(">I", n) + o
    if isinstance(o, str):
        b = o.encode()
        n = len(b)
        if n <= 31:
            return bytes([0xA0 | n]) + b
        if n <= 0xFF:
            return b"\xd9" + bytes([n]) + b
        if n <= 0xFFFF:
            return b"\xda" + struct.pack(">H", n) + b
        return b"\xdb" + struct.pack(">I", n) + b
    if isinstance(o, list):
        n = len(o)
        h = (bytes([0x90 | n]) if n <= 15 else
             b"\xdc" + struct.pack(">H", n) if n <= 0xFFFF else
             b"\xdd" + struct.pack(">I", n))
        return h + b"".join(mp(x) for x in o)
    if isinstance(o, dict):
        n = len(o)
        h = bytes([0x80 | n]) if n <= 15 else b"\xde" + struct.pack(">H", n)
        return h + b"".join(mp(k) + mp(v) for k, v in o.items())
    raise TypeError(o)


def frame(body):
    return struct.pack(">I", len(body)) + body


REQ, REPLY, PUSH = 0, 1, 2
OP = dict(HELLO=1, PING=2, SET=3, GET=4, CHECK=5, ADD=6, CAS=7, WAIT=8,
          DELETE=9, NUMKEYS=10, APPEND=11, MGET=12, MSET=13, BARRIER=14,
          LIST=15, CANCEL=16, JOIN=32, HEARTBEAT=33, LEAVE=34, REPORT=35,
          STATUS=36, SUBSCRIBE=37, SETQ=17)
VAL = Bin(b"v" * 64)
NONCE = Bin(bytes(range(32)))


def req(rid, op, *args):
    return frame(mp([REQ, rid, OP[op]] + list(args)))


def native_seeds():
    s = {}
    hello = req(1, "HELLO", 1, "worker", "default", None, NONCE)
    s["hello"] = hello
    s["hello_token"] = req(1, "HELLO", 1, "agent", "job-42", Bin(b"\x5a" * 32),
                           NONCE)
    s["hello_bad_version"] = req(1, "HELLO", 99, "worker", "default", None,
                                 NONCE)
    ops = {
        "ping": req(2, "PING"),
        "set": req(3, "SET", "/key", VAL),
        "set_empty": req(3, "SET", "", Bin(b"")),
        "setq": req(3, "SETQ", "/key", VAL),
        "get": req(4, "GET", "/key", 30000),
        "get_nowait": req(4, "GET", "/key", 0),
        "get_forever": req(4, "GET", "/key", -1),
        "check": req(5, "CHECK", ["/a", "/b", "/c"]),
        "add": req(6, "ADD", "/counter", 1),
        "add_negative": req(6, "ADD", "/counter", -9223372036854775808),
        "cas_absent": req(7, "CAS", "/k", None, Bin(b"first")),
        "cas": req(7, "CAS", "/k", Bin(b"first"), Bin(b"second")),
        "wait": req(8, "WAIT", ["/a", "/b"], 1000),
        "wait_forever": req(8, "WAIT", ["/a"]),
        "delete": req(9, "DELETE", "/k"),
        "numkeys": req(10, "NUMKEYS"),
        "append": req(11, "APPEND", "/log", Bin(b"line\n")),
        "mget": req(12, "MGET", ["/a", "/b", "/c"], -1),
        "mset": req(13, "MSET", ["/a", Bin(b"1"), "/b", Bin(b"2")]),
        "barrier": req(14, "BARRIER", "exit", 4, 60000),
        "list": req(15, "LIST", "/"),
        "list_all": req(15, "LIST"),
        "cancel": req(16, "CANCEL", 8),
        "join": req(17, "JOIN", {"host": "node0", "nproc": 8, "rank": -1}),
        "heartbeat": req(18, "HEARTBEAT", 3),
        "join_types": req(19, "JOIN", {"host": "n1", "f": 1.5, "big": 1e30,
                                       "b": True, "nil": None, "l": [1, 2],
                                       "m": {"x": 1}, "": "empty",
                                       "bin": Bin(b"\x00\x01")}),
        # A map with a repeated key and a non-string key.
        "report_dup_keys": frame(
            b"\x94" + mp(REQ) + mp(20) + mp(OP["REPORT"]) + b"\x83" +
            mp("k") + mp(1) + mp("k") + mp(2) + mp(7) + mp("int key")),
    }
    s.update(ops)
    s["session"] = hello + b"".join(ops.values())
    # What a client decodes: the challenge push and replies.
    s["push_challenge"] = frame(mp([PUSH, 0, 1, NONCE, 1, False]))
    s["push_challenge_features"] = frame(
        mp([PUSH, 0, 1, NONCE, 1, False, 0xFFFFFFFF]))
    s["reply_ok"] = frame(mp([REPLY, 3, 0]))
    s["reply_value"] = frame(mp([REPLY, 4, 0, VAL]))
    s["reply_values"] = frame(mp([REPLY, 12, 0, [VAL, None, Bin(b"")]]))
    s["reply_error"] = frame(mp([REPLY, 4, -1001, "key not found"]))
    s["reply_cas"] = frame(mp([REPLY, 7, 0, Bin(b"second"), True]))
    # Every msgpack form once, in the args of a PING.
    forms = Raw(b"".join([
        b"\xc0", b"\xc2", b"\xc3", b"\x7f", b"\xe0",
        b"\xcc\xff", b"\xcd\xff\xff", b"\xce\xff\xff\xff\xff",
        b"\xcf\x7f\xff\xff\xff\xff\xff\xff\xff",
        b"\xd0\x80", b"\xd1\x80\x00", b"\xd2\x80\x00\x00\x00",
        b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00",
        b"\xca\x3f\x80\x00\x00", b"\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00",
        b"\xa3abc", b"\xd9\x03abc", b"\xda\x00\x03abc",
        b"\xdb\x00\x00\x00\x03abc",
        b"\xc4\x02xy", b"\xc5\x00\x02xy", b"\xc6\x00\x00\x00\x02xy",
        b"\xd4\x01a", b"\xd5\x01ab", b"\xd6\x01abcd", b"\xd7\x01" + b"a" * 8,
        b"\xd8\x01" + b"a" * 16, b"\xc7\x02\x01ab", b"\xc8\x00\x02\x01ab",
        b"\xc9\x00\x00\x00\x02\x01ab",
        b"\x92\x01\x02", b"\xdc\x00\x01\x01", b"\xdd\x00\x00\x00\x01\x01",
        b"\x81\x01\x02", b"\xde\x00\x01\x01\x02",
        b"\xdf\x00\x00\x00\x01\x01\x02"]))
    n_forms = 36
    body = bytes([0xDC]) + struct.pack(">H", 3 + n_forms) + mp(REQ) + mp(9) + \
        mp(OP["PING"]) + bytes(forms)
    s["all_forms"] = frame(body)
    # Flat frames (scalars only, at most 12 elements): proto_decode reads
    # them in one pass, checked against msgpack-c by the target.
    def flat(*forms):
        return frame(bytes([0x90 | (3 + len(forms))]) + mp(REQ) + mp(9) +
                     mp(OP["PING"]) + b"".join(forms))
    s["flat_ints"] = flat(b"\xc0", b"\xc2", b"\xc3", b"\x7f", b"\xe0",
                          b"\xcc\xff", b"\xcd\xff\xff",
                          b"\xce\xff\xff\xff\xff",
                          b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff")
    s["flat_signed"] = flat(b"\xd0\x80", b"\xd0\x7f", b"\xd1\x80\x00",
                            b"\xd1\x00\x01", b"\xd2\xff\xff\xff\xff",
                            b"\xd2\x00\x00\x00\x00",
                            b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00",
                            b"\xd3\x00\x00\x00\x00\x00\x00\x00\x05",
                            b"\xca\x3f\x80\x00\x00")
    s["flat_bytes"] = flat(b"\xa0", b"\xa3abc", b"\xd9\x00", b"\xd9\x03abc",
                           b"\xda\x00\x03abc", b"\xdb\x00\x00\x00\x03abc",
                           b"\xc4\x00", b"\xc4\x02xy", b"\xc5\x00\x02xy")
    s["flat_float64_bin32"] = flat(
        b"\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00",
        b"\xc6\x00\x00\x00\x02xy")
    s["flat_array16"] = frame(b"\xdc\x00\x04" + mp(REQ) + mp(9) +
                              mp(OP["GET"]) + b"\xa2/k")
    s["flat_set_get"] = (req(3, "SET", "/bench/0/1", VAL) +
                         req(4, "GET", "/bench/0/1", 0))
    # A header's id in each uint form, a negative op.
    s["flat_header_ids"] = (req(200, "SETQ", "/k", VAL) +
                            req(70000, "GET", "/k", 0) +
                            req(5000000000, "PING") +
                            frame(mp([REQ, 2**64 - 1, -5, "/k"])))
    s["flat_cut_str"] = frame(mp([REQ, 3, OP["SET"], "/k", VAL])[:-3] +
                              b"\xc0\xc0\xc0")
    s["flat_cut_int"] = frame(b"\x94\x00\x01\x02\xcf\x00")
    s["flat_trailing"] = frame(mp([REQ, 3, OP["GET"], "/k"]) + b"\xc0")
    s["flat_12"] = frame(mp([REQ, 2, OP["PING"]] + [1] * 9))
    s["flat_13"] = frame(mp([REQ, 2, OP["PING"]] + [1] * 10))
    s["flat_bad_kind"] = frame(mp([-1, 2, OP["PING"], "x"]))
    # Malformed and hostile frames.
    s["bad_reserved_c1"] = frame(b"\x93\x00\x01\xc1")
    s["bad_trailing"] = frame(mp([REQ, 2, OP["PING"]]) + b"\x00")
    s["bad_truncated_body"] = frame(mp([REQ, 3, OP["SET"], "/k", VAL]))[:-5]
    s["bad_short_array"] = frame(mp([REQ, 2]))
    s["bad_not_array"] = frame(mp({"kind": 0}))
    s["bad_kind"] = frame(mp([7, 2, OP["PING"]]))
    s["bad_id_negative"] = frame(mp([REQ, -1, OP["PING"]]))
    s["bad_op_string"] = frame(mp([REQ, 2, "ping"]))
    s["bad_op_huge"] = frame(mp([REQ, 2, 0xFFFFFFFFFFFFFFFF]))
    s["bomb_array32"] = frame(b"\xdd\xff\xff\xff\xff\x00")
    s["bomb_map32"] = frame(b"\xdf\xff\xff\xff\xff\x00\x00")
    s["bomb_str32"] = frame(b"\xdb\xff\xff\xff\xffabc")
    s["bomb_ext32"] = frame(b"\xc9\xff\xff\xff\xff\x01")
    s["bomb_deep"] = frame(b"\x91" * 20 + b"\x00")
    s["many_items"] = frame(mp([REQ, 2, OP["PING"]] + [None] * 1000))
    s["bomb_frame_len"] = b"\xff\xff\xff\xff" + mp([REQ, 2, OP["PING"]])
    s["partial_header"] = b"\x00\x00"
    s["empty_frame"] = frame(b"")
    return s


# ---- TCPStore ---------------------------------------------------------------

def u64(v):
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def u32(v):
    return struct.pack("<I", v)


def tstr(b):
    if isinstance(b, str):
        b = b.encode()
    return u64(len(b)) + b


V1 = dict(SET=0, COMPARE_SET=1, GET=2, ADD=3, CHECK=4, WAIT=5, GETNUMKEYS=6,
          WATCH_KEY=7, DELETE_KEY=8)
V2 = dict(VALIDATE=0, SET=1, COMPARE_SET=2, GET=3, ADD=4, CHECK=5, WAIT=6,
          GETNUMKEYS=7, DELETE_KEY=8, APPEND=9, MULTI_GET=10, MULTI_SET=11,
          CANCEL_WAIT=12, PING=13, QUEUE_PUSH=14, QUEUE_POP=15, QUEUE_LEN=16,
          LIST_KEYS=17, BARRIER=18)
MAGIC = 0x3C85F7CE
TVAL = b"v" * 64


def ts_ops(num):
    """Each op of a numbering (dict name -> opcode) as request bytes."""
    o = {}

    def op(name, *parts):
        if name in num:
            o[name.lower()] = bytes([num[name]]) + b"".join(parts)
    op("VALIDATE", u32(MAGIC))
    op("PING", u32(4242))
    op("SET", tstr("/key"), tstr(TVAL))
    op("COMPARE_SET", tstr("/cas"), tstr(b""), tstr(b"desired"))
    op("GET", tstr("/key"))
    op("ADD", tstr("/counter"), u64(1))
    op("CHECK", u64(2), tstr("/a"), tstr("/b"))
    op("WAIT", u64(1), tstr("/key"))
    op("GETNUMKEYS")
    op("WATCH_KEY", tstr("/watched"))
    op("DELETE_KEY", tstr("/key"))
    op("APPEND", tstr("/log"), tstr(b"line\n"))
    op("MULTI_GET", u64(2), tstr("/a"), tstr("/b"))
    op("MULTI_SET", u64(2), tstr("/a"), tstr(b"1"), tstr("/b"), tstr(b"2"))
    op("CANCEL_WAIT")
    op("QUEUE_PUSH", tstr("/q"), tstr(b"item"))
    op("QUEUE_POP", tstr("/q"))
    op("QUEUE_LEN", tstr("/q"))
    op("LIST_KEYS")
    op("BARRIER", tstr("/barrier"), u64(8))
    return o


def tcpstore_seeds(num, v2):
    s = {}
    ops = ts_ops(num)
    validate = ops.get("validate", b"")
    for name, b in ops.items():
        s[name] = validate + b if v2 and name != "validate" else b
    n = num

    def r(name, *parts):
        return bytes([n[name]]) + b"".join(parts)
    # What a PyTorch client sends: init_process_group's store traffic.
    if v2:
        # 2.5+ connect: VALIDATE, PING, ADD init/, WAIT init/, GET init/.
        s["session_connect"] = (r("VALIDATE", u32(MAGIC)) + r("PING", u32(77))
                                + r("ADD", tstr("init/"), u64(1))
                                + r("WAIT", u64(1), tstr("init/"))
                                + r("GET", tstr("init/")))
        s["session_queue"] = validate + ops["queue_push"] + \
            r("WAIT", u64(1), tstr("/q")) + ops["queue_pop"] + ops["queue_len"]
        s["session_cancel"] = validate + r("WAIT", u64(1), tstr("/never")) + \
            ops["cancel_wait"]
        s["multi_set_negative"] = validate + r("MULTI_SET", u64(-1))
        s["bad_validate_magic"] = r("VALIDATE", u32(0x12345678))
        s["bad_op"] = validate + bytes([19])
    else:
        s["bad_op"] = bytes([9])
    # torch's get() is WAIT then GET; set with the "/" prefix.
    s["session_store"] = validate + b"".join([
        r("ADD", tstr("init/"), u64(1)),
        r("SET", tstr("/rank0"), tstr(b"addr:1234")),
        r("WAIT", u64(2), tstr("/rank0"), tstr("/rank1")),
        r("SET", tstr("/rank1"), tstr(b"addr:5678")),
        r("GET", tstr("/rank0")),
        r("COMPARE_SET", tstr("/state"), tstr(b""), tstr(b"s0")),
        r("COMPARE_SET", tstr("/state"), tstr(b"s0"), tstr(b"s1")),
        r("CHECK", u64(1), tstr("/state")),
        r("ADD", tstr("/counter"), u64(-5)),
        r("GETNUMKEYS"),
        r("DELETE_KEY", tstr("/state")),
    ])
    s["empty_key_value"] = validate + r("SET", tstr(b""), tstr(b""))
    s["truncated_set"] = validate + r("SET", tstr("/key"), tstr(TVAL))[:-10]
    s["huge_key_len"] = validate + r("GET", u64(1 << 63))
    s["huge_value_len"] = validate + r("SET", tstr("/k"), u64(0xFFFFFFFFFFFF))
    s["huge_count"] = validate + r("WAIT", u64(1 << 40))
    s["zero_count"] = validate + r("CHECK", u64(0))
    s["big_key"] = validate + r("SET", tstr(b"k" * 300), tstr(b"v" * 300))
    return s


# ---- util strings -----------------------------------------------------------

ENDPOINT = [
    "127.0.0.1:29400", "localhost", "node-01.cluster_a:1", "[::1]:29500",
    "[::1]", "::1", "fe80::1%eth0", "[fe80::1%eth0]:80",
    "unix:/tmp/launch.sock",
    "unix:", "host:", ":80", "host:65535", "host:65536", "host:-1", "host:+80",
    "[::1]x", "[]:1", "[::1", "a b:1", "host:80:90",
    "30", "30s", "500ms", "2m", "5min", "1.5s", "1h", "0", "nan", "inf",
    "1e308", "1e-400", "-1", "0x10", " 5", "5 ", "9223372036854775807",
    "-9223372036854775808", "9223372036854775808", "+0", "-", "+", "",
]


HOSTLIST = [
    "gpu[01-04,07],login1", "rack[0-1]_blade[0-2]", "node1", "a,b,c",
    "n[9-11]", "n[007-010]", "x[1]y[2]z[3]", "h[0-3],h[5]", "[1-2]",
    "n[]", "n[1-]", "n[-1]", "n[2-1]", "n[1,,2]", "n[[1]]", "n]1[", "n[1",
    ",", "a,,b", "n[9223372036854775807]", "n[0-999999]", "",
    # Slurm's task counts per node, read from the same input
    "2(x3),1", "8", "1,2(x2),4", "2(x0)", "2(3)", "2,", "8(x4)",
]


# ---- the rendezvous messages (rendezvous/msg.h) --------------------------------

FINGERPRINT = "launch-fingerprint 1\nenv.NCCL_DEBUG=WARN\nprofile=auto\n"
FAILURE = {"host": "node3", "rank": 3, "local_rank": 1, "node_rank": 1,
           "pid": 4242, "exit_code": 1, "signal": 0, "time": 1764477916.25,
           "tail": "Traceback ...\nValueError: x\n", "error": "ValueError: x",
           "attempt_dir": "/tmp/launch_j_abc123/attempt_0"}
MEMBER = {"host": "node0", "addr": "10.0.0.1", "node_rank": 0, "nproc": 8,
          "base_rank": 0, "state": "running", "heartbeat_age_ms": 120,
          "in_round": True}
# The first byte picks the message (fuzz_msg.c's order).
MSGS = ["join", "round", "report", "leave", "restart", "shutdown", "status",
        "failure", "member"]


def msg_seeds():
    good = {
        "join": {"host": "node0", "addr": "10.0.0.1", "nproc": 8, "rank": -1,
                 "min": 2, "max": 4, "last_call_ms": 30000,
                 "join_timeout_ms": 600000, "heartbeat_ms": 5000,
                 "max_restarts": 3, "static": False, "allow_mismatch": True,
                 "master_port": 29500, "expected": ["node0", "node1"],
                 "fingerprint": FINGERPRINT},
        "round": {"round": 2, "node_rank": 1, "nnodes": 4, "world_size": 32,
                  "base_rank": 8, "master_port": 0, "addr": "10.0.0.2",
                  "node0_addr": "10.0.0.1", "node0_host": "node0"},
        "report": {"round": 0, "ok": False, "failure": FAILURE},
        "leave": {"reason": "agent received SIGTERM"},
        "restart": {"round": 1, "reason": "rank 3 on node3 failed"},
        "shutdown": {"ok": False, "reason": "rank 3 on node3 failed",
                     "root": FAILURE, "restarts": 3, "max_restarts": 3},
        "status": {"job": "j", "state": "running", "round": 1, "restarts": 1,
                   "max_restarts": 3, "min": 2, "max": 4, "waited_ms": 0,
                   "reason": "", "expected": ["node0"],
                   "members": [MEMBER, dict(MEMBER, host="node1",
                                            in_round=False, node_rank=-1)]},
        "failure": FAILURE,
        "member": MEMBER,
    }
    s = {}
    for i, name in enumerate(MSGS):
        s[name] = bytes([i]) + mp(good[name])
        s[name + "_empty"] = bytes([i]) + mp({})
        s[name + "_not_map"] = bytes([i]) + mp([1, 2])
    s["join_wrong_types"] = bytes([0]) + mp({"nproc": "8", "static": 2,
                                             "expected": "node0"})
    s["join_long_host"] = bytes([0]) + mp({"host": "h" * 300})
    s["join_nul_in_host"] = bytes([0]) + mp({"host": "a\x00b"})
    s["join_nil_fields"] = bytes([0]) + mp({"host": None, "fingerprint": None})
    s["round_float_for_int"] = bytes([1]) + mp({"round": 1.5})
    s["report_ok_as_int"] = bytes([2]) + mp({"round": 0, "ok": 1})
    s["status_bad_member"] = bytes([6]) + mp({"members": [MEMBER, 3]})
    s["status_unknown_keys"] = bytes([6]) + mp({"x": [1, {"y": None}],
                                                 "members": []})
    s["failure_negative_time"] = bytes([7]) + mp(dict(FAILURE, time=-1))
    # The checkpoint agreement's store values (10: VIEW, 11: VERDICT).
    s["ckpt_view"] = bytes([10]) + mp({"host": "node1", "first": 4, "nranks": 4,
                                       "steps": [{"step": 300, "world_size": 8,
                                                  "replicated": 0, "ranks": "0-3,6"}]})
    s["ckpt_view_bad_step"] = bytes([10]) + mp({"steps": [{"step": "x"}, 3]})
    s["ckpt_verdict"] = bytes([11]) + mp({"ok": False, "problem": "rank-2.bin: SHA-256"})
    return s


def hello_seeds():
    """What a server sends a client: flags byte, CHALLENGE, HELLO's reply
    (fuzz/fuzz_hello.c)."""
    def challenge(auth):
        return frame(mp([PUSH, 0, 1, NONCE, 1, auth]))

    def reply(*res):
        return frame(mp([REPLY, 1, 0] + list(res)))
    s = {}
    s["open_server"] = b"\x00" + challenge(False) + reply(None)
    s["features"] = (b"\x00" + frame(mp([PUSH, 0, 1, NONCE, 1, False, 1]))
                     + reply(None))
    s["features_unknown"] = (b"\x00" +
                             frame(mp([PUSH, 0, 1, NONCE, 1, False, 2**40 + 3]))
                             + reply(None))
    s["token_wrong_proof"] = b"\x01" + challenge(True) + reply(Bin(bytes(32)))
    s["token_right_proof"] = b"\x03" + challenge(True) + reply(Bin(bytes(32)))
    s["token_needed"] = b"\x00" + challenge(True)
    s["token_no_proof"] = b"\x01" + challenge(True) + reply(None)
    s["job_from_input"] = (b"\x07" + b"job-42/with spaces\x00" + challenge(True)
                           + reply(Bin(bytes(32))))
    s["error_reply"] = (b"\x01" + challenge(False)
                        + frame(mp([REPLY, 1, -1002, "authentication failed"])))
    s["not_a_challenge"] = b"\x01" + frame(mp([REPLY, 0, 0]))
    s["short_nonce"] = b"\x00" + frame(mp([PUSH, 0, 1, Bin(b"x" * 31), 1]))
    s["garbage"] = b"\x05" + b"\x00\x00\x00\x03\xc1\xc1\xc1"
    return s


# ---- topocache: the topology cache file (affinity/aff_tcache.c) ----------
# The target decodes with the key "key fuzz 1": a 2-socket machine with 2
# GPUs, an HCA and an Ethernet NIC as launch writes it, and hostile
# variants; the fixture_* seeds are launch's own files for tests/topo.
TOPO_KEY = "launch-topo-full 1\nkey fuzz 1\nkey end\n"
TOPO_BODY = """host node-0
cpus 8 4
allowed 0-7
numa 0 0-1,4-5
numa 1 2-3,6-7
core 0,4
core 1,5
core 2,6
core 3,7
gpu 0000:04:00.0 Tesla%20V100-PCIE-32GB GPU-5eed0000-0000-4000-8000-000000000000 0 0 0 4318 7606 0 0-1,4-5 -1 7 0 16 16 8 8 15.753846168518066 4 65 65 0 0000:04:00.0 0000:03:08.0 0000:02:00.0 hb:0000:00
gpu 0000:86:00.0 Tesla%20V100-PCIE-32GB - 0 0 34359738368 4318 7606 1 2-3,6-7 -1 7 -1 16 16 8 8 15.753846168518066 4 128 128 0 0000:86:00.0 0000:85:08.0 0000:84:00.0 hb:0000:80
nic 0000:18:00.0 mlx5_0 mlx5_0 ib0 100%20Gb/sec%20(4X%20EDR) InfiniBand 5555 4119 0 1 1 4 100 8 16 8 8 7.8769230842590332 3 65 65 0 0000:18:00.0 0000:17:00.0 hb:0000:00
nic 0000:3d:00.0 eno1 - eno1 - - 32902 5475 -1 0 0 -1 0 4 4 8 8 3.9384615421295166 1 0 0 12345 0000:3d:00.0
"""


def fnv64(b):
    h = 14695981039346656037
    for c in b:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def topo_file(body, key=TOPO_KEY):
    text = (key + body).encode()
    return text + b"end %016x\n" % fnv64(text)


def topocache_seeds():
    good = topo_file(TOPO_BODY)
    bad_line = TOPO_BODY.replace("cpus 8 4", "cpus 8 4 4")
    return {
        "two_sockets": good,
        "no_devices": topo_file("host -\ncpus 1 1\nallowed -\ncore 0\n"),
        "bad_sum": good[:-3] + b"00\n",
        "truncated": good[: len(good) // 2],
        "other_key": topo_file(TOPO_BODY, TOPO_KEY.replace("fuzz 1", "fuzz 2")),
        "extra_token": topo_file(bad_line),
        "bad_escape": topo_file(TOPO_BODY.replace("%20", "%2", 1)),
        "nul_escape": topo_file(TOPO_BODY.replace("%20", "%00", 1)),
        "huge_numbers": topo_file(TOPO_BODY.replace(" 4318 7606 0 ", " 4318 99999999999999999999 0 ", 1)),
        "deep_io": topo_file(TOPO_BODY.replace(" 4 65 65 0 ", " 17 65 65 0 ", 1)),
        "cpu_4096": topo_file(TOPO_BODY.replace("core 3,7", "core 4096")),
        "out_of_order": topo_file("cpus 8 4\nhost x\nallowed 0\n"),
        "nan_link": topo_file(TOPO_BODY.replace("15.753846168518066", "nan", 1)),
    }


def write(dirname, seeds):
    os.makedirs(dirname, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(dirname, name), "wb") as f:
            f.write(data)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
    write(os.path.join(out, "frame"), native_seeds())
    write(os.path.join(out, "msg"), msg_seeds())
    write(os.path.join(out, "hello"), hello_seeds())
    write(os.path.join(out, "tcpstore_v1"), tcpstore_seeds(V1, False))
    write(os.path.join(out, "tcpstore_v2"), tcpstore_seeds(V2, True))
    write(os.path.join(out, "topocache"), topocache_seeds())
    # The whole server sniffs the protocol from the first byte.
    server = {}
    for name, data in native_seeds().items():
        server["native_" + name] = b"RDZV" + data
    for prefix, num, v2 in (("v1_", V1, False), ("v2_", V2, True)):
        for name, data in tcpstore_seeds(num, v2).items():
            server[prefix + name] = data
    server["bad_first_byte"] = b"GET / HTTP/1.0\r\n\r\n"
    server["bad_magic"] = b"RDZX"
    server["native_no_hello"] = b"RDZV" + req(2, "PING")
    # A node's life in a rendezvous: join, heartbeat, status, a failure
    # report (a restart), a success report, leave.
    hello = req(1, "HELLO", 1, "agent", "job-7", None, NONCE)
    join = {"host": "node0", "addr": "10.0.0.1", "nproc": 8, "rank": 0,
            "min": 1, "max": 1, "last_call_ms": 0, "join_timeout_ms": 1000,
            "heartbeat_ms": 100, "max_restarts": 2, "static": False,
            "fingerprint": FINGERPRINT, "expected": ["node0"],
            "master_port": 29500}
    server["native_rdzv_session"] = b"RDZV" + hello + b"".join([
        req(2, "JOIN", join), req(3, "HEARTBEAT"), req(4, "STATUS"),
        req(5, "REPORT", {"round": 0, "ok": False, "failure": FAILURE}),
        req(6, "JOIN", join), req(7, "REPORT", {"round": 1, "ok": True}),
        req(8, "LEAVE", {"reason": "done"})])
    server["native_rdzv_waiting"] = b"RDZV" + hello + req(
        2, "JOIN", dict(join, min=2, max=4, rank=-1, static=True))
    # Several clients in one input (fuzz_server.c: SEP between streams).
    SEP = b"\xfe\xed<next connection>\xfe\xed"
    v = ts_ops(V2)["validate"]

    def node(name, rank, *more):
        return b"RDZV" + hello + b"".join(
            [req(2, "JOIN", dict(join, host=name, rank=rank, min=2, max=2,
                                 expected=["a", "b"]))] + list(more))
    server["multi_rdzv_two_nodes"] = SEP.join([
        node("a", 0, req(3, "HEARTBEAT"),
             req(4, "REPORT", {"round": 0, "ok": True})),
        node("b", 1, req(3, "STATUS"),
             req(4, "REPORT", {"round": 0, "ok": True}))])
    server["multi_rdzv_fail_restart"] = SEP.join([
        node("a", 0, req(3, "REPORT", {"round": 0, "ok": False, "failure":
                                        dict(FAILURE, exit_code=3, rank=0)}),
             req(4, "JOIN", dict(join, host="a", min=2, max=2))),
        node("b", 1), node("c", -1)])
    server["multi_ts_wait_set"] = SEP.join([
        v + bytes([V2["WAIT"]]) + u64(1) + tstr("/k") +
        bytes([V2["GET"]]) + tstr("/k"),
        v + bytes([V2["SET"]]) + tstr("/k") + tstr(b"value")])
    server["multi_native_barrier"] = SEP.join(
        [b"RDZV" + req(1, "HELLO", 1, "worker", "j", None, NONCE) +
         req(2, "BARRIER", "b", 3, -1) + req(3, "WAIT", ["/x"], -1)] * 2 +
        [b"RDZV" + req(1, "HELLO", 1, "worker", "j", None, NONCE) +
         req(2, "SET", "/x", VAL) + req(3, "BARRIER", "b", 3, 5000)])
    server["multi_mixed"] = SEP.join([
        b"RDZV" + req(1, "HELLO", 1, "worker", "default", None, NONCE) +
        req(2, "SET", "/shared", VAL),
        bytes([V1["WAIT"]]) + u64(1) + tstr("/shared") +
        bytes([V1["GET"]]) + tstr("/shared"),
        v + bytes([V2["ADD"]]) + tstr("/shared") + u64(1),
        v + bytes([V2["MULTI_GET"]]) + u64(1) + tstr("/shared")])
    server["native_rdzv_bad_join"] = b"RDZV" + hello + req(
        2, "JOIN", dict(join, min=0, nproc=-1)) + req(3, "JOIN", "not a map")
    write(os.path.join(out, "server"), server)
    ep = {}
    for i, text in enumerate(ENDPOINT):
        safe = "".join(c if c.isalnum() else "_" for c in text)
        ep["s%02d_%s" % (i, safe)] = text.encode()
    write(os.path.join(out, "endpoint"), ep)
    hl = {}
    for i, text in enumerate(HOSTLIST):
        safe = "".join(c if c.isalnum() else "_" for c in text)
        hl["h%02d_%s" % (i, safe)] = text.encode()
    write(os.path.join(out, "hostlist"), hl)


if __name__ == "__main__":
    main()
