#!/usr/bin/env python3
"""make_sysfs_corpus.py - seeds of fuzz_sysfs_tree: a snapshot of the /sys and
/proc files launch reads on the machine this runs on (`this-machine`), and
GPU/IB nodes laid out the way Linux and the NVIDIA driver do (written here,
as tests/test_aff_sysfs.c does), each in the target's line format:
  f REL TEXT / l REL TARGET / c CACHE / v CUDA_VISIBLE_DEVICES
Usage: fuzz/make_sysfs_corpus.py [OUTDIR] (default fuzz/corpus/sysfs_tree)."""
import os
import sys

def esc(b):
    out = []
    for c in b:
        if c == 0x5c:
            out.append('\\\\')
        elif c == 0x0a:
            out.append('\\n')
        elif c == 0x09:
            out.append('\\t')
        elif c < 0x20 or c > 0x7e:
            out.append('\\x%02x' % c)
        else:
            out.append(chr(c))
    return ''.join(out)

def snap(lines, path, limit=1024):
    try:
        with open(path, 'rb') as f:
            data = f.read(limit)
    except OSError:
        return
    lines.append('f %s %s' % (path.lstrip('/'), esc(data)))

def link(lines, path):
    try:
        lines.append('l %s %s' % (path.lstrip('/'), os.readlink(path)))
    except OSError:
        pass

def this_machine():
    L = []
    for p in ('/proc/sys/kernel/hostname', '/proc/sys/kernel/osrelease',
              '/proc/sys/kernel/numa_balancing', '/proc/sys/vm/nr_hugepages',
              '/proc/sys/kernel/random/boot_id', '/etc/os-release',
              '/sys/devices/system/cpu/online', '/proc/driver/nvidia/version'):
        snap(L, p)
    d = '/sys/bus/pci/devices'
    for dev in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        target = os.readlink(os.path.join(d, dev))
        L.append('l %s/%s %s' % (d.lstrip('/'), dev, target))
        real = os.path.normpath(os.path.join(d, target))
        for a in ('vendor', 'class', 'device', 'numa_node', 'local_cpulist',
                  'current_link_width', 'max_link_width',
                  'current_link_speed', 'max_link_speed'):
            snap(L, os.path.join(real, a))
    for cls in ('net', 'infiniband'):
        d = '/sys/class/' + cls
        for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            target = os.readlink(os.path.join(d, n))
            L.append('l %s/%s %s' % (d.lstrip('/'), n, target))
            real = os.path.normpath(os.path.join(d, target))
            for a in ('operstate', 'speed'):
                snap(L, os.path.join(real, a))
    d = '/sys/devices/system/node'
    for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if n.startswith('node'):
            snap(L, os.path.join(d, n, 'cpulist'))
    return '\n'.join(L) + '\n'

GPU_DEV = 'devices/pci0000:00/0000:00:01.0/0000:07:00.0'
IB_DEV = 'devices/pci0000:00/0000:00:01.0/0000:08:00.0'
VER = ('NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 '
       '22:23:56 UTC 2024\\nGCC version:  gcc version 12.2.0\\n')

