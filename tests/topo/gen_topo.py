#!/usr/bin/env python3
"""gen_topo.py - build the synthetic hwloc 2.x XML topologies kept in tests/topo/.

Each machine starts from `lstopo -i "<synthetic>" --of xml` (CPUs, NUMA nodes,
caches made by hwloc itself), then gets the I/O tree a real export would have:
host bridges under the NUMA-local object, PCIe switches (Bridge objects),
PCIDev objects with pci_busid / pci_type "class [vendor:device] [sub] rev" /
pci_link_speed (GB/s), and OSDev children named as hwloc names them (cuda0,
nvml0, mlx5_0, ib0, eno1) with their osdev types. GPU NVLink bandwidth goes in
as hwloc's own "NVLinkBandwidth" distance matrix, written by hwloc-annotate.

PCIDev objects also carry the info attributes that `launch topo --export`
adds on a real machine: PCIeLinkWidth, PCIeLinkWidthMax, PCIeLinkSpeedGTs,
PCIeLinkSpeedMaxGTs; OpenFabrics devices carry Port<N>Rate and
Port<N>LinkLayer next to hwloc's own Port<N>State.

usage: tests/topo/gen_topo.py [OUTDIR]     (default: the script's folder)
Every file is checked by loading it back with `lstopo -i FILE`.
"""
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

LSTOPO = "lstopo-no-graphics"

# osdev_type values of hwloc 2.x (hwloc.h enum hwloc_obj_osdev_type_e)
OSDEV_BLOCK, OSDEV_GPU, OSDEV_NETWORK, OSDEV_OPENFABRICS, OSDEV_DMA, OSDEV_COPROC = range(6)

# PCIe generation -> (GT/s, encoding efficiency)
GEN = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130),
       5: (32.0, 128 / 130)}


def gbps(gen, width):
    """Link bandwidth in GB/s as hwloc computes pci_link_speed."""
    gts, enc = GEN[gen]
    return gts * enc * width / 8


