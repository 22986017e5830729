#!/usr/bin/env python3
"""Simulated AMD Instinct MI300X GPUs, as the kernel's files show them, under a root directory.

    simamd.py --root R [--render-minors 128,129] [--interval-ms 100] [--once] [--pidfile F]

Builds, under R, the files a node with len(render-minors) MI300X GPUs has (paths as under /):
the KFD topology (sys/class/kfd/kfd/topology/nodes/<n>/, node 0 the CPU, node i+1 GPU i), the
KFD per-process files (sys/class/kfd/kfd/proc/<pid>/), the render and card nodes
(sys/class/drm/renderD<minor>/device and card<k>/device, relative links to the PCI device
sys/devices/pci0000:00/<address>/), and in that device directory gpu_busy_percent,
mem_busy_percent, mem_info_vram_used, mem_info_vram_total, unique_id, product_name,
gpu_metrics (the kernel's binary table, revision 1.6 in the layout the kernel kept, as an MI300X gives it, with its energy
accumulator in 2^-16 J steps) and hwmon/hwmon<k>/{name,power1_average} (microwatts).

GPU i is Slurm's GPU index i: its render node is render_minors[i]. Every interval the simulator
looks at every process's command line (/proc/<pid>/cmdline): a process whose command line holds
SIMAMD<i>_HOLD holds 1 GiB of VRAM on GPU i (its KFD vram_<gpu_id> file; the device's
mem_info_vram_used rises by it) and keeps GPU i 60 % busy (gpu_busy_percent, a CU occupancy of
60 % of the GPU's compute units in its KFD stats, power and the energy counter rising faster)
while it runs. With no such process a GPU reads 0 % busy, its idle power, and no KFD process.

What changed is rewritten every interval, each file written beside its place and renamed over
it (a process's KFD directory is made whole, then renamed in), until SIGTERM or SIGINT. --once
writes one state and exits. --pidfile F gets this process's pid once the first state is on
disk. Python 3 standard library only.
"""

import argparse
import os
import shutil
import signal
import struct
import sys
import time

GIB = 1 << 30
# An MI300X: 304 compute units of 4 SIMDs, 192 GiB of HBM3.
CUS = 304
SIMD_PER_CU = 4
VRAM_TOTAL = 192 * GIB
# What the driver and firmware hold on an idle GPU.
VRAM_IDLE = 296_747_008
IDLE_W = 140.0
PEAK_W = 750.0
BUSY = 60
HOLD_BYTES = GIB
GFX_TARGET_VERSION = 90402
PCI_VENDOR_AMD = 0x1002
PCI_DEVICE_MI300X = 0x74A1
METRICS_SIZE = 1664
# gpu_metrics_v1_6 as the kernel kept it (1664 bytes): energy_accumulator at byte 16,
# system_clock_counter at 24.
METRICS_ENERGY_AT = 16

KFD = "sys/class/kfd/kfd"
NODES = KFD + "/topology/nodes"
PROCS = KFD + "/proc"


class Gpu:
    """One simulated GPU: its fixed identity and its running counters."""

    def __init__(self, index, minor):
        self.index = index
        self.minor = minor
        self.node = index + 1
        # KFD's gpu_id is a hash of the device; any non-zero 16-bit value will do.
        self.gpu_id = 0x4000 + 0x1D3B * index % 0xB000
        self.bus = 0x11 + 0x10 * index
        self.pci = "0000:%02x:00.0" % self.bus
        self.unique_id = 0x5A3C_0000_0000_0000 + 0x1111 * (index + 1)
        # Energy since the driver loaded: some hours' worth at idle.
        self.energy_steps = int(IDLE_W * 3600 * (index + 2) * 65536)
        self.holders = []

    def device_dir(self):
        return "sys/devices/pci0000:00/" + self.pci

    def busy(self):
        return BUSY if self.holders else 0

    def power_w(self):
        return IDLE_W + self.busy() / 100.0 * (PEAK_W - IDLE_W)


class Tree:
    """Writes files under the root, each only when its content changed."""

    def __init__(self, root):
        self.root = root
        self.written = {}

    def path(self, rel):
        return os.path.join(self.root, rel)

    def write(self, rel, content):
        if isinstance(content, str):
            content = content.encode()
        if self.written.get(rel) == content:
            return
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        tmp = os.path.join(os.path.dirname(p), ".%s.tmp" % os.path.basename(p))
        with open(tmp, "wb") as f:
            f.write(content)
        os.replace(tmp, p)
        self.written[rel] = content

    def link(self, rel, target):
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        if os.path.islink(p) and os.readlink(p) == target:
            return
        tmp = p + ".tmp"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, p)

    def forget(self, prefix):
        for k in [k for k in self.written if k.startswith(prefix)]:
            del self.written[k]


