"""`launch env` prints what a worker gets: for several sets of flags, the
environment `launch env --all --json --local-rank N` shows is the one a real
worker started by `launch` with the same flags finds, variable by variable.
Only the random part of the attempt directory differs (shown as XXXXXX),
and with --torch-store rank0 the port node 0 picks at start."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "py", "worker.py")
PY = sys.executable


def base_env():
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PET_", "NCCL_", "LAUNCH_", "TORCHELASTIC_"))}
    e.pop("OMP_NUM_THREADS", None)
    e["NCCL_DEBUG"] = "INFO"  # the user's debug setting: it stays
    e["NCCL_IB_DISABLE"] = "0"  # an inherited value the socket profile replaces
    e["NCCL_BUFFSIZE"] = "8388608"  # one it keeps
    return e


def shown(flags, local_rank, env):
    p = subprocess.run([lt.launch_bin(), "env", "--all", "--json", "--local-rank",
                        str(local_rank)] + flags, capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 0, (flags, p.stdout, p.stderr)
    return {v["key"]: v["value"] for v in json.loads(p.stdout)["vars"]}


def got(flags, local_rank, env):
    d = tempfile.mkdtemp(prefix="launch-envmatch-")
    p = subprocess.run([lt.launch_bin()] + flags + ["--no-python", PY, WORKER, d, "ok"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, (flags, p.stdout, p.stderr)
    recs = [r for r in lt.records(d) if r["env"]["LOCAL_RANK"] == str(local_rank)]
    assert len(recs) == 1, recs
    return recs[0]["env"]


def same(flags, local_rank, ignore=()):
    env = base_env()
    port = lt.free_port()
    flags = ["--rdzv-endpoint", "127.0.0.1:%d" % port, "--rdzv-id", "envmatch"] + flags
    # the program too: its interpreter's PyTorch decides a variable's name
    want = shown(flags + ["--no-python", PY, WORKER, "unused", "ok"], local_rank, env)
    have = got(flags, local_rank, env)
    # Python may coerce the C locale by setting LC_CTYPE in its own process.
    if "LC_CTYPE" not in want:
        have.pop("LC_CTYPE", None)
    rand = re.compile(r"_[0-9a-f]{6}/attempt_")
    diff = []
    for k in sorted(set(want) | set(have)):
        a, b = want.get(k), have.get(k)
        if a is not None and b is not None:
            a, b = rand.sub("_XXXXXX/attempt_", a), rand.sub("_XXXXXX/attempt_", b)
        if a != b and k not in ignore:
            diff.append("%s: launch env %r, worker %r" % (k, a, b))
    assert not diff, (flags, local_rank, diff)
    return want


def main():
    w = same(["--nproc-per-node", "2", "--cpu-bind", "none"], 1)
    assert w["RANK"] == "1" and w["OMP_NUM_THREADS"] == "1", w
    assert "LAUNCH_CPUS" not in w
    w = same(["--nproc-per-node", "4", "--cpu-bind", "numa", "--mem-bind", "local"], 3)
    assert w["LAUNCH_CPUS"] and w["LOCAL_WORLD_SIZE"] == "4", w
    # the binding's rows of the contract (issue 25), all of them, the same
    # in both: a node without HCA or GPU gets them empty, not missing
    for k in ("LAUNCH_CPUS", "LAUNCH_NUMA_NODE", "LAUNCH_GPU_BUSID", "LAUNCH_HCA",
              "LAUNCH_HCA_PORT", "LAUNCH_NETDEV", "LAUNCH_HCAS"):
        assert k in w, (k, w)
    assert re.fullmatch(r"-1|[0-9]+", w["LAUNCH_NUMA_NODE"]), w
    assert w["LAUNCH_HCA_PORT"] == "" or w["LAUNCH_HCA"], w
    if os.cpu_count() >= 2:
        w = same(["--nproc-per-node", "2", "--cpu-bind", "1:0"], 1)
        assert w["LAUNCH_CPUS"] == "0", w
    w = same(["--nccl-profile", "socket", "--role", "trainer", "--max-restarts", "2"], 0)
    assert w["NCCL_IB_DISABLE"] == "1" and w["NCCL_DEBUG"] == "INFO", w
    assert w["NCCL_BUFFSIZE"] == "8388608" and w["ROLE_NAME"] == "trainer", w
    assert w["LAUNCH_NCCL_PROFILE"] == "socket", w  # the profile's row
    # (`launch env` takes "--lint" as its own flag, "warn" as the program:
    # the program's PyTorch is not known there)
    w = same(["--allow-env-override", "--lint", "warn"], 0,
             ignore=("NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"))
    assert w["NCCL_DEBUG"] == "INFO", w
    w = same(["--torch-store", "rank0", "--nproc-per-node", "2"], 0, ignore=("MASTER_PORT",))
    assert w["TORCHELASTIC_USE_AGENT_STORE"] == "False", w
    assert w["NCCL_ASYNC_ERROR_HANDLING"] == "1", w
    d = tempfile.mkdtemp(prefix="launch-envmatch-logs-")
    token = os.path.join(d, "token")
    with open(token, "w") as f:
        f.write("s3cret\n")
    w = same(["--log-dir", d, "--token-file", token], 0)
    assert w["LAUNCH_ATTEMPT_DIR"].startswith(d + "/envmatch_"), w
    assert w["LAUNCH_RDZV_TOKEN_FILE"] == token, w
    # --ckpt-dir: `launch env` shows the checkpoint variables a worker gets
    # (issue 25: it omitted LAUNCH_CKPT_DIR and LAUNCH_CKPT_KEEP)
    ck = os.path.join(d, "ck")
    w = same(["--ckpt-dir", ck, "--ckpt-keep", "5"], 0)
    assert w["LAUNCH_CKPT_DIR"] == ck and w["LAUNCH_CKPT_KEEP"] == "5", w
    assert "LAUNCH_RESUME_STEP" not in w, w  # a fresh start
    print("test_env_match: ok")


if __name__ == "__main__":
    main()
