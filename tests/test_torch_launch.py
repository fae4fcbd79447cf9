"""launch with real PyTorch (Debian's 1.13, gloo on CPU):

1. The environment contract against Debian's torchrun: the same worker under
   both dumps its environment; every variable torchrun sets is set by launch
   with the same value, except the documented differences (port, run id,
   error file location, MASTER_ADDR spelling of loopback).
2. Seed 001 section 41's DDP check with gloo: --standalone --nproc-per-node 8
   prints allreduce=36 on all 8 ranks; two agents x 4 workers on 127.0.0.2
   and 127.0.0.3 also 36. Both with the default agent store (workers use
   launch's server as their TCPStore) and with --torch-store rank0."""
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

lt.need_torch()
PY = sys.executable

DUMP = r"""
import json, os, sys
json.dump({"env": dict(os.environ), "argv": sys.argv},
          open(os.path.join(sys.argv[1], "env.%s.json" % os.environ["RANK"]), "w"))
"""

DDP = r"""
import os, torch, torch.distributed as dist
def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    x = torch.tensor([float(rank + 1)])
    dist.all_reduce(x)
    print(f"rank={rank}, local_rank={local_rank}, world_size={world_size}, "
          f"allreduce={x.item():g}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
if __name__ == "__main__":
    main()
"""

# Variables of torchrun's contract (reference/torchrun.md section 2).
CONTRACT = ["LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
            "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
            "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS"]


def script(body):
    p = os.path.join(tempfile.mkdtemp(), "s.py")
    with open(p, "w") as f:
        f.write(body)
    return p


def clean_env():
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("PET_") or k == "OMP_NUM_THREADS":
            del e[k]
    e["PYTHON_EXEC"] = PY
    return e


def torchrun_env(nproc):
    d = tempfile.mkdtemp()
    # Debian's 1.13 torchrun needs --redirects/--tee to run on Python 3.11
    p = subprocess.run([PY, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node", str(nproc), "--monitor_interval", "0.1",
                        "--redirects", "0:1", "--tee", "0:1", script(DUMP), d],
                       capture_output=True, text=True, env=clean_env(), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return d


def launch_env(nproc, store):
    d = tempfile.mkdtemp()
    p = subprocess.run([lt.launch_bin(), "--standalone", "--nproc-per-node", str(nproc),
                        "--torch-store", store, script(DUMP), d],
                       capture_output=True, text=True, env=clean_env(), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return d


def load(d):
    out = {}
    for p in glob.glob(os.path.join(d, "env.*.json")):
        with open(p) as f:
            r = json.load(f)
        out[int(r["env"]["RANK"])] = r["env"]
    return out


def torch_version():
    import torch
    v = torch.__version__.split("+")[0].split(".")
    return int(v[0]), int(v[1])


def check_contract():
    t = load(torchrun_env(2))
    base = dict(os.environ)
    tv = torch_version()
    # torchrun >= 2.4 serves the workers' store from its agent, as launch
    # does by default; 1.13 lets rank 0 host it.
    torchrun_agent_store = tv >= (2, 4)
    for store in ("rank0", "agent"):
        ours = load(launch_env(2, store))
        assert sorted(t) == sorted(ours) == [0, 1]
        for rank in t:
            te, oe = t[rank], ours[rank]
            # every variable torchrun adds, launch adds too
            added = [k for k in te if k not in base or base[k] != te[k]]
            missing = [k for k in added if k not in oe]
            assert not missing, (store, missing)
            # and launch adds nothing else but what docs/launcher.md and
            # docs/nccl-env.md name: its own LAUNCH_*, the locked NCCL
            # profile (NCCL_*), multicast kept off, the signals variable
            # torchrun exports since 2025, and the async error name
            extra = sorted(k for k in oe if k not in te and (
                k not in base or base[k] != oe[k]) and not (
                k.startswith("LAUNCH_") or k.startswith("NCCL_") or k in (
                    "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                    "TORCHELASTIC_SIGNALS_TO_HANDLE",
                    "TORCH_NCCL_ASYNC_ERROR_HANDLING")))
            assert not extra, (store, "launch sets variables torchrun does "
                               "not, and the docs do not name", extra,
                               {k: oe[k] for k in extra})
            for k in CONTRACT:
                assert k in te and k in oe, (k, store)
                if k in ("MASTER_PORT", "TORCHELASTIC_RUN_ID"):
                    continue  # a free port and a fresh uuid each run
                if k == "MASTER_ADDR":
                    assert te[k] in ("localhost", "127.0.0.1") and oe[k] == "127.0.0.1"
                    continue
                if k == "TORCHELASTIC_ERROR_FILE":
                    suffix = "/attempt_0/%d/error.json" % rank
                    assert te[k].endswith(suffix) and oe[k].endswith(suffix), (te[k], oe[k])
                    continue
                if k == "TORCHELASTIC_USE_AGENT_STORE":
                    assert te[k] == ("True" if torchrun_agent_store else "False")
                    assert oe[k] == ("False" if store == "rank0" else "True")
                    continue
                assert te[k] == oe[k], (k, te[k], oe[k], store)
            # PyTorch < 2.2 reads NCCL_ASYNC_ERROR_HANDLING; from 2.2 the
            # TORCH_ name (and warns on every rank when it sees the old one):
            # launch gives each worker the name it reads only
            name, other = (("NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
                           if tv < (2, 2) else
                           ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"))
            assert te.get(name) == "1" and oe.get(name) == "1", (store, name)
            assert other not in oe, (store, other)


def check_ddp(store):
    ddp = script(DDP)
    p = subprocess.run([lt.launch_bin(), "--standalone", "--nproc-per-node", "8",
                        "--torch-store", store, ddp],
                       capture_output=True, text=True, env=clean_env(), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(8):
        assert "rank=%d, local_rank=%d, world_size=8, allreduce=36" % (r, r) in p.stdout, p.stdout
    # two agents x 4 workers on 127.0.0.2 and 127.0.0.3
    port = lt.free_port()
    ags = []
    try:
        for i in (2, 3):
            ags.append(lt.launch(["--nnodes", "2", "--nproc-per-node", "4",
                                  "--rdzv-backend", "c10d", "--rdzv-id", "ddp-" + store,
                                  "--rdzv-endpoint", "127.0.0.2:%d" % port,
                                  "--local-addr", "127.0.0.%d" % i, "--torch-store", store,
                                  ddp], env=dict(clean_env(), LAUNCH_HOSTNAME="host%d" % i)))
        outs = []
        for a in ags:
            rc = a.wait(600)
            outs.append(a.output())
            assert rc == 0, a.output()
        allout = "\n".join(outs)
        for r in range(8):
            assert "rank=%d, local_rank=%d, world_size=8, allreduce=36" % (r, r % 4) in allout, allout
    finally:
        for a in ags:
            a.kill()


def main():
    check_contract()
    check_ddp("agent")
    check_ddp("rank0")
    print("test_torch_launch: ok")


if __name__ == "__main__":
    main()
