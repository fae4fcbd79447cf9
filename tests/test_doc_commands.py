"""Every command the documentation shows runs as the documentation says.

The shell blocks (``` with no language, sh, bash, shell or console) of
README.md, docs/*.md and examples/README.md are run, each block as one bash
script, in a scratch directory that looks like a checkout after the quick
start: build/bin is this build's bin/, and docs/, tests/, examples/, bench/,
scripts/ and env/ are the sources'. A line starting with "$ " is a command of
a console block, the other lines of such a block its output; otherwise every
line is a command ('\\' continues it). Every command must exit 0, or N when its
comment says "exits N".

A block that cannot run on a machine without GPUs, or is no command at all,
says so on the line before its fence, with the reason:

    <!-- doc-test: skip (a Slurm cluster) -->      not run
    <!-- doc-test: output (what it prints) -->     not commands

Every other block is run: a new block is tested unless it says why not."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "py"))
import launchtest as lt  # noqa: E402

SRC = os.environ.get("LAUNCH_SOURCE_DIR",
                     os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHELL_LANGS = ("", "sh", "bash", "shell", "console")
MARK = re.compile(r"<!--\s*doc-test:\s*(skip|output)\s*\((.+)\)\s*-->")


def blocks(path):
    """(first line number, language, lines, marker or None) of each fence."""
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^\s*```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mk = MARK.search(lines[k]) if k >= 0 else None
        out.append((i + 1, m.group(1), lines[i + 1:j], mk))
        i = j + 1
    return out


def commands(lines):
    """The commands of a block, continuation lines joined."""
    console = any(ln.startswith("$ ") for ln in lines)
    cmds, cur = [], ""
    for ln in lines:
        if console and not cur:
            if not ln.startswith("$ "):
                continue
            ln = ln[2:]
        if not cur and (not ln.strip() or ln.lstrip().startswith("#")):
            continue
        if ln.rstrip().endswith("\\"):
            cur += ln.rstrip()[:-1] + " "
            continue
        cmds.append(cur + ln)
        cur = ""
    return cmds


def expected(cmd):
    m = re.search(r"#.*\bexits (\d+)", cmd)
    return int(m.group(1)) if m else 0


def scratch():
    d = tempfile.mkdtemp(prefix="launch-doctest-")
    bindir = os.path.dirname(os.path.abspath(lt.launch_bin()))
    os.makedirs(os.path.join(d, "build"))
    os.symlink(bindir, os.path.join(d, "build", "bin"))
    for sub in ("docs", "tests", "examples", "bench", "scripts", "env"):
        os.symlink(os.path.join(SRC, sub), os.path.join(d, sub))
    return d, bindir


def main():
    files = [os.path.join(SRC, "README.md"), os.path.join(SRC, "examples", "README.md")] + \
        sorted(glob.glob(os.path.join(SRC, "docs", "*.md")))
    d, bindir = scratch()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PET_", "SLURM_", "NCCL_", "LAUNCH_", "TORCHELASTIC_"))}
    env["PATH"] = bindir + ":" + env.get("PATH", "/usr/bin:/bin")
    ran = skipped = 0
    problems = []
    try:
        for f in files:
            rel = os.path.relpath(f, SRC)
            for line, lang, body, mk in blocks(f):
                if lang not in SHELL_LANGS or mk is not None:
                    skipped += lang in SHELL_LANGS
                    continue
                cmds = commands(body)
                if not cmds:
                    problems.append("%s:%d: a shell block without a command: mark it "
                                    "<!-- doc-test: output (why) -->" % (rel, line))
                    continue
                script = []
                for c in cmds:
                    want = expected(c)
                    script.append(c)
                    script.append('__rc=$?; if [ "$__rc" -ne %d ]; then echo "doc-test: %s '
                                  'exited $__rc, the docs say %d" >&2; exit 99; fi'
                                  % (want, re.sub(r"[^ -~]|[\"$`\\\\]", "?", c.strip())[:120],
                                     want))
                p = subprocess.run(["bash", "-c", "\n".join(script)], cwd=d, env=env,
                                   capture_output=True, text=True, timeout=120)
                ran += 1
                if p.returncode != 0:
                    problems.append("%s:%d: %s\n  (if it cannot run without GPUs, mark it "
                                    "<!-- doc-test: skip (why) -->)\n%s" %
                                    (rel, line, p.stderr.strip()[-1500:], p.stdout[-500:]))
                else:
                    print("%s:%d: %d command(s) ok" % (rel, line, len(cmds)), flush=True)
    finally:
        # only what this test made: the symlinks and what the commands wrote
        shutil.rmtree(d)
    assert not problems, "\n\n".join(problems)
    assert ran >= 4, ran
    print("test_doc_commands: %d blocks run, %d marked skip/output: ok" % (ran, skipped))


if __name__ == "__main__":
    main()
