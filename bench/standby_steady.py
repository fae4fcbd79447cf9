#!/usr/bin/env python3
"""standby_steady.py LOG [FIRST] - train_gpt's step lines in LOG: the median
and mean step time from step FIRST (default 300) on, and the tokens/s of the
final line. Used by bench/run_standby_bench.sh steady."""
import re
import statistics
import sys

first = int(sys.argv[2]) if len(sys.argv) > 2 else 300
ms, final = [], ""
with open(sys.argv[1], errors="replace") as f:
    for line in f:
        m = re.search(r"step\s+(\d+)/\d+ \|.*\| ([\d.]+) ms \| (\d+) tok/s", line)
        if m and int(m.group(1)) >= first:
            ms.append(float(m.group(2)))
        if "final:" in line:
            final = line.strip().split("|", 1)[-1].strip()
if not ms:
    print("no step lines from step %d on" % first)
    sys.exit(1)
print("steps %d..: %d lines, median %.3f ms, mean %.3f ms | final %s"
      % (first, len(ms), statistics.median(ms), statistics.mean(ms), final))
