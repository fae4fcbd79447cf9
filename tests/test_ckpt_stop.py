#!/usr/bin/env python3
"""Checkpoints at the edges of a job (docs/checkpoints.md):

- launch stopped by SIGTERM (a scheduler's preemption) while its workers
  save on SIGTERM and write completion files: the agent commits them before
  it exits, so the step is final and the next start resumes from it (it
  used to be rolled back to abandoned-step-N-T and pruned); on one node
  (embedded server) and on two agents against a `launch server`;
- a restart whose every rank saved a step on its way out (rank 1 on its
  error path, rank 0 on the restart's SIGTERM): the agent commits those
  completion files after the workers stopped, so the next round resumes
  from that step (it was rolled back to abandoned-step-N-T, then pruned);
- a --ckpt-dir on a read-only mount (a bind mount in a mount namespace the
  test creates): the job resumes from the newest final step although
  `latest` cannot be rewritten nor a partial step set aside; a warning says
  so, and no worker is blamed. Skipped without root or unshare(1);
- steps that exist but that no node can load (a shard on no node): the
  fresh start is a warning that says the steps will be pruned and how to
  resume instead; a directory without steps starts fresh quietly.

Every process is ended by pid; the mount dies with its namespace."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
import ckptfix  # noqa: E402
import launchtest as lt  # noqa: E402

# Each rank: up, then on SIGTERM writes step-3's shard and completion file
# (temp names, renames, as docs/checkpoints.md shows) and exits 0.
SAVER = r'''
save() {
  d="$LAUNCH_CKPT_DIR/step-3"; mkdir -p "$d"
  printf 'rank %s' "$RANK" > "$d/.rank-$RANK.tmp"; mv "$d/.rank-$RANK.tmp" "$d/rank-$RANK.bin"
  printf '{"size": 6}' > "$d/.rank-$RANK.tmp"; mv "$d/.rank-$RANK.tmp" "$d/rank-$RANK.done"
  exit 0
}
trap save TERM
touch "$OUT/up-$RANK"
while :; do sleep 0.05; done
'''

RESUMED = 'echo "resume step ${LAUNCH_RESUME_STEP:-none}"'

# Round 0: rank 1 saves step-3 and fails, rank 0 saves step-3 on the
# restart's SIGTERM. Round 1 says where it resumed.
RESTART_SAVER = r'''
if [ "$LAUNCH_ROUND" != 0 ]; then echo "round 1 resume step ${LAUNCH_RESUME_STEP:-none}"; exit 0; fi
save() {
  d="$LAUNCH_CKPT_DIR/step-3"; mkdir -p "$d"
  printf 'rank %s' "$RANK" > "$d/.rank-$RANK.tmp"; mv "$d/.rank-$RANK.tmp" "$d/rank-$RANK.bin"
  printf '{"size": 6}' > "$d/.rank-$RANK.tmp"; mv "$d/.rank-$RANK.tmp" "$d/rank-$RANK.done"
}
if [ "$RANK" = 1 ]; then
  while [ ! -e "$OUT/up-0" ]; do sleep 0.05; done
  save; exit 1
fi
trap 'save; exit 0' TERM
touch "$OUT/up-0"
while :; do sleep 0.05; done
'''


def latest(ck):
    with open(os.path.join(ck, "latest")) as f:
        return f.read().strip()


def expect_final_3(ck, log):
    m = os.path.join(ck, "step-3", "manifest.json")
    assert os.path.exists(m), "step-3 not finalised: %s\n%s" % (os.listdir(ck), log)
    with open(m) as f:
        man = json.load(f)
    assert man["world_size"] == 2 and len(man["shards"]) == 2, man
    assert latest(ck) == "step-3", latest(ck)
    assert not any(n.startswith("abandoned-") for n in os.listdir(ck)), os.listdir(ck)


def resumes_from(ck, step):
    rc, log = lt.launch_wait(["--standalone", "--nproc-per-node", "2", "--ckpt-dir", ck,
                              "--no-python", "/bin/sh", "-c", RESUMED], name="again")
    assert rc == 0, log
    assert log.count("resume step %s" % step) == 2, log
    return log


def test_sigterm_one_node(tmp):
    ck, out = os.path.join(tmp, "one"), os.path.join(tmp, "one-out")
    os.makedirs(out)
    ckptfix.launch_step(ck, 1, 2, False)
    a = lt.launch(["--standalone", "--nproc-per-node", "2", "--ckpt-dir", ck,
                   "--no-python", "/bin/sh", "-c", SAVER], env=dict(os.environ, OUT=out))
    try:
        lt.wait_until(lambda: all(os.path.exists(os.path.join(out, "up-%d" % r))
                                  for r in (0, 1)), 60, "both workers")
        a.signal(signal.SIGTERM)
        assert a.wait(60) == 128 + signal.SIGTERM, a.output()
    finally:
        a.kill()
    expect_final_3(ck, a.output())
    resumes_from(ck, 3)
    print("ok: SIGTERM on one node: step 3 committed, resumed from it")


def test_sigterm_two_agents(tmp):
    """Preemption of a 2-node job (shared directory): both agents get
    SIGTERM at once; the store they commit through is a `launch server`."""
    ck, out = os.path.join(tmp, "two"), os.path.join(tmp, "two-out")
    os.makedirs(out)
    ckptfix.launch_step(ck, 1, 2, False)
    with lt.Server() as srv:
        ags = [lt.launch(["--nnodes", "2", "--nproc-per-node", "1",
                          "--rdzv-endpoint", "127.0.0.1:%d" % srv.port, "--rdzv-id", "stop2",
                          "--local-addr", "127.0.0.%d" % h, "--ckpt-dir", ck,
                          "--no-python", "/bin/sh", "-c", SAVER],
                         env=dict(os.environ, OUT=out, LAUNCH_HOSTNAME="h%d" % h),
                         name="agent%d" % h) for h in (2, 3)]
        try:
            lt.wait_until(lambda: all(os.path.exists(os.path.join(out, "up-%d" % r))
                                      for r in (0, 1)), 60, "both workers")
            for a in ags:
                a.signal(signal.SIGTERM)
            for a in ags:
                assert a.wait(60) == 128 + signal.SIGTERM, a.output()
        finally:
            for a in ags:
                a.kill()
    expect_final_3(ck, "\n".join(a.output() for a in ags))
    print("ok: SIGTERM on two agents: step 3 committed")


def test_restart_saved(tmp):
    ck, out = os.path.join(tmp, "restart"), os.path.join(tmp, "restart-out")
    os.makedirs(out)
    ckptfix.launch_step(ck, 1, 2, False)
    rc, log = lt.launch_wait(["--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                              "--ckpt-dir", ck, "--no-python", "/bin/sh", "-c", RESTART_SAVER],
                             env=dict(os.environ, OUT=out), name="restart")
    assert rc == 0, log
    assert log.count("round 1 resume step 3") == 2, \
        "a step every rank saved at the restart was not resumed: %s\n%s" % (os.listdir(ck), log)
    expect_final_3(ck, log)
    print("ok: a step saved by every rank at a restart: committed, resumed from it")


def in_mount_ns(ro_src, ro, args):
    """launch ARGS in a new mount namespace where ro is ro_src mounted
    read-only. RET (status, output)."""
    script = ('mount --bind "$0" "$1" && mount -o remount,bind,ro "$1" && '
              'shift && exec "$@"')
    p = lt.Proc(["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                 script, ro_src, ro, lt.launch_bin()] + list(args), name="ro")
    try:
        rc = p.wait(120)
    finally:
        p.kill()
    return rc, p.output()


def test_read_only(tmp):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("skip: read-only mount (needs root and unshare)")
        return
    src, ro = os.path.join(tmp, "ro-src"), os.path.join(tmp, "ro")
    os.makedirs(ro)
    # B: a final step-1, no `latest`; C: also a partial step-2
    ckptfix.launch_step(os.path.join(src, "B"), 1, 2, False)
    os.unlink(os.path.join(src, "B", "latest"))
    ckptfix.launch_step(os.path.join(src, "C"), 1, 2, False)
    os.makedirs(os.path.join(src, "C", "step-2"))
    with open(os.path.join(src, "C", "step-2", "rank-0.bin"), "wb") as f:
        f.write(b"half")
    probe = lt.Proc(["unshare", "--mount", "--propagation", "private", "true"], name="probe")
    if probe.wait(30) != 0:
        print("skip: read-only mount (unshare --mount fails here: %s)" % probe.output())
        return
    before = lt.tree_hash(src)
    for name, warning in (("B", "cannot be updated"), ("C", "is not writable")):
        rc, log = in_mount_ns(src, ro, [
            "--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
            "--ckpt-dir", os.path.join(ro, name), "--no-python", "/bin/sh", "-c", RESUMED])
        assert rc == 0, (name, rc, log)
        assert log.count("resume step 1") == 2, (name, log)
        assert warning in log and "Root cause" not in log, (name, log)
        assert "restarting" not in log, (name, log)
    assert lt.tree_diff(before, lt.tree_hash(src)) == []
    print("ok: read-only --ckpt-dir: resumed from step 1 with a warning")


def test_unloadable_steps_warned(tmp):
    ck = os.path.join(tmp, "unloadable")
    ckptfix.launch_step(ck, 5, 2, False)
    os.unlink(os.path.join(ck, "step-5", "rank-1.bin"))
    rc, log = lt.launch_wait(["--standalone", "--nproc-per-node", "2", "--ckpt-dir", ck,
                              "--no-python", "/bin/sh", "-c", RESUMED], name="unloadable")
    assert rc == 0 and log.count("resume step none") == 2, log
    assert "warning: no checkpoint step of" in log and "lacks its shard" in log, log
    assert "pruned once this run finalises" in log and "bring back the node" in log, log
    rc, log = lt.launch_wait(["--standalone", "--nproc-per-node", "2", "--ckpt-dir",
                              os.path.join(tmp, "empty"), "--no-python", "/bin/true"],
                             name="empty")
    assert rc == 0 and "warning" not in log, log
    print("ok: unloadable steps: a fresh start, said as a warning with the way out")


def main():
    if not os.path.exists(lt.launch_bin()):
        lt.skip("no launch binary at " + lt.launch_bin())
    for v in ("LAUNCH_RESUME_STEP", "LAUNCH_CKPT_DIR"):
        os.environ.pop(v, None)
    tmp = tempfile.mkdtemp(prefix="launch-ckpt-stop-")
    try:
        test_sigterm_one_node(tmp)
        test_sigterm_two_agents(tmp)
        test_restart_saved(tmp)
        test_read_only(tmp)
        test_unloadable_steps_warned(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
