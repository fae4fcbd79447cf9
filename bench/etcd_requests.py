"""--rdzv-backend etcd (issue #28): the requests an idle agent sends to etcd
per lease TTL, counted by etcd itself (the sum over the 3 members of
grpc_server_started_total from /metrics, per gRPC method: the JSON gateway
turns each HTTP call into one gRPC call or stream).

    LAUNCH_BIN=build/bin/launch python3 bench/etcd_requests.py [SECONDS]

One agent of a 1:2 job with lease_ttl 10 s, its workers running (held),
counted over SECONDS (default 60) after round 0 started."""
import os
import re
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py"))
import launchtest as lt  # noqa: E402
import test_etcd as te  # noqa: E402

LINE = re.compile(r'^grpc_server_started_total\{grpc_method="(\w+)",'
                  r'grpc_service="([\w.]+)",grpc_type="(\w+)"\} (\d+)')


def counts(e):
    out = {}
    for port in e.client:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            for line in r.read().decode().splitlines():
                m = LINE.match(line)
                if m:
                    out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(4))
    return out


def main():
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    ttl = 10
    with te.etcd_job(1, "1:2", "er", ttl=ttl) as (e, d, port, ags):
        lt.wait_until(lambda: len(lt.records(d, 0)) == 2, 90, "round 0's workers")
        time.sleep(1.0)
        a = counts(e)
        time.sleep(secs)
        b = counts(e)
        diff = {k: b[k] - a.get(k, 0) for k in b if b[k] - a.get(k, 0)}
        total = sum(diff.values())
        print("etcd requests of 1 idle agent (lease_ttl %d s) over %.0f s: %d, "
              "%.2f per TTL; by method: %s" % (ttl, secs, total, total * ttl / secs,
                                               dict(sorted(diff.items()))), flush=True)
        te.release(d)


if __name__ == "__main__":
    main()