class Gen:
    def __init__(self, synthetic, pu_indexes, hostname, node_gib):
        desc = synthetic
        if pu_indexes is not None:
            desc += "(indexes=%s)" % ",".join(str(i) for i in pu_indexes)
        out = subprocess.run([LSTOPO, "-i", desc, "--of", "xml", "-"], check=True,
                             capture_output=True, text=True).stdout
        self.root = ET.fromstring(out)
        self.machine = self.root.find("object")
        for info in list(self.machine.findall("info")):
            if info.get("name") in ("SyntheticDescription", "ProcessName"):
                self.machine.remove(info)
        self._info(self.machine, "HostName", hostname, first=True)
        for o in self.root.iter("object"):
            if o.get("type") == "NUMANode":
                o.set("local_memory", str(node_gib << 30))
                for pt in o.findall("page_type"):
                    pt.set("count", str((node_gib << 30) // int(pt.get("size"))))
        self.next_gp = 1 + max(int(o.get("gp_index")) for o in self.root.iter("object"))
        self.nvml = []

    def gp(self):
        self.next_gp += 1
        return str(self.next_gp - 1)

    @staticmethod
    def _info(obj, name, value, first=False):
        e = ET.Element("info", {"name": name, "value": str(value)})
        if first:
            obj.insert(0, e)
        else:
            # infos come before child objects in hwloc's XML
            idx = 0
            for i, c in enumerate(list(obj)):
                if c.tag == "info":
                    idx = i + 1
            obj.insert(idx, e)
        return e

    def subtype(self, numa, kind):
        """Mark NUMA node `numa` as memory of another kind (hwloc's subtype)."""
        for o in self.root.iter("object"):
            if o.get("type") == "NUMANode" and o.get("os_index") == str(numa):
                o.set("subtype", kind)

    def numa_parent(self, numa):
        """The normal object whose memory child is NUMA node `numa`."""
        for o in self.root.iter("object"):
            for c in o.findall("object"):
                if c.get("type") == "NUMANode" and c.get("os_index") == str(numa):
                    return o
        raise KeyError(numa)

    def host_bridge(self, numa, bus_lo, bus_hi):
        hb = ET.SubElement(self.numa_parent(numa), "object", {
            "type": "Bridge", "gp_index": self.gp(), "bridge_type": "0-1", "depth": "0",
            "bridge_pci": "0000:[%02x-%02x]" % (bus_lo, bus_hi)})
        return hb

    def bridge(self, parent, busid, bus_lo, bus_hi, vendev="1000:c010", gen=4, width=16,
               depth=1):
        return ET.SubElement(parent, "object", {
            "type": "Bridge", "gp_index": self.gp(), "bridge_type": "1-1",
            "depth": str(depth), "bridge_pci": "0000:[%02x-%02x]" % (bus_lo, bus_hi),
            "pci_busid": busid, "pci_type": "0604 [%s] [%s] 01" % (vendev, vendev),
            "pci_link_speed": "%f" % gbps(gen, width)})

    def pcidev(self, parent, busid, cls, vendev, subvendev, gen, width, gen_max=None,
               width_max=None, vendor_name="", device_name=""):
        o = ET.SubElement(parent, "object", {
            "type": "PCIDev", "gp_index": self.gp(), "pci_busid": busid,
            "pci_type": "%s [%s] [%s] a1" % (cls, vendev, subvendev),
            "pci_link_speed": "%f" % gbps(gen, width)})
        if vendor_name:
            self._info(o, "PCIVendor", vendor_name)
        if device_name:
            self._info(o, "PCIDevice", device_name)
        self._info(o, "PCIeLinkWidth", width)
        self._info(o, "PCIeLinkWidthMax", width_max or width)
        self._info(o, "PCIeLinkSpeedGTs", "%.1f" % GEN[gen][0])
        self._info(o, "PCIeLinkSpeedMaxGTs", "%.1f" % GEN[gen_max or gen][0])
        return o

    def osdev(self, parent, name, osdev_type, infos=()):
        o = ET.SubElement(parent, "object", {"type": "OSDev", "gp_index": self.gp(),
                                             "name": name, "osdev_type": str(osdev_type)})
        for k, v in infos:
            self._info(o, k, v)
        return o

    def gpu(self, parent, busid, index, vendev, model, mem_kib, gen, width, pcidev_name):
        dev = self.pcidev(parent, busid, "0302", vendev, "10de:" + vendev.split(":")[1],
                          gen, width, vendor_name="NVIDIA Corporation",
                          device_name=pcidev_name)
        self.osdev(dev, "cuda%d" % index, OSDEV_COPROC, [
            ("CoProcType", "CUDA"), ("Backend", "CUDA"),
            ("GPUVendor", "NVIDIA Corporation"), ("GPUModel", model),
            ("CUDAGlobalMemorySize", mem_kib)])
        self.osdev(dev, "nvml%d" % index, OSDEV_GPU, [
            ("Backend", "NVML"), ("GPUVendor", "NVIDIA Corporation"), ("GPUModel", model),
            ("NVIDIAUUID", "GPU-%08x-0000-4000-8000-%012x" % (0x5eed0000 + index, index))])
        self.nvml.append("nvml%d" % index)
        return dev

    def hca(self, parent, busid, name, netdev, vendev, devname, gen, width, rate,
            link_layer="InfiniBand", state=4, width_max=None, port=1):
        dev = self.pcidev(parent, busid, "0207" if link_layer == "InfiniBand" else "0200",
                          vendev, vendev, gen, width, width_max=width_max,
                          vendor_name="Mellanox Technologies", device_name=devname)
        guid = "%04x:%04x:%04x:%04x" % (0x0c42, 0xa103, int(busid[5:7], 16), port)
        self.osdev(dev, name, OSDEV_OPENFABRICS, [
            ("NodeGUID", guid), ("SysImageGUID", guid),
            ("Port%dState" % port, state), ("Port%dLID" % port, "0x%x" % (int(busid[5:7], 16) + 1)),
            ("Port%dLMC" % port, 0),
            ("Port%dGID0" % port, "fe80:0000:0000:0000:%s" % guid),
            ("Port%dRate" % port, rate), ("Port%dLinkLayer" % port, link_layer)])
        if netdev:
            if link_layer == "InfiniBand":
                addr = "00:00:10:87:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:%s:00:%02x" % (
                    busid[5:7], port)
            else:
                addr = "b8:ce:f6:%s:00:%02x" % (busid[5:7], port)
            self.osdev(dev, netdev, OSDEV_NETWORK, [("Address", addr), ("Port", port)])
        return dev

    def eth(self, parent, busid, netdev, vendev, devname, gen, width):
        dev = self.pcidev(parent, busid, "0200", vendev, vendev, gen, width,
                          vendor_name="Intel Corporation", device_name=devname)
        self.osdev(dev, netdev, OSDEV_NETWORK, [("Address", "3c:ec:ef:%s:00:01" % busid[5:7])])
        return dev

    def write(self, path, nvlink_mbps=0):
        ET.indent(self.root, space="  ")
        body = ET.tostring(self.root, encoding="unicode")
        with open(path, "w") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n'
                    '<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n')
            f.write(body + "\n")
        if nvlink_mbps and self.nvml:
            n = len(self.nvml)
            with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as d:
                d.write("name=NVLinkBandwidth\n")
                # kind = HWLOC_DISTANCES_KIND_FROM_OS | HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH
                d.write("9\n%d\n" % n)
                for name in self.nvml:
                    d.write("os=%s\n" % name)
                for i in range(n):
                    for j in range(n):
                        d.write("%d\n" % (0 if i == j else nvlink_mbps))
            subprocess.run(["hwloc-annotate", path, path, "root", "distances", d.name],
                           check=True)
            os.unlink(d.name)
        # hwloc must load it back, with every PCI object.
        out = subprocess.run([LSTOPO, "-i", path, "--whole-io", "--of", "console"],
                             check=True, capture_output=True, text=True).stdout
        assert "PCI" in out, path


def v100_pcie(outdir):
    """Seed 000: 8x V100 PCIe 32GB, no NVLink, two Xeon sockets (20 cores, HT),
    one ConnectX-5 EDR card. The card sits in an x8 slot on socket 0, so the
    GPUs of socket 1 reach it across the socket link: the two mistakes the
    seed warns about (x8 halves the bandwidth; IB card on the GPUs' NUMA side)."""
    # Linux numbers Intel hyperthreads as socket-major cores, then siblings:
    # socket s, core c, thread t -> t*40 + s*20 + c.
    pus = [t * 40 + s * 20 + c for s in range(2) for c in range(20) for t in range(2)]
    g = Gen("pack:2 numa:1 core:20 pu:2", pus, "gpu-node-0", 384)
    model, mem = "Tesla V100-PCIE-32GB", 32 * 1024 * 1024
    name = "GV100GL [Tesla V100 PCIe 32GB]"
    # socket 0: two PLX switches with two GPUs each, the IB card, eno1
    hb = g.host_bridge(0, 0x00, 0x7f)
    idx = 0
    for sw_bus, gpu_buses in ((0x02, (0x04, 0x05)), (0x06, (0x08, 0x09))):
        up = g.bridge(hb, "0000:%02x:00.0" % sw_bus, sw_bus + 1, gpu_buses[-1], "10b5:8747", 3)
        for k, b in enumerate(gpu_buses):
            dn = g.bridge(up, "0000:%02x:%02x.0" % (sw_bus + 1, 8 + 8 * k), b, b, "10b5:8747",
                          3, depth=2)
            g.gpu(dn, "0000:%02x:00.0" % b, idx, "10de:1db6", model, mem, 3, 16, name)
            idx += 1
    rp = g.bridge(hb, "0000:17:00.0", 0x18, 0x18, "8086:2030", 3, 8)
    g.hca(rp, "0000:18:00.0", "mlx5_0", "ib0", "15b3:1017",
          "MT27800 Family [ConnectX-5]", 3, 8, "100 Gb/sec (4X EDR)", width_max=16)
    g.eth(hb, "0000:3d:00.0", "eno1", "8086:1563", "Ethernet Controller 10G X550T", 3, 4)
    # socket 1: the other four GPUs
    hb = g.host_bridge(1, 0x80, 0xff)
    for sw_bus, gpu_buses in ((0x84, (0x86, 0x87)), (0x88, (0x8a, 0x8b))):
        up = g.bridge(hb, "0000:%02x:00.0" % sw_bus, sw_bus + 1, gpu_buses[-1], "10b5:8747", 3)
        for k, b in enumerate(gpu_buses):
            dn = g.bridge(up, "0000:%02x:%02x.0" % (sw_bus + 1, 8 + 8 * k), b, b, "10b5:8747",
                          3, depth=2)
            g.gpu(dn, "0000:%02x:00.0" % b, idx, "10de:1db6", model, mem, 3, 16, name)
            idx += 1
    g.write(os.path.join(outdir, "v100-pcie-2s.xml"))


def dgx_a100(outdir):
    """DGX-A100-like: 2x EPYC 64 cores with SMT in NPS4 mode (8 NUMA nodes),
    8x A100-SXM4 behind four PCIe switches, each switch holding two GPUs and
    two ConnectX-6 HDR HCAs (mlx5_0-3, mlx5_6-9), a dual-port ConnectX-6 for
    storage (RoCE, mlx5_4/5), NVSwitch (NVLink between every GPU pair)."""
    # socket s, node n, core c, thread t -> t*128 + s*64 + n*16 + c
    pus = [t * 128 + s * 64 + n * 16 + c for s in range(2) for n in range(4)
           for c in range(16) for t in range(2)]
    g = Gen("pack:2 numa:4 core:16 pu:2", pus, "dgx-a100-0", 128)
    model, mem = "NVIDIA A100-SXM4-40GB", 40 * 1024 * 1024
    name = "GA100 [A100 SXM4 40GB]"
    # (numa, host bus range, switch bus, [(gpu bus), (gpu bus)], [(hca bus, name, netdev)])
    complexes = [
        (3, (0x00, 0x1f), 0x01, (0x07, 0x0f), ((0x0c, "mlx5_0", "ibp12s0"), (0x12, "mlx5_1", "ibp18s0"))),
        (1, (0x40, 0x5f), 0x41, (0x47, 0x4e), ((0x4b, "mlx5_2", "ibp75s0"), (0x54, "mlx5_3", "ibp84s0"))),
        (7, (0x80, 0x9f), 0x81, (0x87, 0x90), ((0x8d, "mlx5_6", "ibp141s0"), (0x94, "mlx5_7", "ibp148s0"))),
        (5, (0xb0, 0xcf), 0xb1, (0xb7, 0xbd), ((0xba, "mlx5_8", "ibp186s0"), (0xcc, "mlx5_9", "ibp204s0"))),
    ]
    idx = 0
    for numa, (lo, hi), sw, gpus, hcas in complexes:
        hb = g.host_bridge(numa, lo, hi)
        up = g.bridge(hb, "0000:%02x:00.0" % sw, sw + 1, hi, "1000:c010", 4)
        devs = [("gpu", b) for b in gpus] + [("hca",) + h for h in hcas]
        devs.sort(key=lambda d: d[1])
        for k, d in enumerate(devs):
            dn = g.bridge(up, "0000:%02x:%02x.0" % (sw + 1, k * 4), d[1], d[1], "1000:c010", 4,
                          depth=2)
            if d[0] == "gpu":
                g.gpu(dn, "0000:%02x:00.0" % d[1], idx, "10de:20b0", model, mem, 4, 16, name)
                idx += 1
            else:
                g.hca(dn, "0000:%02x:00.0" % d[1], d[2], d[3], "15b3:101b",
                      "MT28908 Family [ConnectX-6]", 4, 16, "200 Gb/sec (4X HDR)")
    # storage NICs: one dual-port ConnectX-6 in Ethernet (RoCE) mode on NUMA 2
    hb = g.host_bridge(2, 0x60, 0x6f)
    rp = g.bridge(hb, "0000:60:01.0", 0x61, 0x61, "1022:1483", 4)
    for fn, (name_, nd) in enumerate((("mlx5_4", "enp97s0f0"), ("mlx5_5", "enp97s0f1"))):
        g.hca(rp, "0000:61:00.%d" % fn, name_, nd, "15b3:101b", "MT28908 Family [ConnectX-6]",
              4, 16, "200 Gb/sec (4X HDR)", link_layer="Ethernet")
    # management NIC on NUMA 6
    hb = g.host_bridge(6, 0xe0, 0xef)
    g.eth(hb, "0000:e2:00.0", "enp226s0", "8086:1533", "I210 Gigabit Network Connection", 2, 1)
    # NVSwitch: 12 NVLinks of 25 GB/s between every pair (MB/s, as hwloc's NVML backend)
    g.write(os.path.join(outdir, "dgx-a100.xml"), nvlink_mbps=300000)


def hbm_flat(outdir):
    """Two sockets, each with its DRAM and its HBM as two NUMA nodes of the
    same CPUs (HBM in flat mode; CXL memory looks alike): the HBM node has
    the lower number (0 and 2), as the DRAM one need not come first. One
    H100 PCIe under each socket and a ConnectX-7 on socket 0."""
    g = Gen("pack:2 [numa] [numa] core:8 pu:2", None, "hbm-flat-0", 64)
    g.subtype(0, "HBM")
    g.subtype(2, "HBM")
    model, mem = "NVIDIA H100 PCIe", 80 * 1024 * 1024
    name = "GH100 [H100 PCIe]"
    hb = g.host_bridge(0, 0x00, 0x7f)
    rp = g.bridge(hb, "0000:16:00.0", 0x17, 0x17, "8086:352a", 5)
    g.gpu(rp, "0000:17:00.0", 0, "10de:2331", model, mem, 5, 16, name)
    rp = g.bridge(hb, "0000:29:00.0", 0x2a, 0x2a, "8086:352a", 5)
    g.hca(rp, "0000:2a:00.0", "mlx5_0", "ibp42s0", "15b3:1021",
          "MT2910 Family [ConnectX-7]", 5, 16, "400 Gb/sec (4X NDR)")
    hb = g.host_bridge(2, 0x80, 0xff)
    rp = g.bridge(hb, "0000:96:00.0", 0x97, 0x97, "8086:352a", 5)
    g.gpu(rp, "0000:97:00.0", 1, "10de:2331", model, mem, 5, 16, name)
    g.write(os.path.join(outdir, "hbm-flat-2s.xml"))


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    v100_pcie(outdir)
    dgx_a100(outdir)
    hbm_flat(outdir)


if __name__ == "__main__":
    main()