def gpu_node(cache=True, cvd=None):
    L = [
        'f proc/sys/kernel/hostname gpu1\\n',
        'f proc/sys/kernel/random/boot_id 0b2c7f3e-1111-2222-3333-444455556666\\n',
        'f proc/sys/kernel/numa_balancing 1\\n',
        'f proc/sys/vm/nr_hugepages 0\\n',
        'f proc/driver/nvidia/version ' + VER,
        'f proc/driver/nvidia/gpus/0000:07:00.0/information Model: \\t\\t NVIDIA '
        'H100 80GB HBM3\\nIRQ:   \\t\\t 100\\nGPU UUID: \\t\\t '
        'GPU-5d3b3c1e-aaaa-bbbb-cccc-0123456789ab\\nBus Location: \\t\\t '
        '0000:07:00.0\\nDevice Minor: \\t\\t 0\\n',
        'f dev/nvidiactl ',
        'f dev/nvidia0 ',
        'f sys/devices/system/cpu/online 0-1\\n',
        'f sys/devices/system/node/node0/cpulist 0-1\\n',
        'f sys/%s/vendor 0x10de\\n' % GPU_DEV,
        'f sys/%s/class 0x030200\\n' % GPU_DEV,
        'f sys/%s/device 0x2330\\n' % GPU_DEV,
        'f sys/%s/numa_node 0\\n' % GPU_DEV,
        'f sys/%s/local_cpulist 0-1\\n' % GPU_DEV,
        'f sys/%s/current_link_width 16\\n' % GPU_DEV,
        'f sys/%s/max_link_width 16\\n' % GPU_DEV,
        'f sys/%s/current_link_speed 32.0 GT/s PCIe\\n' % GPU_DEV,
        'f sys/%s/max_link_speed 32.0 GT/s PCIe\\n' % GPU_DEV,
        'f sys/devices/pci0000:00/0000:00:01.0/vendor 0x8086\\n',
        'f sys/devices/pci0000:00/0000:00:01.0/class 0x060400\\n',
        'f sys/devices/pci0000:00/0000:00:01.0/local_cpulist 0-1\\n',
        'f sys/%s/vendor 0x15b3\\n' % IB_DEV,
        'f sys/%s/class 0x020700\\n' % IB_DEV,
        'f sys/%s/device 0x101b\\n' % IB_DEV,
        'f sys/%s/numa_node 0\\n' % IB_DEV,
        'f sys/%s/local_cpulist 0-1\\n' % IB_DEV,
        'f sys/%s/current_link_width 16\\n' % IB_DEV,
        'f sys/%s/current_link_speed 16.0 GT/s PCIe\\n' % IB_DEV,
        'f sys/%s/infiniband/mlx5_0/ports/1/state 4: ACTIVE\\n' % IB_DEV,
        'f sys/%s/infiniband/mlx5_0/ports/1/rate 400 Gb/sec (4X NDR)\\n' % IB_DEV,
        'f sys/%s/infiniband/mlx5_0/ports/1/link_layer InfiniBand\\n' % IB_DEV,
        'f sys/%s/infiniband/mlx5_0/ports/1/counters/port_rcv_data 123456\\n' % IB_DEV,
        'f sys/%s/infiniband/mlx5_0/ports/1/counters/port_xmit_data 654321\\n' % IB_DEV,
        'f sys/%s/net/ib0/operstate up\\n' % IB_DEV,
        'f sys/%s/net/ib0/speed 400000\\n' % IB_DEV,
        'f sys/module/nvidia_peermem/refcnt 0\\n',
        'l sys/bus/pci/devices/0000:07:00.0 ../../../%s' % GPU_DEV,
        'l sys/bus/pci/devices/0000:08:00.0 ../../../%s' % IB_DEV,
        'l sys/bus/pci/devices/0000:00:01.0 ../../../devices/pci0000:00/0000:00:01.0',
        'l sys/class/infiniband/mlx5_0 ../../%s/infiniband/mlx5_0' % IB_DEV,
        'l sys/%s/infiniband/mlx5_0/device ../../../0000:08:00.0' % IB_DEV,
        'l sys/class/net/ib0 ../../%s/net/ib0' % IB_DEV,
        'l sys/%s/net/ib0/device ../../../0000:08:00.0' % IB_DEV,
    ]
    if cache:
        L.append('c launch-topo-cache 1\\nboot 0b2c7f3e-1111-2222-3333-444455556666'
                 '\\ndriver ' + VER.split('\\n')[0] + '\\ngpu 0000:07:00.0 '
                 'GPU-5d3b3c1e-aaaa-bbbb-cccc-0123456789ab 85520809984\\n'
                 'nvlink-known\\nnvlink 0000:07:00.0 0000:07:00.0 0\\n')
    if cvd is not None:
        L.append('v ' + cvd)
    return '\n'.join(L) + '\n'

def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), 'corpus', 'sysfs_tree')
    os.makedirs(out, exist_ok=True)
    seeds = {'this-machine': this_machine(),
             'gpu-ib-node': gpu_node(),
             'gpu-ib-node-visible-uuid': gpu_node(False, 'GPU-5d3b'),
             'gpu-ib-node-visible-none': gpu_node(False, '')}
    for name, text in seeds.items():
        with open(os.path.join(out, name), 'w') as f:
            f.write(text)

if __name__ == '__main__':
    main()
