#!/usr/bin/env python3
"""AMD truth: gpu-tracker's AMD GPU figures beside references taken on the same GPU, at the same time.

Runs gpu-truth.py's four PyTorch workloads (torch built for ROCm: torch.cuda drives HIP) on one
AMD GPU, each under `gpu-tracker -e --gb amd` and under the plugin's step tracker
(`step_in_cgroup --gb amd`), and prints one Markdown table: each figure of each tool beside a
reference read by this script itself, not through gpu-tracker's code: the kernel's files (busy %,
VRAM used, the workload's KFD VRAM and CU occupancy, hwmon power every 100 ms; the gpu_metrics
energy counter before and after), `amd-smi metric --json` and `torch.cuda.max_memory_reserved()`.
Needs python3 and its standard library, torch and (for its column) amd-smi: the binaries come
ready-built (`bench/amd-truth pack DIR`). See docs/AMD-TRUTH.md.

    python3 amd-truth.py run --out truth.md               # on the AMD machine, from the packed DIR
    python3 amd-truth.py run --no-torch --amd-root ROOT   # against tests/simamd.py, no GPU
"""

import argparse
import datetime
import glob
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def load_gpu_truth():
    """gpu-truth.py, beside this script (here and packed): its workloads and table helpers."""
    spec = importlib.util.spec_from_file_location("gpu_truth", Path(__file__).resolve().parent / "gpu-truth.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_truth = load_gpu_truth()
dig, number, fmt, find_exe = gpu_truth.dig, gpu_truth.first_number, gpu_truth.fmt, gpu_truth.find_exe
# The lines a workload prints at its end, before its JSON: this script's, then gpu-truth.py's.
MARK, GPU_TRUTH_MARK = "AMD-TRUTH-RESULT ", gpu_truth.MARK
WORKLOADS, GIB, MIB = gpu_truth.WORKLOADS, 1 << 30, 1 << 20
# --no-torch: the simulator's marker for the GPU (tests/simamd.py holds 1 GiB of GPU i, 60 %
# busy, for a process whose command line holds SIMAMD<i>_HOLD). The workload puts it in its own
# command line, never in the tools' (theirs hold the workload's arguments).
SIM_MARK_ENV, SIM_MARKED_ENV = "AMD_TRUTH_SIM_MARK", "AMD_TRUTH_SIM_MARKED"
# Where a workload writes its pid, for the KFD references.
PIDFILE_ENV, KFD = "AMD_TRUTH_PIDFILE", "sys/class/kfd/kfd"


# --------------------------------------------------------------------------------------------
# Workloads: each runs in a child process, under one of the tools, on HIP device 0 (the script
# sets ROCR_VISIBLE_DEVICES to the chosen GPU, so that is the GPU the references read): matmul,
# copy, tiny and hold, as docs/GPU-TRUTH.md describes them.
def workload(name, seconds, hold_gib, no_torch):
    """Runs workload `name` for about `seconds`, then prints MARK and its figures as JSON."""
    mark = os.environ.get(SIM_MARK_ENV)
    if no_torch and mark and SIM_MARKED_ENV not in os.environ:
        # The same pid, with the marker as its argv[0]: the simulator sees this process alone.
        os.environ[SIM_MARKED_ENV] = "1"
        os.execv(sys.executable, [mark, *sys.argv])
    pidfile = os.environ.get(PIDFILE_ENV)
    if pidfile:
        Path(pidfile).write_text(f"{os.getpid()}\n")
    result = {"workload": name, "max_memory_reserved": None, "torch": None, "pid": os.getpid()}
    if no_torch:
        time.sleep(seconds)
        print(MARK + json.dumps(result), flush=True)
        return
    import torch

    # Which GPU HIP gave the workload, to check it is the one the references read.
    props = torch.cuda.get_device_properties(0)
    result.update(torch=torch.__version__, hip=getattr(torch.version, "hip", None),
                  pci_bus_id=getattr(props, "pci_bus_id", None), arch=getattr(props, "gcnArchName", None))
    print(MARK + json.dumps(result), flush=True)
    # The workloads themselves are gpu-truth.py's: the same code on both vendors, HIP behind
    # torch.cuda here. They print their own figures after these.
    gpu_truth.workload(name, seconds, hold_gib, False)


# --------------------------------------------------------------------------------------------
# The node's AMD GPUs, from the KFD topology and the DRM device files under a root (`/`).
def read_blob(path):
    """A sysfs file's bytes (they are small: 64 KiB at most read), None when unreadable."""
    try:
        with open(path, "rb") as f:
            return f.read(1 << 16)
    except OSError:
        return None


def read_text(path):
    return (read_blob(path) or b"").decode(errors="replace") or None


def read_int(path):
    words = (read_text(path) or "").split()
    return int(words[0]) if words and re.fullmatch(r"-?\d+", words[0]) else None


def properties(text):
    """A KFD `properties` file: `name value` lines, the values integers."""
    pairs = (line.split() for line in (text or "").splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and re.fullmatch(r"-?\d+", p[1])}


PCI_RE = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def full_pci(s):
    """A PCI address with its domain, in lower case."""
    s = str(s or "").strip().lower()
    return s if s.count(":") == 2 else "0000:" + s


def list_gpus(root):
    """The AMD GPUs under `root`, in PCI order (Slurm's AutoDetect=rsmi order): dicts."""
    nodes = Path(root) / KFD / "topology" / "nodes"
    try:
        names = sorted((n for n in os.listdir(nodes) if n.isdigit()), key=int)
    except OSError as e:
        raise SystemExit(f"amd-truth: no KFD topology under {root}: {e}")
    gpus, kfd_order = [], 0
    for n in names:
        gpu_id = read_int(nodes / n / "gpu_id")
        if not gpu_id:  # a CPU node
            continue
        p = properties(read_text(nodes / n / "properties"))
        minor, loc, dom = p.get("drm_render_minor"), p.get("location_id"), p.get("domain", 0)
        pci = dev_dir = None
        link = Path(root) / "sys/class/drm" / f"renderD{minor}" / "device"
        if minor and link.exists():
            # The render node's device: the PCI device directory, whose name is its address.
            dev_dir = Path(os.path.realpath(link))
            pci = dev_dir.name.lower() if PCI_RE.match(dev_dir.name.lower()) else None
        if pci is None and loc is not None:
            pci = "%04x:%02x:%02x.%x" % (dom, (loc >> 8) & 0xFF, (loc >> 3) & 0x1F, loc & 7)
        hwmons = sorted(glob.glob(str(dev_dir / "hwmon" / "hwmon*"))) if dev_dir else []
        hwmon = next((h for h in hwmons if (read_text(Path(h) / "name") or "").strip() == "amdgpu"), None)
        simd, per_cu, unique = p.get("simd_count"), p.get("simd_per_cu"), p.get("unique_id") or None
        gpus.append({
            "node": int(n), "kfd_order": kfd_order, "gpu_id": gpu_id, "minor": minor, "pci": pci,
            "unique_id": unique, "uuid": "GPU-%016x" % unique if unique else None,
            "compute_units": simd // per_cu if simd and per_cu else None,
            "name": ((read_text(dev_dir / "product_name") or "").strip() if dev_dir else "")
            or (read_text(nodes / n / "name") or "").strip(),
            "device_dir": str(dev_dir) if dev_dir else None, "hwmon": hwmon,
        })
        kfd_order += 1
    gpus.sort(key=lambda g: g["pci"] or "~")
    return [{**g, "index": i} for i, g in enumerate(gpus)]


def choose_gpu(gpus, spec):
    """The GPU `spec` names: Slurm's index (PCI order), a render node (`renderD128`, `/dev/dri/
    renderD128`, or a bare minor from 128 on) or a PCI address (with or without its domain)."""
    s = spec.strip().lower()
    m = re.search(r"(?:^|renderd)(\d+)$", s)
    if ":" in s:
        found = [g for g in gpus if g["pci"] == full_pci(s)]
    elif m and "renderd" not in s and int(s) < len(gpus):
        found = [gpus[int(s)]]
    else:
        found = [g for g in gpus if m and g["minor"] == int(m.group(1))]
    if not found:
        listed = ", ".join(f"{g['index']}: renderD{g['minor']} {g['pci']}" for g in gpus)
        raise SystemExit(f"amd-truth: no AMD GPU {spec!r} (there are {listed or 'none'})")
    return found[0]


# --------------------------------------------------------------------------------------------
# References: the kernel's files, read directly.

# gpu_metrics (kgd_pp_interface.h): byte offset of the u64 energy_accumulator, 2^-16 J steps, by
# (format, content) revision. 1.6 has had two layouts: the first (a table of 384 bytes) kept
# vcn_activity[4] and jpeg_activity[32] before it, the one in kernels since moved them into
# per-partition stats (a table of well over 1 KiB) and has the counter right after the activities.
ENERGY_AT = {(1, 4): 24, (1, 5): 88, (1, 7): 24, (1, 8): 24}


def metrics_energy_j(blob):
    """(joules, None) from a gpu_metrics table, or (None, why)."""
    if blob is None or len(blob) < 4:
        return None, "no gpu_metrics file" if blob is None else "gpu_metrics shorter than its header"
    size, fmt, content = struct.unpack_from("=HBB", blob, 0)
    at = (88 if size <= 512 else 16) if (fmt, content) == (1, 6) else ENERGY_AT.get((fmt, content))
    if at is None:
        return None, f"gpu_metrics revision {fmt}.{content} has no energy counter of a documented unit"
    if len(blob) < at + 8 or size < at + 8:
        return None, f"gpu_metrics revision {fmt}.{content} is too short ({len(blob)} bytes)"
    steps = struct.unpack_from("=Q", blob, at)[0]
    if steps in (0, 2**64 - 1):
        return None, f"gpu_metrics revision {fmt}.{content}: the energy counter reads {steps:#x}"
    return steps / 65536.0, None


def smi_value(v):
    """(number, unit) of one amd-smi JSON value: a number, {"value", "unit"}, or "12 %"."""
    if isinstance(v, dict):
        return smi_value(v.get("value"))[0], v.get("unit")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v), None
    m = re.match(r"\s*([-+]?\d+(?:\.\d+)?)\s*(\S*)", v) if isinstance(v, str) else None
    return (float(m.group(1)), m.group(2) or None) if m else (None, None)


