"""train_gpt against PyTorch on this machine's CPU: the `tiny` model (or
other sizes), the same batch, steps and threads, side by side; the best of
--repeat runs of each (the quietest), then the ratio.

    /usr/bin/python3 bench/run_gpt_bench.py [--threads 1,2] [--steps 100]
        [--repeat 3] [--batch 8] [-- extra train_gpt/torch size flags]

Size flags after `--` (e.g. --layers 4 --channels 128) go to both. The
figures are recorded in docs/BENCHMARKS.md.
"""
import argparse
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd, env):
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, check=False)
    if out.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (out.returncode, " ".join(cmd), out.stdout))
    return out.stdout


def ours(bin_dir, threads, steps, batch, extra):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("RANK", None)
    out = run([os.path.join(bin_dir, "train_gpt"), "--preset", "tiny", "--threads",
               str(threads), "--steps", str(steps + 1), "--batch", str(batch),
               "--val-every", "0", "--log-every", "1000000"] + extra, env)
    m = re.search(r"\| ([0-9.]+) ms/step, ([0-9]+) tok/s", out)
    return float(m.group(1)), float(m.group(2))


def torch(threads, steps, batch, extra):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = run(["/usr/bin/python3", os.path.join(HERE, "torch_gpt_bench.py"), "--threads",
               str(threads), "--steps", str(steps), "--batch", str(batch)] + extra, env)
    m = re.search(r"ms/step ([0-9.]+) tok/s ([0-9]+)", out)
    v = re.search(r"torch ([^ ]+)", out).group(1)
    return float(m.group(1)), float(m.group(2)), v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    print("date %s, %s, %d CPUs, %s" % (time.strftime("%Y-%m-%d"), cpu, os.cpu_count(),
                                         platform.platform()))
    print("model: tiny %s, micro-batch %d, %d timed steps, best of %d"
          % (" ".join(extra) or "(2 layers, 4 heads, 64 channels, T 64, vocab 256)",
             a.batch, a.steps, a.repeat))
    print("| threads | train_gpt ms/step | train_gpt tok/s | PyTorch ms/step | PyTorch tok/s | ratio |")
    print("|---|---|---|---|---|---|")
    for t in [int(x) for x in a.threads.split(",")]:
        best_o = min((ours(a.bin, t, a.steps, a.batch, extra) for _ in range(a.repeat)),
                     key=lambda r: r[0])
        runs = [torch(t, a.steps, a.batch, extra) for _ in range(a.repeat)]
        best_t = min(runs, key=lambda r: r[0])
        print("| %d | %.2f | %.0f | %.2f | %.0f | %.2fx |" % (
            t, best_o[0], best_o[1], best_t[0], best_t[1], best_o[1] / best_t[1]))
        sys.stdout.flush()
    print("PyTorch %s (Debian python3-torch)" % runs[0][2])


if __name__ == "__main__":
    main()
