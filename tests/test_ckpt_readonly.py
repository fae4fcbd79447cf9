#!/usr/bin/env python3
"""Other trainers' checkpoints are read-only to launch (issue #22).

Under default flags (`launch --ckpt-dir D`, layout detected), a job of 2
ranks starts, fails once, and restarts, over directories launch did not
write: DeepSpeed's `latest` and global_stepN/, a DCP folder with a user's
`latest -> step-40` symlink and a partial step-50/, step-N/ folders whose
DCP .metadata does not parse, DCP steps named checkpoint-N/ and DCP steps
saved without collectives (one __R.metadata per rank, no .metadata). Every
file, directory and symlink is hashed before and after: nothing may change,
and the workers of both rounds must get the expected LAUNCH_RESUME_STEP.
Launch's own layout, by contrast, is still rolled back (a partial step
becomes abandoned-step-N-T).

Pruning, once launch finalises a step, removes only what launch made: its
own abandoned-step-N-T directories, not a user's file or another program's
directory under such a name, a `.deleting-` folder it did not rename, a
user's `.x.tmp-...` file; and it neither writes into nor sweeps a
symlinked step-N whose target lies outside the directory."""
import hashlib
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "py"))
sys.path.insert(0, HERE)
import launchtest as lt  # noqa: E402
import test_ckpt_layouts as tl  # noqa: E402

# Round 0: rank 0 fails once rank 1 has written its line; round 1 ends well.
WORKER = r'''
echo "$LAUNCH_ROUND ${LAUNCH_RESUME_STEP:-none}" >> "$OUT/rank-$RANK.txt"
[ "$LAUNCH_ROUND" = 0 ] || exit 0
[ "$RANK" = 0 ] || exec sleep 60
i=0
while [ ! -s "$OUT/rank-1.txt" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
exit 1
'''


def start(ck, out):
    """launch with default flags over ck, 2 ranks, one restart allowed.
    RET (exit status, output)."""
    os.makedirs(out)
    env = dict(os.environ, OUT=out)
    return lt.launch_wait(["--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                           "--stop-timeout", "5", "--ckpt-dir", ck,
                           "--no-python", "/bin/sh", "-c", WORKER], env=env, name="readonly")


def run_job(ck, out, expect_step):
    """2 ranks, round 0 fails, round 1 succeeds; both rounds must be handed
    expect_step (None: a fresh start)."""
    rc, log = start(ck, out)
    tl.expect(rc == 0, "launch exited %d\n%s" % (rc, log))
    want = "none" if expect_step is None else str(expect_step)
    for r in (0, 1):
        with open(os.path.join(out, "rank-%d.txt" % r)) as f:
            lines = f.read().split()
        tl.expect(lines == ["0", want, "1", want],
                  "rank %d got rounds/steps %s, expected resume step %s in both rounds\n%s"
                  % (r, lines, want, log))
    return log


def case(tmp, name, build, expect_step, refused=None):
    """refused: the job must end at once with exit 2 and this message."""
    ck = os.path.join(tmp, name)
    build(ck)
    before = lt.tree_hash(ck)
    if refused:
        rc, log = start(ck, os.path.join(tmp, name + "-out"))
        tl.expect(rc == 2 and refused in log, "%s: expected exit 2 and '%s', got %d\n%s"
                  % (name, refused, rc, log))
    else:
        log = run_job(ck, os.path.join(tmp, name + "-out"), expect_step)
    after = lt.tree_hash(ck)
    changed = lt.tree_diff(before, after)
    tl.expect(not changed, "%s: launch changed another trainer's checkpoint: %s\n"
              "before: %s\nafter: %s\n%s" % (name, changed, sorted(before),
                                              sorted(after), log))
    print("ok: %s (%d entries unchanged, resume step %s)" % (name, len(before), expect_step))
    return log


def deepspeed(ck):
    tl.ds_step(ck, 10, dp=2)
    tl.ds_step(ck, 20, dp=2, skip=("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",))
    tl.write(os.path.join(ck, "latest"), "global_step10")


def deepspeed_partial_latest(ck):
    deepspeed(ck)
    tl.write(os.path.join(ck, "latest"), "global_step20")


def deepspeed_tag_step(ck):
    """DeepSpeed with a custom tag that looks like launch's steps
    (save_checkpoint(d, tag="step-5")): its `latest` says "step-5"."""
    tl.ds_step(ck, 5, dp=2)
    os.rename(os.path.join(ck, "global_step5"), os.path.join(ck, "step-5"))
    tl.write(os.path.join(ck, "latest"), "step-5")


def own_step_latest(ck):
    """A trainer of its own that names its steps step-N and points at the
    newest with `latest`, as launch does."""
    os.makedirs(os.path.join(ck, "step-100"))
    tl.torch_save({"w": 1}, os.path.join(ck, "step-100", "model.pt"))
    tl.write(os.path.join(ck, "latest"), "step-100\n")