def smi_find(doc, names):
    """The first value under any key in `names`, depth first."""
    if isinstance(doc, dict):
        hit = next((v for k, v in doc.items() if k.lower() in names), None)
        inner = doc.values()
    else:
        hit, inner = None, doc if isinstance(doc, list) else []
    return hit if hit is not None else next((r for r in map(lambda v: smi_find(v, names), inner)
                                             if r is not None), None)


SCALE = {"b": 1, "kb": 1 << 10, "mb": MIB, "mib": MIB, "gb": GIB, "gib": GIB,
         "j": 1, "mj": 1e-3, "uj": 1e-6, "µj": 1e-6, "kj": 1e3}


def parse_amd_smi(text, pci):
    """busy %, VRAM used (bytes), power (W), energy (J) from `amd-smi metric --json` output: any
    of them None where the output lacks it; ValueError where it is no JSON for this GPU."""
    # Warnings may come before the JSON, and lines after it.
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    if start < 0:
        raise ValueError("no JSON in its output")
    doc = json.JSONDecoder().raw_decode(text[start:])[0]
    if isinstance(doc, list):
        mine = doc if len(doc) == 1 else [d for d in doc if isinstance(d, dict)
                                         and full_pci(d.get("bdf")) == pci]
        if len(mine) != 1:
            raise ValueError(f"{len(doc)} GPUs in its output, none told by its PCI address")
        doc = mine[0]
    busy, _ = smi_value(smi_find(doc, {"gfx_activity", "gfx_usage", "gpu_use_percent"}))
    used, vram_unit = smi_value(smi_find(doc, {"used_vram", "vram_used"}))
    power, _ = smi_value(smi_find(doc, {"socket_power", "average_socket_power", "current_socket_power",
                                        "power_usage"}))
    energy, energy_unit = smi_value(smi_find(doc, {"total_energy_consumption"}))
    scale = lambda v, u, default: None if v is None else v * SCALE.get((u or default).lower(), 1)  # noqa: E731
    # amd-smi labels VRAM "MB" and counts it in MiB (bytes // 1024²).
    return {"busy_percent": busy, "vram_used_bytes": scale(used, vram_unit, "mb"), "power_w": power,
            "energy_j": scale(energy, energy_unit, "j")}


