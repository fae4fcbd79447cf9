"""A small cluster of network namespaces for tests under real network faults.

    with netns.Cluster(4) as c:          # skips (exit 77) where it cannot be made
        p = c.launch(0, [...])           # `launch ...` inside node 0's namespace
        c.degrade(2, delay_ms=25, loss_pct=2)
        c.partition(3); c.heal(3)
        c.link(0, up=False); c.link(0, up=True)

Node i lives in namespace <tag>n<i> with one interface, eth0, addressed
192.0.2.<i+1>/24 (documentation addresses) and no route beyond that subnet: a
veth pair joins it to a bridge in a namespace of its own (<tag>br). Nothing
reaches the host's network. Every namespace is named with a tag made of this
process's pid and a random suffix; the cluster removes exactly those (deleting
a namespace deletes its end of each veth pair, and with it the pair), and ends
the processes it started, by pid.

Faults:
  degrade(i, delay_ms, loss_pct)  tc netem on node i's eth0 when the kernel has
                                  sch_netem. Otherwise (this VM: no sch_netem,
                                  no sch_fq) the loss by an nftables rule in
                                  node i's namespace (incoming packets, whole
                                  percents), and the delay in userspace: an
                                  iptables rule on eth0's egress (`-j NFQUEUE
                                  --queue-num 0 --queue-bypass`; nft's own
                                  `queue` is not in this kernel) sends every
                                  outgoing packet to NFQUEUE, where
                                  tests/nfq_delay.c (built when
                                  libnetfilter_queue is found), run in the
                                  namespace, holds each delay_ms and accepts
                                  it, in order. Without it the delay is
                                  reported as not applied (see `applied`;
                                  have_delay() tells beforehand). The delay is
                                  on egress only: between two degraded nodes
                                  the RTT is twice delay_ms.
  partition(i) / heal(i)          nftables drops every packet in and out of
                                  node i's eth0 (the link stays up: a silent
                                  network); without nft, its bridge port goes
                                  down instead
  link(i, up)                     node i's eth0 down or up (carrier loss)
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import launchtest as lt

SUBNET = "192.0.2."


def _run(argv, check=True):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), r.returncode,
                                                   r.stderr.strip()))
    return r


def can_make():
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    name = "l28probe%d" % os.getpid()
    r = _run(["ip", "netns", "add", name], check=False)
    if r.returncode != 0:
        return "cannot create a network namespace: " + r.stderr.strip()
    _run(["ip", "netns", "del", name], check=False)
    return None


def need_netns():
    why = can_make()
    if why:
        lt.skip(why)


def nfq_delay_bin():
    """tests/nfq_delay of the build, or None when it was not built."""
    build = os.environ.get("LAUNCH_BUILD_DIR") or \
        os.path.join(os.path.dirname(os.path.abspath(lt.launch_bin())), "..")
    path = os.path.join(build, "tests", "nfq_delay")
    return path if os.access(path, os.X_OK) else None


def iptables():
    """The iptables that takes the NFQUEUE rule (the nft or the legacy
    one: the kernel's nft has no `queue` expression here, its xt NFQUEUE
    target works through either), None when there is none."""
    for name in ("iptables", "iptables-nft", "iptables-legacy"):
        if shutil.which(name):
            return name
    return None


def have_delay():
    """None when degrade() can delay packets here, else why not."""
    if have_netem():
        return None
    if iptables() is None:
        return "no sch_netem, and no iptables for the NFQUEUE rule"
    if nfq_delay_bin() is None:
        return ("no sch_netem, and tests/nfq_delay was not built (install "
                "libnetfilter-queue-dev and configure again)")
    return None


def have_netem():
    """Does the kernel have sch_netem? Probed in a namespace of our own."""
    name = "l28nm%d" % os.getpid()
    if _run(["ip", "netns", "add", name], check=False).returncode != 0:
        return False
    try:
        return _run(["ip", "-n", name, "link", "set", "lo", "up"], check=False).returncode == 0 and \
            _run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root",
                  "netem", "delay", "1ms"], check=False).returncode == 0
    finally:
        _run(["ip", "netns", "del", name], check=False)


class Cluster:
    def __init__(self, n):
        if n < 1 or n > 200:
            raise ValueError("1..200 nodes")
        need_netns()
        self.n = n
        # short: interface names have 15 characters at most
        self.tag = "l%x%02x" % (os.getpid() & 0xffff, random.randrange(256))
        self.br = self.tag + "br"
        self.nodes = [self.tag + "n%d" % i for i in range(n)]
        self.made = []          # namespaces created, removed in reverse
        self.procs = []
        self.netem = have_netem()
        self.nft = shutil.which("nft") is not None
        self.applied = {}       # node -> what degrade() applied
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def addr(self, i):
        return SUBNET + str(i + 1)

    def _ns(self, name):
        _run(["ip", "netns", "add", name])
        self.made.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _build(self):
        self._ns(self.br)
        _run(["ip", "-n", self.br, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", self.br, "link", "set", "br0", "up"])
        for i, ns in enumerate(self.nodes):
            self._ns(ns)
            host_end, node_end = "%sv%d" % (self.tag, i), "%sp%d" % (self.tag, i)
            # created in the bridge's namespace: nothing of it touches the host's
            _run(["ip", "-n", self.br, "link", "add", host_end, "type", "veth",
                  "peer", "name", node_end, "netns", ns])
            _run(["ip", "-n", self.br, "link", "set", host_end, "master", "br0", "up"])
            _run(["ip", "-n", ns, "link", "set", node_end, "name", "eth0"])
            _run(["ip", "-n", ns, "addr", "add", self.addr(i) + "/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])

    # ---- processes ----------------------------------------------------------------------
    def popen(self, i, argv, env=None, name=None):
        """argv in node i's namespace (ip netns exec execs it: the pid is
        the program's)."""
        p = lt.Proc(["ip", "netns", "exec", self.nodes[i]] + list(argv), env=env,
                    name=name or "node%d" % i)
        self.procs.append(p)
        return p

    def launch(self, i, args, env=None, name=None):
        return self.popen(i, [os.path.abspath(lt.launch_bin())] + list(args),
                          env=env, name=name)

    # ---- faults -------------------------------------------------------------------------
    def degrade(self, i, delay_ms=0, loss_pct=0.0):
        """Delay and loss on node i's eth0. The delay applies to what node
        i sends: the RTT between two degraded nodes is twice delay_ms,
        between a degraded node and a clean one delay_ms."""
        ns = self.nodes[i]
        if self.netem:
            args = ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem"]
            if delay_ms:
                args += ["delay", "%dms" % delay_ms]
            if loss_pct:
                args += ["loss", "%g%%" % loss_pct]
            _run(["ip", "netns", "exec", ns] + args)
            self.applied[i] = "netem delay %d ms loss %g %%" % (delay_ms, loss_pct)
            return self.applied[i]
        done = []
        if delay_ms and iptables() and nfq_delay_bin():
            done.append(self._nfq_delay(i, delay_ms))
        elif delay_ms:
            done.append("no delay (the kernel has no sch_netem, and nfq_delay "
                        "or iptables is missing)")
        if loss_pct and self.nft:
            # whole percent granularity, incoming packets (outgoing ones of
            # the peer's: every packet crosses one input chain)
            pct = max(1, int(round(loss_pct)))
            self._nft(ns, "table inet %sloss {\n"
                      " chain in { type filter hook input priority 0; policy accept;"
                      " iifname \"eth0\" numgen random mod 100 < %d drop; }\n"
                      "}\n" % (self.tag, pct))
            done.append("nft loss %d %%" % pct)
        self.applied[i] = ", ".join(done) or "nothing"
        return self.applied[i]

    def _nfq_delay(self, i, delay_ms):
        """nfq_delay in node i's namespace on queue 0 (queues are per
        namespace), then the rule that feeds it: `bypass` lets packets
        through undelayed should it end, so the rule goes in once it is
        bound."""
        ns = self.nodes[i]
        p = self.popen(i, [nfq_delay_bin(), "0", str(int(delay_ms))],
                       name="nfq_delay%d" % i)
        deadline = time.time() + 10
        while "ready" not in p.output():
            if not p.running() or time.time() > deadline:
                raise RuntimeError("nfq_delay in %s did not start: %s" % (ns, p.output()))
            time.sleep(0.01)
        _run(["ip", "netns", "exec", ns, iptables(), "-A", "OUTPUT", "-o", "eth0",
              "-j", "NFQUEUE", "--queue-num", "0", "--queue-bypass"])
        return "delay %d ms on egress (iptables NFQUEUE + nfq_delay)" % delay_ms

    def _nft(self, ns, rules):
        r = subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError("nft in %s failed: %s" % (ns, r.stderr.strip()))

    def partition(self, i):
        ns = self.nodes[i]
        if self.nft:
            self._nft(ns, "table inet %scut {\n"
                      " chain in { type filter hook input priority -10; policy accept;"
                      " iifname \"eth0\" drop; }\n"
                      " chain out { type filter hook output priority -10; policy accept;"
                      " oifname \"eth0\" drop; }\n"
                      "}\n" % self.tag)
        else:
            _run(["ip", "-n", self.br, "link", "set", "%sv%d" % (self.tag, i), "down"])

    def heal(self, i):
        ns = self.nodes[i]
        if self.nft:
            _run(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet",
                  self.tag + "cut"], check=False)
        else:
            _run(["ip", "-n", self.br, "link", "set", "%sv%d" % (self.tag, i), "up"])

    def link(self, i, up):
        _run(["ip", "-n", self.nodes[i], "link", "set", "eth0", "up" if up else "down"])

    # ---- what the network does ---------------------------------------------------------
    def rtt_ms(self, i, j, n=5, port=7):
        """TCP connect times from node i to node j in ms (a connect takes one
        round trip: SYN out, SYN-ACK back), n of them, sorted. Lost SYNs
        show as retransmits of a second and more."""
        srv = self.popen(j, [sys.executable, "-c",
                             "import socket\n"
                             "s = socket.create_server(('%s', %d))\n"
                             "print('ready', flush=True)\n"
                             "for _ in range(%d):\n"
                             "    s.accept()[0].close()\n" % (self.addr(j), port, n)],
                         name="rtt%d" % j)
        deadline = time.time() + 10
        while "ready" not in srv.output():
            if not srv.running() or time.time() > deadline:
                raise RuntimeError("the RTT listener did not start: " + srv.output())
            time.sleep(0.01)
        r = _run(["ip", "netns", "exec", self.nodes[i], sys.executable, "-c",
                  "import socket, time\n"
                  "for _ in range(%d):\n"
                  "    t = time.monotonic()\n"
                  "    socket.create_connection(('%s', %d), 30).close()\n"
                  "    print((time.monotonic() - t) * 1000)\n" % (n, self.addr(j), port)])
        srv.wait(30)
        return sorted(float(x) for x in r.stdout.split())

    # ---- the end ------------------------------------------------------------------------
    def close(self):
        for p in self.procs:
            p.kill()
        self.procs = []
        for ns in reversed(self.made):
            _run(["ip", "netns", "del", ns], check=False)
        self.made = []

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def load():
    """The 1-minute load average and the core count, for the figures."""
    return os.getloadavg()[0], os.cpu_count()


if __name__ == "__main__":  # a smoke check: TCP across the bridge
    with Cluster(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 2) as c:
        srv = c.popen(c.n - 1, [sys.executable, "-c",
                                "import socket; s = socket.create_server(('%s', 7)); "
                                "s.accept()[0].sendall(b'ok')" % c.addr(c.n - 1)])
        time.sleep(0.5)
        r = _run(["ip", "netns", "exec", c.nodes[0], sys.executable, "-c",
                  "import socket; print(socket.create_connection(('%s', 7), 3).recv(2))"
                  % c.addr(c.n - 1)], check=False)
        print(r.stdout.strip() or r.stderr.strip())
        print("netem:", c.netem, "nft:", c.nft, "nfq_delay:", nfq_delay_bin())
        if "--delay" in sys.argv:
            print(c.degrade(0, delay_ms=25), c.degrade(c.n - 1, delay_ms=25))
            print("connect RTT, ms:", c.rtt_ms(0, c.n - 1))