def deepspeed_4(ck):
    """ZeRO-2 written by 4 ranks: DeepSpeed cannot load it with 2."""
    tl.ds_step(ck, 10, dp=4)
    tl.write(os.path.join(ck, "latest"), "global_step10")


def dcp_4(ck):
    """DCP written by 4 ranks (.metadata): DCP reshards it for 2."""
    tl.dcp(os.path.join(ck, "step-3"), {"__%d_0.distcp" % r: [10] for r in range(4)})


def megatron(tp, pp):
    """Megatron's legacy format, iterations 100 and 200 (200 cut: its
    tracker still says 100), grid tp x pp."""
    def build(ck):
        tl.megatron_iter(ck, 100, tp=tp, pp=pp)
        d = tl.megatron_iter(ck, 200, tp=tp, pp=pp)
        tl.cut(os.path.join(d, "mp_rank_00" if pp == 1 else "mp_rank_00_000",
                            "model_optim_rng.pt"))
        tl.write(os.path.join(ck, "latest_checkpointed_iteration.txt"), "100")
    return build


def dcp_symlink(ck):
    tl.dcp(os.path.join(ck, "step-30"))
    tl.dcp(os.path.join(ck, "step-40"))
    tl.dcp(os.path.join(ck, "step-50"))
    os.unlink(os.path.join(ck, "step-50", ".metadata"))  # killed inside the save
    os.symlink("step-40", os.path.join(ck, "latest"))


def dcp_unparsed(ck):
    for n in (10, 20):
        tl.write(os.path.join(ck, "step-%d" % n, ".metadata"), b"not a pickle at all")
        tl.write(os.path.join(ck, "step-%d" % n, "__0_0.distcp"), b"\3" * 100)
        tl.write(os.path.join(ck, "step-%d" % n, "__1_0.distcp"), b"\3" * 100)


def dcp_hf_names(ck):
    tl.dcp(os.path.join(ck, "checkpoint-100"))
    tl.dcp(os.path.join(ck, "checkpoint-200"))
    os.unlink(os.path.join(ck, "checkpoint-200", ".metadata"))


def dcp_no_collectives(ck):
    """save(use_collectives=False): each rank writes __R.metadata, naming
    its own files; no .metadata."""
    import pickle
    for n in (7, 8):
        d = os.path.join(ck, "step-%d" % n)
        for r in (0, 1):
            fname = "__%d_0.distcp" % r
            md, sizes = tl.ckptfix.dcp_metadata({fname: [50, 30]})
            tl.write(os.path.join(d, fname), b"\3" * sizes[fname])
            if n == 7 or r == 0:  # step 8: rank 1 died before its metadata
                tl.write(os.path.join(d, "__%d.metadata" % r), pickle.dumps(md))


def launch_own(ck):
    """launch's layout: step-2 final (2 ranks), step-3 partial."""
    for n in (2, 3):
        d = os.path.join(ck, "step-%d" % n)
        shards = []
        for r in (0, 1):
            data = bytes([n, r]) * 64
            tl.write(os.path.join(d, "rank-%d.bin" % r), data)
            shards.append({"rank": r, "file": "rank-%d.bin" % r, "size": len(data),
                           "sha256": hashlib.sha256(data).hexdigest()})
        if n == 2:
            m = {"format": "launch-checkpoint", "version": 1, "job": "t", "step": n,
                 "generation": 0, "world_size": 2, "replicated": False,
                 "time": "2026-11-30T04:45:16.123Z", "time_ms": 1795927516123,
                 "shards": shards}
            tl.write(os.path.join(d, "manifest.json"), json.dumps(m))
    tl.write(os.path.join(ck, "latest"), "step-2\n")


# Each rank writes step-3 of launch's layout with a completion file, exits 0.
STEP3 = r'''
d="$LAUNCH_CKPT_DIR/step-3"; mkdir -p "$d"
printf 'rank %s' "$RANK" > "$d/.rank-$RANK.tmp"; mv "$d/.rank-$RANK.tmp" "$d/rank-$RANK.bin"
printf '{"size": 6}' > "$d/.rank-$RANK.tmp"; mv "$d/.rank-$RANK.tmp" "$d/rank-$RANK.done"
'''


