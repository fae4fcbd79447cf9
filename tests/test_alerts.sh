#!/bin/bash
# examples/monitoring/alerts.yml (docs/monitoring.md): the rules load, and
# their unit tests (alerts_test.yml) pass under promtool: each alert fires
# on the series that should raise it, at the time it should, and not before.
set -u
D=$(cd "$(dirname "$0")/../examples/monitoring" && pwd)
command -v promtool >/dev/null || { echo "SKIP: promtool missing (Debian's prometheus)"; exit 77; }
promtool check rules "$D/alerts.yml" || { echo "FAIL: promtool check rules"; exit 1; }
( cd "$D" && promtool test rules alerts_test.yml ) || { echo "FAIL: promtool test rules"; exit 1; }
echo "test_alerts: ok"