def properties(g):
    pairs = [
        ("cpu_cores_count", 0), ("simd_count", CUS * SIMD_PER_CU), ("mem_banks_count", 1),
        ("caches_count", 0), ("io_links_count", 1), ("p2p_links_count", 0),
        ("cpu_core_id_base", 0), ("simd_id_base", 0x80001000 + 0x10 * g.index),
        ("max_waves_per_simd", 8), ("lds_size_in_kb", 64), ("gds_size_in_kb", 0),
        ("num_gws", 64), ("wave_front_size", 64), ("array_count", 32),
        ("simd_arrays_per_engine", 1), ("cu_per_simd_array", 10), ("simd_per_cu", SIMD_PER_CU),
        ("max_slots_scratch_cu", 32), ("gfx_target_version", GFX_TARGET_VERSION),
        ("vendor_id", PCI_VENDOR_AMD), ("device_id", PCI_DEVICE_MI300X),
        ("location_id", g.bus << 8), ("domain", 0), ("drm_render_minor", g.minor),
        ("hive_id", 0), ("num_sdma_engines", 2), ("num_sdma_xgmi_engines", 6),
        ("num_sdma_queues_per_engine", 8), ("num_cp_queues", 24),
        ("max_engine_clk_fcompute", 2100), ("local_mem_size", 0), ("fw_version", 177),
        ("capability", 0x28883E80), ("debug_prop", 0x4A1), ("sdma_fw_version", 19),
        ("unique_id", g.unique_id), ("num_xcc", 8), ("max_engine_clk_ccompute", 3700),
    ]
    return "".join("%s %d\n" % p for p in pairs)