def prune_others(tmp):
    ck, outside = os.path.join(tmp, "prune"), os.path.join(tmp, "outside")
    tl.ckptfix.launch_step(ck, 1, 2, False)
    old = 1700000000  # mtimes far past the sweep's age
    # launch's own rollback of a step 2 (a shard and its completion file)
    mine = os.path.join(ck, "abandoned-step-2-1796423363847")
    tl.write(os.path.join(mine, "rank-0.bin"), b"half")
    tl.write(os.path.join(mine, "rank-0.done"), '{"size": 4}')
    # a user's entries under names launch uses
    theirs = {"abandoned-step-1-notes.txt": b"my notes",
              "abandoned-step-0-mine/model.pt": b"weights",
              "abandoned-step-2-1796423363848/config.yaml": b"lr: 1",
              ".deleting-not-launch/f": b"keep",
              ".dataset.tmp-2024": b"rows",
              ".latest.tmp-notapid-zz": b"x"}
    for rel, data in theirs.items():
        tl.write(os.path.join(ck, rel), data)
    os.utime(os.path.join(ck, ".dataset.tmp-2024"), (old, old))
    os.utime(os.path.join(ck, ".latest.tmp-notapid-zz"), (old, old))
    # step-4: a symlink to a complete-looking step outside the directory
    out4 = os.path.join(outside, "step4")
    for r in (0, 1):
        tl.write(os.path.join(out4, "rank-%d.bin" % r), b"rank %d" % r)
        tl.write(os.path.join(out4, "rank-%d.done" % r), '{"size": 6}')
    tl.write(os.path.join(out4, ".manifest.json.tmp-1-deadbeef"), b"theirs")
    os.utime(os.path.join(out4, ".manifest.json.tmp-1-deadbeef"), (old, old))
    os.symlink(out4, os.path.join(ck, "step-4"))
    before = lt.tree_hash(outside)
    rc, log = lt.launch_wait(["--standalone", "--nproc-per-node", "2", "--ckpt-dir", ck,
                              "--no-python", "/bin/sh", "-c", STEP3], name="prune")
    tl.expect(rc == 0, "launch exited %d\n%s" % (rc, log))
    names = sorted(os.listdir(ck))
    tl.expect(os.path.exists(os.path.join(ck, "step-3", "manifest.json")),
              "step-3 was not finalised: %s\n%s" % (names, log))
    with open(os.path.join(ck, "latest")) as f:
        tl.expect(f.read().strip() == "step-3", "latest does not name step-3")
    tl.expect(not os.path.exists(mine), "launch's abandoned step 2 was not pruned: %s" % names)
    for rel, data in theirs.items():
        p = os.path.join(ck, rel)
        tl.expect(os.path.exists(p) and open(p, "rb").read() == data,
                  "pruning removed a user's %s: %s\n%s" % (rel, names, log))
    changed = lt.tree_diff(before, lt.tree_hash(outside))
    tl.expect(not changed, "launch wrote through the symlinked step-4: %s" % changed)
    print("ok: pruning left the user's entries and the symlinked step alone")


def main():
    if not os.path.exists(lt.launch_bin()):
        lt.skip("no launch binary at " + lt.launch_bin())
    os.environ.pop("LAUNCH_RESUME_STEP", None)
    os.environ.pop("LAUNCH_CKPT_DIR", None)
    tmp = tempfile.mkdtemp(prefix="launch-ckpt-readonly-")
    try:
        case(tmp, "deepspeed", deepspeed, 10)
        case(tmp, "deepspeed-latest-partial", deepspeed_partial_latest, 10)
        case(tmp, "dcp-symlink", dcp_symlink, 40)
        case(tmp, "dcp-unparsed", dcp_unparsed, None)
        case(tmp, "dcp-checkpoint-N", dcp_hf_names, 100)
        case(tmp, "dcp-no-collectives", dcp_no_collectives, 7)
        # A `latest` saying "step-N" is launch's only when step-N is (it
        # was unlinked at a fresh start, whoever wrote it)
        case(tmp, "deepspeed-tag-step-N", deepspeed_tag_step, None)
        case(tmp, "own-step-N-latest", own_step_latest, None)
        # World sizes the layouts record (issue #22): DeepSpeed's dp x mp
        # must match; DCP's .metadata reshards.
        case(tmp, "deepspeed-4-ranks", deepspeed_4, None,
             refused="DeepSpeed step 10 was written by 4 ranks (dp_world_size x "
                     "mp_world_size")
        # Megatron: the data-parallel size may change, not the grid.
        case(tmp, "megatron-2x1", megatron(2, 1), 100)
        case(tmp, "megatron-1x1", megatron(1, 1), 100)
        case(tmp, "megatron-2x2", megatron(2, 2), None,
             refused="Megatron step 100 was written with a model-parallel grid of 4 ranks")
        log = case(tmp, "dcp-4-ranks", dcp_4, 3)
        tl.expect("(another world size: DCP reshards on load)" in log, log)
        # The positive control: launch's own partial step is set aside.
        ck = os.path.join(tmp, "launch")
        launch_own(ck)
        run_job(ck, os.path.join(tmp, "launch-out"), 2)
        names = sorted(os.listdir(ck))
        tl.expect("step-3" not in names and any(n.startswith("abandoned-step-3-")
                                                for n in names),
                  "launch's partial step-3 was not rolled back: %s" % names)
        print("ok: launch's own partial step rolled back: %s" % names)
        prune_others(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