def amd_smi(pci, exe):
    """parse_amd_smi's figures for the GPU at `pci`, or an error string."""
    path, err = shutil.which(exe) if exe else None, "amd-smi gave nothing"
    if path is None:
        return "amd-smi not found"
    # The figures asked for alone first (quicker); a version without those options, everything.
    for args in (["--usage", "--mem-usage", "--power", "--energy"], []):
        try:
            p = subprocess.run([path, "metric", "-g", pci, *args, "--json"], capture_output=True,
                               text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            return f"amd-smi: {e}"
        try:
            if p.returncode == 0:
                return parse_amd_smi(p.stdout, pci)
            err = f"amd-smi exited with {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]}"
        except ValueError as e:
            err = f"amd-smi: {e}"
    return err


class Reference:
    """Everything read beside one tool's run: the kernel's files every 100 ms, the energy counter
    and amd-smi's at both ends, amd-smi once half-way through (`mid` seconds after the start)."""

    def __init__(self, gpu, root, pidfile, mid, smi_exe):
        self.gpu, self.root, self.pidfile, self.mid, self.smi_exe = gpu, root, pidfile, mid, smi_exe
        self.dev = Path(gpu["device_dir"]) if gpu["device_dir"] else None
        self.busy, self.vram, self.kfd_vram, self.cu = [], [], [], []
        self.power_j, self.power_samples, self.pid = 0.0, 0, None
        self.smi_mid = "not run"
        self.stop_event = threading.Event()

    def power_w(self):
        h = self.gpu["hwmon"]
        uw = next((v for v in (read_int(Path(h) / f) for f in ("power1_average", "power1_input"))
                   if v is not None), None) if h else None
        return None if uw is None else uw / 1e6

    def energy(self):
        return metrics_energy_j(read_blob(self.dev / "gpu_metrics") if self.dev else None)

    def __enter__(self):
        self.smi0 = amd_smi(self.gpu["pci"], self.smi_exe)
        self.t0 = time.monotonic()
        self.energy0 = self.energy()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        self.smi_timer = threading.Timer(self.mid, lambda: setattr(self, "smi_mid", amd_smi(self.gpu["pci"],
                                                                                          self.smi_exe)))
        self.smi_timer.start()
        return self

    def sample_once(self, dt):
        for values, name in ((self.busy, "gpu_busy_percent"), (self.vram, "mem_info_vram_used")):
            v = read_int(self.dev / name) if self.dev else None
            values += [] if v is None else [v]
        w = self.power_w()
        if w is not None:
            # power1_average is the mean over the time just past: it weighs the gap before it.
            self.power_j += w * dt
            self.power_samples += 1
        if self.pid is None:
            self.pid = read_int(self.pidfile)
        proc = Path(self.root) / KFD / "proc" / str(self.pid) if self.pid else None
        gid = self.gpu["gpu_id"]
        vram = read_int(proc / f"vram_{gid}") if proc else None
        self.kfd_vram += [] if vram is None else [vram]
        cus = read_int(proc / f"stats_{gid}" / "cu_occupancy") if proc else None
        all_cus = self.gpu["compute_units"]
        if all_cus:
            # A workload not (or no longer) in KFD's list has no waves in flight.
            self.cu.append(100.0 * min(cus or 0, all_cus) / all_cus)

    def sample(self):
        last = time.monotonic()
        while not self.stop_event.wait(0.1):
            self.sample_once(time.monotonic() - last)
            last = time.monotonic()
        self.sample_once(time.monotonic() - last)

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join()
        self.smi_timer.cancel()
        self.seconds = time.monotonic() - self.t0
        self.energy1 = self.energy()
        self.smi1 = amd_smi(self.gpu["pci"], self.smi_exe)

    def figures(self):
        mean = lambda v: sum(v) / len(v) if v else None  # noqa: E731
        top = lambda v: max(v) if v else None  # noqa: E731
        (e0, why0), (e1, why1) = self.energy0, self.energy1
        smi = [r if isinstance(r, dict) else {} for r in (self.smi0, self.smi_mid, self.smi1)]
        smi_why = next((r for r in (self.smi0, self.smi_mid, self.smi1) if isinstance(r, str)),
                       "not in its output")
        e_smi = [r.get("energy_j") for r in (smi[0], smi[2])]
        f = {
            "seconds": self.seconds, "samples": len(self.busy), "kfd_pid": self.pid,
            "busy_mean_percent": mean(self.busy), "busy_max_percent": top(self.busy),
            "vram_used_max_bytes": top(self.vram), "kfd_vram_max_bytes": top(self.kfd_vram),
            "cu_occupancy_mean_percent": mean(self.cu), "cu_occupancy_max_percent": top(self.cu),
            "power_energy_joules": self.power_j if self.power_samples else None,
            "metrics_energy_joules": e1 - e0 if e0 is not None and e1 is not None else None,
            "smi_busy_percent": smi[1].get("busy_percent"), "smi_power_w": smi[1].get("power_w"),
            "smi_vram_used_bytes": smi[1].get("vram_used_bytes"),
            "smi_energy_joules": e_smi[1] - e_smi[0] if None not in e_smi else None,
        }
        why = {
            "busy_mean_percent": None if self.dev else "no device directory for the render node",
            "kfd_vram_max_bytes": f"no KFD vram_{self.gpu['gpu_id']} for the workload's pid",
            "cu_occupancy_mean_percent": "the KFD topology gives no compute unit count",
            "power_energy_joules": "no amdgpu hwmon power1_average",
            "metrics_energy_joules": why0 or why1,
            **{k: smi_why for k in ("smi_busy_percent", "smi_power_w", "smi_vram_used_bytes",
                                    "smi_energy_joules")},
        }
        why["busy_max_percent"] = why["vram_used_max_bytes"] = why["busy_mean_percent"]
        why["cu_occupancy_max_percent"] = why["cu_occupancy_mean_percent"]
        # Why a reference has no value, beside it: its cell says so.
        f.update({k + "_why": w for k, w in why.items() if f[k] is None and w})
        return f


# --------------------------------------------------------------------------------------------
# The tools, and their figures read defensively: builds differ in what they record.
def find_entry(doc, gpu):
    """The tool's entry for `gpu`: by PCI address where the entry has one, else by UUID, else by
    render minor."""
    entries = [g for g in (doc or {}).get("gpus", []) if isinstance(g, dict)]
    tests = [lambda g: g.get("pci_bus_id") and full_pci(g["pci_bus_id"]) == gpu["pci"],
             lambda g: g.get("uuid") and g["uuid"] in (gpu["uuid"], gpu["pci"]),
             lambda g: g.get("vendor") == "amd" and g.get("minor") == gpu["minor"]]
    return next((g for test in tests for g in entries if test(g)), None)


def tool_figures(tool, doc, gpu):
    """The figures of `gpu` in a tool's JSON (None for what this build lacks), and why the tool
    has none for a figure where it says."""
    g = find_entry(doc, gpu)
    if g is None:
        return {"error": "the GPU is not in the tool's output"}
    if tool == "gpu-tracker":
        ok = g.get("unit", "bytes") == "bytes"
        proc, dev = (number(g, [("max_tracked",)]), number(g, [("max_used",)])) if ok else (None, None)
    else:
        proc, dev = number(g, [("peak_step_memory_bytes",)]), number(g, [("peak_device_memory_bytes",)])
    why = {k: dig(v, "why") for k, v in (g.get("no_data") or {}).items() if isinstance(v, dict)}
    return {"command_memory_bytes": proc, "device_memory_bytes": dev,
            "utilization_mean_percent": number(g, [("mean_utilization_percent",)]),
            "utilization_max_percent": number(g, [("max_utilization_percent",)]),
            "cu_occupancy_mean_percent": number(g, [("cu_occupancy_percent", "mean")]),
            "cu_occupancy_max_percent": number(g, [("cu_occupancy_percent", "max")]),
            "energy_joules": number(g, gpu_truth.ENERGY_PATHS), "no_data": {k: v for k, v in why.items() if v}}


def workload_result(stdout):
    """The workload's figures: its own line and, with torch, gpu-truth.py's workload's."""
    found = [json.loads(line[len(m):]) for line in stdout.splitlines() for m in (MARK, GPU_TRUTH_MARK)
             if line.startswith(m)]
    return {k: v for d in found for k, v in d.items()} if found else None


def workload_env(gpu, opts, pidfile):
    """The workload's environment: the chosen GPU alone visible to ROCm, as HIP device 0."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", SIM_MARKED_ENV)}
    # ROCr takes a GPU by its UUID (GPU-<unique_id>) or its place among KFD's GPU nodes.
    env.update(ROCR_VISIBLE_DEVICES=gpu["uuid"] or str(gpu["kfd_order"]), HIP_VISIBLE_DEVICES="0")
    env[PIDFILE_ENV] = str(pidfile)
    if opts.no_torch:
        env[SIM_MARK_ENV] = f"SIMAMD{gpu['index']}_HOLD"
    if opts.amd_root:
        # Both tools' readers (a hidden option of each, for tests) point at the simulated root.
        env["GPU_TRACKER_AMD_ROOT"] = str(Path(opts.amd_root).resolve())
    return env


def run_tool(tool, opts, exe, name, gpu, tmp, pidfile):
    """Runs workload `name` under `tool` (the program `exe`): (tool JSON, workload result,
    error or None)."""
    seconds = opts.hold_seconds if name == "hold" else opts.seconds
    wl = [sys.executable, str(Path(__file__).resolve()), "workload", name, "--seconds", str(seconds),
          "--hold-gib", str(opts.hold_gib)] + (["--no-torch"] if opts.no_torch else [])
    env = workload_env(gpu, opts, pidfile)
    if tool == "gpu-tracker":
        out = tmp / f"{name}.gpu-tracker.json"
        cmd = [str(exe), "-e", shlex.join(wl), "-f", "json", "-o", str(out), "--gb", "amd",
               "--st", str(opts.interval), "--ru", "bytes", "--gru", "bytes", "--tu", "seconds"]
    else:
        cmd = [str(exe), "--interval", str(opts.interval), "--spool", str(tmp / "spool"),
               "--gb", "amd", "--gpus", str(gpu["index"]), "--"] + wl
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 180)
    except (OSError, subprocess.SubprocessError) as e:
        return None, None, f"{tool}: {e}"
    sys.stderr.write(p.stderr)
    result = workload_result(p.stdout)
    err = None if p.returncode == 0 else f"{tool} exited with {p.returncode}: {p.stderr.strip()[-300:]}"
    if result and result.get("pci_bus_id") is not None and gpu["pci"]:
        bus = int(gpu["pci"].split(":")[1], 16)
        if result["pci_bus_id"] != bus:
            err = (err + "; " if err else "") + (
                f"the workload ran on PCI bus {result['pci_bus_id']:#x}, not the chosen GPU's {bus:#x}")
    try:
        # The step tracker prints its record's path.
        doc = json.loads((out if tool == "gpu-tracker" else Path(p.stdout.strip().splitlines()[-1])).read_text())
    except (OSError, ValueError, IndexError) as e:
        return None, result, err or f"{tool}: no JSON: {e}"
    return doc, result, err


# --------------------------------------------------------------------------------------------
# The table.

NA = "n/a (not in this build)"
# (label, tool key, reference key, unit scale, unit name, the tool's no-data figure).
ROWS = [
    ("command's GPU memory, peak ¹", "command_memory_bytes", "kfd_vram_max_bytes", GIB, "GiB", "process_memory"),
    ("command's GPU memory, peak, vs torch ²", "command_memory_bytes", "torch_max_memory_reserved", GIB, "GiB",
     "process_memory"),
    ("device memory used, peak (mem_info_vram_used)", "device_memory_bytes", "vram_used_max_bytes", GIB, "GiB",
     "memory"),
    ("device memory used vs amd-smi mid-run", "device_memory_bytes", "smi_vram_used_bytes", GIB, "GiB", "memory"),
    ("GPU busy, mean (gpu_busy_percent)", "utilization_mean_percent", "busy_mean_percent", 1, "%", "utilization"),
    ("GPU busy, highest (gpu_busy_percent)", "utilization_max_percent", "busy_max_percent", 1, "%", "utilization"),
    ("GPU busy, mean, vs amd-smi mid-run", "utilization_mean_percent", "smi_busy_percent", 1, "%", "utilization"),
    ("CU occupancy, mean ³", "cu_occupancy_mean_percent", "cu_occupancy_mean_percent", 1, "%", "cu_occupancy"),
    ("CU occupancy, highest ³", "cu_occupancy_max_percent", "cu_occupancy_max_percent", 1, "%", "cu_occupancy"),
    ("energy (gpu_metrics counter) ⁴", "energy_joules", "metrics_energy_joules", 1, "J", "energy"),
    ("energy vs hwmon power1_average × time", "energy_joules", "power_energy_joules", 1, "J", "energy"),
    ("energy vs amd-smi before and after", "energy_joules", "smi_energy_joules", 1, "J", "energy"),
]


def cell_text(s):
    return str(s).replace("|", "/").replace("\n", " ")[:120]


def cells(run, tool_key, ref_key, scale, unit, figure):
    """(tool value, reference, difference) cells of one tool's run."""
    if run is None:
        return "not run", "", ""
    figs = run["tool"]
    if "error" in figs:
        return f"n/a ({figs['error']})", "", ""
    tv, rv = figs.get(tool_key), run["reference"].get(ref_key)
    why = figs.get("no_data", {}).get(figure)
    t = fmt(tv, scale, unit) or (f"n/a ({cell_text(why)})" if why else NA)
    rwhy = run["reference"].get(ref_key + "_why")
    r = fmt(rv, scale, unit) or (f"n/a ({cell_text(rwhy)})" if rwhy else "n/a")
    # `+ 0.0` turns a -0.0 into 0.0.
    d = f"{round(100 * (tv - rv) / rv, 1) + 0.0:+.1f} %" if tv is not None and rv else ""
    return t, r, d


def table(report):
    lines = ["| workload | figure | gpu-tracker -e | reference | diff | step tracker | reference | diff |",
             "|---|---|---|---|---|---|---|---|"]
    for name in report["workloads"]:
        runs = report["runs"].get(name, {})
        lines += [f"| {name} | {row[0]} | " + " | ".join(cells(runs.get("gpu-tracker"), *row[1:])
                                                         + cells(runs.get("step"), *row[1:])) + " |"
                  for row in ROWS]
    return "\n".join(lines)


def markdown(report):
    h = report["header"]
    g = h["gpu"]
    out = [
        f"# AMD truth, {h['date']}",
        "",
        f"- GPU {g['index']} (Slurm's AutoDetect=rsmi order): {g['name']}, PCI {g['pci']}, "
        f"renderD{g['minor']}, KFD gpu_id {g['gpu_id']}, {g['compute_units']} CUs; host {h['host']}, "
        f"kernel {h['kernel']}, amdgpu {h['amdgpu'] or '(in-tree)'}, ROCm {h['rocm'] or 'unknown'}",
        f"- torch {h.get('torch') or 'not used'}, HIP {h.get('hip') or '-'}; {h['tool_version']}; "
        f"amd-smi: {h['amd_smi']}; sampling every {h['interval']} s",
        f"- workloads: {h['seconds']} s each ({h['hold_gib']} GiB held {h['hold_seconds']} s for `hold`)"
        if not h["no_torch"] else f"- workloads: {h['seconds']} s each ({h['hold_seconds']} s for `hold`); "
        f"**--no-torch against the simulated root {h['amd_root']}: no GPU work was done, each workload "
        "only held the simulator's 1 GiB and 60 % busy**",
        "",
        table(report),
        "",
        "References are read every 100 ms unless said. ¹ the workload's own KFD file "
        "(`/sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id>`), its highest reading.",
        "² `torch.cuda.max_memory_reserved()`: the tools also count what the HIP runtime itself holds.",
        "³ the workload's `stats_<gpu_id>/cu_occupancy` (CUs' worth of waves in flight) over the GPU's "
        "CUs (KFD topology `simd_count / simd_per_cu`); 0 while the workload is not in KFD's list.",
        "⁴ `gpu_metrics`' energy accumulator (2^-16 J steps) read before and after the whole run; the "
        "reference spans the tool's own start and end too.",
    ]
    runs = [(n, t, r) for n, by_tool in report["runs"].items() for t, r in by_tool.items() if r]
    rates = [f"{n} {r['result']['rate']:.1f} {r['result']['rate_unit']}" for n, t, r in runs
             if t == "step" and (r.get("result") or {}).get("rate") is not None]
    out += ["", "Workload rates (under the step tracker): " + "; ".join(rates) + "."] if rates else []
    notes = [f"- {n} under {t}: {r['error']}" for n, t, r in runs if r.get("error")]
    out += ["", "Errors:", *notes] if notes else []
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
def amd_smi_version(exe):
    try:
        p = subprocess.run([shutil.which(exe) or exe, "version"], capture_output=True, text=True, timeout=60)
        return cell_text(p.stdout.strip() or p.stderr.strip() or f"exit {p.returncode}")
    except (OSError, subprocess.SubprocessError) as e:
        return "not found" if isinstance(e, FileNotFoundError) else f"{e}"


def run(opts):
    bins = Path(opts.bin_dir) if opts.bin_dir else gpu_truth.default_bins()
    names = opts.only.split(",") if opts.only else list(WORKLOADS)
    if set(names) - set(WORKLOADS):
        raise SystemExit(f"amd-truth: unknown workload in {opts.only} (known: {', '.join(WORKLOADS)})")
    exes = {"gpu-tracker": find_exe(bins, "gpu-tracker"), "step": find_exe(bins, "step_in_cgroup")}
    try:
        version = subprocess.run([str(exes["gpu-tracker"]), "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        raise SystemExit(f"amd-truth: cannot run {exes['gpu-tracker']}: {e}")
    tool_version = version.stdout.strip() or version.stderr.strip()
    if version.returncode != 0:
        raise SystemExit(f"amd-truth: {exes['gpu-tracker']} does not run here: {tool_version}")
    root = opts.amd_root or "/"
    gpu = choose_gpu(list_gpus(root), opts.gpu)
    header = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(), "kernel": platform.release(), "gpu": gpu,
        "amdgpu": (read_text("/sys/module/amdgpu/version") or "").strip() or None,
        "rocm": (read_text("/opt/rocm/.info/version") or "").strip() or None,
        "amd_smi": amd_smi_version(opts.amd_smi), "tool_version": tool_version, "interval": opts.interval,
        "seconds": opts.seconds, "hold_gib": opts.hold_gib, "hold_seconds": opts.hold_seconds,
        "no_torch": opts.no_torch, "amd_root": opts.amd_root, "euid": os.geteuid(),
    }
    report = {"header": header, "workloads": names, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="amd-truth.") as tmp:
        tmp = Path(tmp)
        for name in names:
            report["runs"][name] = {}
            for tool in ("gpu-tracker", "step"):
                seconds = opts.hold_seconds if name == "hold" else opts.seconds
                print(f"amd-truth: {name} under {tool} ({seconds} s)...", file=sys.stderr, flush=True)
                time.sleep(opts.gap)
                pidfile = tmp / f"{name}.{tool}.pid"
                # amd-smi half-way through the workload (torch starts in a few seconds).
                with Reference(gpu, root, pidfile, mid=seconds / 2 + (0 if opts.no_torch else 4),
                               smi_exe=opts.amd_smi) as ref:
                    doc, result, err = run_tool(tool, opts, exes[tool], name, gpu, tmp, pidfile)
                refs = ref.figures()
                refs["torch_max_memory_reserved"] = (result or {}).get("max_memory_reserved")
                if opts.no_torch:
                    refs["torch_max_memory_reserved_why"] = "--no-torch"
                for k in ("torch", "hip"):
                    report["header"][k] = report["header"].get(k) or (result or {}).get(k)
                report["runs"][name][tool] = {"tool": tool_figures(tool, doc, gpu), "reference": refs,
                                              "result": result, "error": err, "output": doc}
    text = markdown(report)
    print(text)
    if opts.out:
        out = Path(opts.out)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(report, indent=1))


# --------------------------------------------------------------------------------------------
# `bench/amd-truth check`: the figures of a --no-torch run against tests/simamd.py's, which are
# known: a holder has 1 GiB of the GPU's VRAM and keeps it 60 % busy, its CU occupancy 60 % of
# the GPU's CUs (rounded to whole CUs).

SIM_HOLD_BYTES, SIM_BUSY = GIB, 60


def verify(report, near=10.0):
    """The problems of a --no-torch run's report (an empty list when every figure agrees)."""
    bad = []
    for name in report["workloads"]:
        for tool in ("gpu-tracker", "step"):
            run, where = report["runs"].get(name, {}).get(tool), f"{name} under {tool}"
            if run is None or run.get("error") or "error" in run["tool"]:
                bad.append(f"{where}: {run and (run.get('error') or run['tool'].get('error'))}")
                continue
            t, r = run["tool"], run["reference"]
            exact = [
                ("the command's memory", t["command_memory_bytes"], SIM_HOLD_BYTES),
                ("KFD vram of the workload", r["kfd_vram_max_bytes"], SIM_HOLD_BYTES),
                ("device memory used", t["device_memory_bytes"], r["vram_used_max_bytes"]),
                ("highest busy %", t["utilization_max_percent"], SIM_BUSY),
                ("highest gpu_busy_percent read", r["busy_max_percent"], SIM_BUSY),
                ("highest CU occupancy", t["cu_occupancy_max_percent"], r["cu_occupancy_max_percent"]),
            ]
            bad += [f"{where}: {what} is {got}, not {want}" for what, got, want in exact
                    if got is None or want is None or abs(got - want) > 1e-6 * max(1.0, abs(want))]
            # Means and energy: the references span the tool's own start and end, near only. The
            # CU count is whole CUs: near 60 %, not at it.
            near_ones = [
                ("the CU occupancy read", r["cu_occupancy_max_percent"], SIM_BUSY, 1.0),
                ("mean busy %", t["utilization_mean_percent"], r["busy_mean_percent"], near),
                ("mean CU occupancy", t["cu_occupancy_mean_percent"], r["cu_occupancy_mean_percent"], near),
                ("energy vs gpu_metrics", t["energy_joules"], r["metrics_energy_joules"], near),
                ("energy vs hwmon power", t["energy_joules"], r["power_energy_joules"], near),
            ]
            bad += [f"{where}: {what} is {got}, not within {pct:g} % of {want}" for what, got, want, pct
                    in near_ones if got is None or not want or abs(got - want) > abs(want) * pct / 100]
            if not 0.5 * SIM_BUSY <= (r["busy_mean_percent"] or 0) <= SIM_BUSY:
                bad.append(f"{where}: the mean gpu_busy_percent read is {r['busy_mean_percent']}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the workloads under both tools and print the table")
    r.add_argument("--out", help="write the table here (and the raw figures beside it, .json)")
    r.add_argument("--gpu", default="0", help="the AMD GPU: Slurm's index (PCI order, default 0), "
                   "its render node (renderD128) or its PCI address (0000:11:00.0)")
    r.add_argument("--seconds", type=float, default=17, help="length of each workload but hold")
    r.add_argument("--hold-seconds", type=float, default=10, help="how long hold keeps its memory")
    r.add_argument("--hold-gib", type=int, default=10, help="what hold allocates, GiB")
    r.add_argument("--interval", type=float, default=0.5, help="the tools' sampling interval, s")
    r.add_argument("--gap", type=float, default=2, help="idle seconds before each run")
    r.add_argument("--only", help="comma-separated workloads (default all: matmul,copy,tiny,hold)")
    r.add_argument("--amd-smi", default="amd-smi", help="the amd-smi program (default: on PATH)")
    r.add_argument("--bin-dir", help="where the binaries are (default: bin/ here, else cargo's release/)")
    r.add_argument("--no-torch", action="store_true", help="the workloads only sleep, marked for "
                   "tests/simamd.py (with --amd-root): the tools, references and table without a GPU")
    r.add_argument("--amd-root", help=argparse.SUPPRESS)
    v = sub.add_parser("verify", help="(check) a --no-torch run's JSON against the simulator's figures")
    v.add_argument("json")
    w = sub.add_parser("workload", help="(internal) one workload, run under a tool")
    w.add_argument("name", choices=WORKLOADS)
    w.add_argument("--seconds", type=float, default=17)
    w.add_argument("--hold-gib", type=int, default=10)
    w.add_argument("--no-torch", action="store_true")
    opts = ap.parse_args()
    if opts.cmd == "workload":
        return workload(opts.name, opts.seconds, opts.hold_gib, opts.no_torch)
    if opts.cmd == "verify":
        bad = verify(json.loads(Path(opts.json).read_text()))
        print("".join(f"amd-truth check: {b}\n" for b in bad), end="", file=sys.stderr)
        sys.exit(1 if bad else 0)
    run(opts)


if __name__ == "__main__":
    main()