def gpu_metrics(g, now_ns):
    b = bytearray(METRICS_SIZE)
    struct.pack_into("=HBB", b, 0, METRICS_SIZE, 1, 6)
    hot = 38 + g.busy() // 3
    struct.pack_into("=HHHHHH", b, 4, hot, hot - 4, hot - 8, int(g.power_w()), g.busy(),
                     g.busy() // 3)
    # After the six temperatures, power and utilization (bytes 4 to 15): the counter.
    # The counter and the clock of the tick that moved it on, as the firmware stamps a table.
    struct.pack_into("=QQ", b, METRICS_ENERGY_AT, g.energy_steps & (2**64 - 1), now_ns)
    return bytes(b)


def build_static(tree, gpus):
    """The files that never change."""
    tree.write(KFD + "/topology/generation_id", "1\n")
    tree.write(KFD + "/topology/system_properties", "platform_oem 0\nplatform_id 0\nplatform_rev 0\n")
    tree.write(NODES + "/0/gpu_id", "0\n")
    tree.write(NODES + "/0/name", "\n")
    tree.write(NODES + "/0/properties", "cpu_cores_count 96\nsimd_count 0\nmem_banks_count 1\n"
               "location_id 0\ndomain 0\ndrm_render_minor 0\nunique_id 0\n")
    os.makedirs(tree.path(PROCS), exist_ok=True)
    for g in gpus:
        n = "%s/%d" % (NODES, g.node)
        tree.write(n + "/gpu_id", "%d\n" % g.gpu_id)
        tree.write(n + "/name", "gfx942\n")
        tree.write(n + "/properties", properties(g))
        d = g.device_dir()
        tree.write(d + "/vendor", "0x%04x\n" % PCI_VENDOR_AMD)
        tree.write(d + "/device", "0x%04x\n" % PCI_DEVICE_MI300X)
        tree.write(d + "/mem_info_vram_total", "%d\n" % VRAM_TOTAL)
        tree.write(d + "/unique_id", "%016x\n" % g.unique_id)
        tree.write(d + "/product_name", "AMD Instinct MI300X\n")
        # Whole GPUs: the mode an MI300X boots in unless set otherwise.
        tree.write(d + "/current_compute_partition", "SPX\n")
        tree.write(d + "/hwmon/hwmon%d/name" % (2 + g.index), "amdgpu\n")
        target = "../../../devices/pci0000:00/" + g.pci
        tree.link("sys/class/drm/renderD%d/device" % g.minor, target)
        tree.link("sys/class/drm/card%d/device" % (g.minor - 128 if g.minor >= 128 else g.index),
                  target)


def holders_now(gpus):
    """Per GPU, the pids whose command line holds its marker (this process left out)."""
    found = [[] for _ in gpus]
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                cmd = f.read(1 << 16)
        except OSError:
            continue
        for g in gpus:
            if b"SIMAMD%d_HOLD" % g.index in cmd:
                found[g.index].append(int(name))
    return found


def write_procs(tree, gpus):
    """Each holder's KFD directory, with its files for the GPUs it holds; gone ones removed."""
    want = {}
    for g in gpus:
        for pid in g.holders:
            want.setdefault(pid, []).append(g)
    base = tree.path(PROCS)
    for name in os.listdir(base):
        if name.isdigit() and int(name) not in want:
            old = os.path.join(base, ".%s.old" % name)
            os.rename(os.path.join(base, name), old)
            shutil.rmtree(old, ignore_errors=True)
            tree.forget("%s/%s/" % (PROCS, name))
    for pid, held in want.items():
        files = {"pasid": "%d\n" % (0x8000 + pid % 0x7FFF)}
        for g in held:
            files["vram_%d" % g.gpu_id] = "%d\n" % HOLD_BYTES
            files["sdma_%d" % g.gpu_id] = "0\n"
            files["stats_%d/evicted_ms" % g.gpu_id] = "0\n"
            files["stats_%d/cu_occupancy" % g.gpu_id] = "%d\n" % round(CUS * BUSY / 100)
        final = os.path.join(base, str(pid))
        if os.path.isdir(final):
            for rel, text in files.items():
                tree.write("%s/%d/%s" % (PROCS, pid, rel), text)
            continue
        new = os.path.join(base, ".%d.new" % pid)
        shutil.rmtree(new, ignore_errors=True)
        for rel, text in files.items():
            p = os.path.join(new, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)
        os.rename(new, final)
        for rel, text in files.items():
            tree.written["%s/%d/%s" % (PROCS, pid, rel)] = text.encode()


def step(tree, gpus, dt, now_ns):
    """One state: who holds what now, and the counters moved on by `dt` seconds to the monotonic
    clock's `now_ns`."""
    found = holders_now(gpus)
    for g in gpus:
        g.holders = found[g.index]
        g.energy_steps += int(g.power_w() * dt * 65536)
        d = g.device_dir()
        tree.write(d + "/gpu_busy_percent", "%d\n" % g.busy())
        tree.write(d + "/mem_busy_percent", "%d\n" % (g.busy() // 3))
        tree.write(d + "/mem_info_vram_used", "%d\n" % (VRAM_IDLE + HOLD_BYTES * len(g.holders)))
        tree.write(d + "/hwmon/hwmon%d/power1_average" % (2 + g.index),
                   "%d\n" % int(g.power_w() * 1e6))
        tree.write(d + "/gpu_metrics", gpu_metrics(g, now_ns))
    write_procs(tree, gpus)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Simulated AMD MI300X GPUs under a root directory.")
    ap.add_argument("--root", required=True)
    ap.add_argument("--render-minors", default="128,129")
    ap.add_argument("--interval-ms", type=int, default=100)
    ap.add_argument("--once", action="store_true")
    ap.add_argument("--pidfile")
    a = ap.parse_args(argv)
    minors = [int(m) for m in a.render_minors.split(",") if m.strip()]
    if not minors or len(set(minors)) != len(minors) or any(m <= 0 for m in minors):
        ap.error("--render-minors: distinct positive numbers, one per GPU")
    if a.interval_ms <= 0:
        ap.error("--interval-ms: a positive number")
    gpus = [Gpu(i, m) for i, m in enumerate(minors)]
    tree = Tree(os.path.abspath(a.root))
    stop = []
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.append(1))
    build_static(tree, gpus)
    last = time.monotonic_ns()
    step(tree, gpus, 0.0, last)
    if a.pidfile:
        with open(a.pidfile + ".tmp", "w") as f:
            f.write("%d\n" % os.getpid())
        os.replace(a.pidfile + ".tmp", a.pidfile)
    if a.once:
        return 0
    while not stop:
        time.sleep(a.interval_ms / 1000.0)
        now = time.monotonic_ns()
        step(tree, gpus, (now - last) / 1e9, now)
        last = now
    return 0


if __name__ == "__main__":
    sys.exit(main())
