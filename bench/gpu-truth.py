#!/usr/bin/env python3
"""GPU truth: gpu-tracker's GPU figures beside references taken on the same GPU, at the same time.

Runs four PyTorch workloads on one GPU, each under `gpu-tracker -e` and under the plugin's step
tracker (`step_in_cgroup`, examples/step_in_cgroup.rs), and prints one Markdown table: each
figure of each tool beside its reference and the difference in percent. The references:

- `torch.cuda.max_memory_reserved()`, printed by the workload itself at its end;
- the GPU's memory in use, its utilization and its throttle reasons, read by this script through
  NVML (ctypes, `libnvidia-ml.so.1`) every 100 ms;
- NVML's energy counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ) before and after;
- NVML GPM's SM activity over the run, where the GPU has GPM (Hopper and later);
- `nvidia-smi --query-gpu=memory.used,utilization.gpu` once, half-way through.

Needs only python3, its standard library, torch, the driver's `libnvidia-ml.so.1` and
`nvidia-smi`: the binaries come ready-built (`bench/gpu-truth pack DIR`). See docs/GPU-TRUTH.md.

    python3 gpu-truth.py run --out truth.md            # on the GPU machine, from the packed DIR
    python3 gpu-truth.py run --no-torch --nvml FAKE    # without a GPU: parsing and table only
"""

import argparse
import ctypes
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# The line a workload prints at its end, before its JSON.
MARK = "GPU-TRUTH-RESULT "
WORKLOADS = ("matmul", "copy", "tiny", "hold")
GIB = 1 << 30
# What a --no-torch workload calls itself (bench/gpu-truth-fake.json matches it).
FAKE_LOAD = "gpu-truth-fake-load"


# --------------------------------------------------------------------------------------------
# Workloads: each runs in a child process, under one of the tools, on CUDA device 0 (the script
# sets CUDA_VISIBLE_DEVICES to the GPU's UUID, so that is the GPU NVML reads).


def workload(name, seconds, hold_gib, no_torch):
    """Runs workload `name` for about `seconds`, then prints MARK and its figures as JSON."""
    result = {"workload": name, "max_memory_reserved": None, "torch": None}
    if no_torch:
        if FAKE_LOAD not in os.environ:
            # A name of its own in /proc/<pid>/cmdline, which the tools' command lines (holding
            # the workload's) lack: the fake NVML gives memory to this process alone.
            os.environ[FAKE_LOAD] = "1"
            os.execv(sys.executable, [FAKE_LOAD, *sys.argv])
        time.sleep(seconds)
        print(MARK + json.dumps(result), flush=True)
        return
    import torch

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    iters, t0 = 0, time.monotonic()
    if name == "matmul":
        # Tensor cores busy: bf16 (fp16 before Ampere) 8192² products into a reused output.
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        n = 8192
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        c = torch.empty_like(a)
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            for _ in range(20):
                torch.mm(a, b, out=c)
            torch.cuda.synchronize()
            iters += 20
        elapsed = time.monotonic() - t0
        result.update(dtype=str(dtype), rate=2 * n**3 * iters / elapsed / 1e12, rate_unit="TFLOP/s")
    elif name == "copy":
        # Memory-bound: 2 GiB copied from one tensor into another, over and over.
        src = torch.ones(GIB // 2, device=dev, dtype=torch.float32)
        dst = torch.empty_like(src)
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            for _ in range(10):
                dst.copy_(src)
            torch.cuda.synchronize()
            iters += 10
        elapsed = time.monotonic() - t0
        # Each copy reads and writes every byte.
        result.update(rate=2 * src.numel() * 4 * iters / elapsed / 1e9, rate_unit="GB/s")
    elif name == "tiny":
        # Kernel-light: a one-element kernel and a synchronize, in a tight loop. NVML's
        # utilization (a kernel was running) calls this busy, though almost every SM is idle.
        x = torch.zeros(1, device=dev)
        torch.cuda.synchronize()
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            for _ in range(1000):
                x.add_(1)
                torch.cuda.synchronize()
            iters += 1000
        elapsed = time.monotonic() - t0
        result.update(rate=iters / elapsed, rate_unit="kernels/s")
    elif name == "hold":
        # A known allocation, written once, then held idle.
        x = torch.empty(hold_gib * GIB, device=dev, dtype=torch.uint8)
        x.zero_()
        torch.cuda.synchronize()
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        result.update(held_bytes=x.numel())
    else:
        raise SystemExit(f"unknown workload {name}")
    result.update(
        seconds=elapsed,
        iterations=iters,
        max_memory_reserved=torch.cuda.max_memory_reserved(dev),
        max_memory_allocated=torch.cuda.max_memory_allocated(dev),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        device=torch.cuda.get_device_name(dev),
    )
    print(MARK + json.dumps(result), flush=True)


# --------------------------------------------------------------------------------------------
# NVML through ctypes: the references. A function the library lacks reads as None.


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    # nvmlMemory_v2_t: `used` without the driver's reserve, as nvidia-smi and the tools read it
    # (version 1's `used` counts the reserve: about 0.47 GiB more on an H100 with driver 580).
    _fields_ = [
        ("version", ctypes.c_uint),
        ("total", ctypes.c_ulonglong),
        ("reserved", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class GpmSupport(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("isSupportedDevice", ctypes.c_uint)]


class GpmMetricInfo(ctypes.Structure):
    _fields_ = [("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]


class GpmMetric(ctypes.Structure):
    _fields_ = [
        ("metricId", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_int),
        ("value", ctypes.c_double),
        ("metricInfo", GpmMetricInfo),
    ]


class GpmMetricsGet(ctypes.Structure):
    # NVML_GPM_METRICS_GET_VERSION 1: 98 metric slots (NVML_GPM_METRIC_MAX).
    _fields_ = [
        ("version", ctypes.c_uint),
        ("numMetrics", ctypes.c_uint),
        ("sample1", ctypes.c_void_p),
        ("sample2", ctypes.c_void_p),
        ("metrics", GpmMetric * 98),
    ]


GPM_SM_UTIL, GPM_ANY_TENSOR_UTIL = 2, 5
# Clock event reasons that are no slowdown: the GPU is idle, or runs at the clocks set for it.
THROTTLE_NOT_SLOWDOWN = 0x1 | 0x2


class Nvml:
    """The few NVML calls the references need."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.nvmlErrorString.restype = ctypes.c_char_p
        rc = self.lib.nvmlInit_v2()
        if rc != 0:
            raise RuntimeError(f"nvmlInit_v2: {self.error(rc)}")

    def error(self, rc):
        return self.lib.nvmlErrorString(rc).decode(errors="replace")

    def call(self, name, *args):
        """The call's return code; None where the library has no such function."""
        fn = getattr(self.lib, name, None)
        return None if fn is None else fn(*args)

    def handle(self, index):
        h = ctypes.c_void_p()
        rc = self.call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(h))
        if rc != 0:
            raise RuntimeError(f"no NVML device {index}: {self.error(rc)}")
        return h

    def text(self, name, *args):
        buf = ctypes.create_string_buffer(256)
        rc = self.call(name, *args, buf, ctypes.c_uint(len(buf)))
        return buf.value.decode(errors="replace") if rc == 0 else None

    def utilization(self, h):
        u = Utilization()
        return u.gpu if self.call("nvmlDeviceGetUtilizationRates", h, ctypes.byref(u)) == 0 else None

    def memory_used(self, h):
        m2 = MemoryV2(version=ctypes.sizeof(MemoryV2) | (2 << 24))
        if self.call("nvmlDeviceGetMemoryInfo_v2", h, ctypes.byref(m2)) == 0:
            return m2.used
        m = Memory()
        return m.used if self.call("nvmlDeviceGetMemoryInfo", h, ctypes.byref(m)) == 0 else None

    def energy_mj(self, h):
        e = ctypes.c_ulonglong()
        return e.value if self.call("nvmlDeviceGetTotalEnergyConsumption", h, ctypes.byref(e)) == 0 else None

    def throttle(self, h):
        bits = ctypes.c_ulonglong()
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if self.call(name, h, ctypes.byref(bits)) == 0:
                return bits.value
        return None

    def gpm_sample(self, h):
        """A GPM sample taken now, or None where the device (or library) has no GPM."""
        support = GpmSupport(version=1)
        if self.call("nvmlGpmQueryDeviceSupport", h, ctypes.byref(support)) != 0 or not support.isSupportedDevice:
            return None
        s = ctypes.c_void_p()
        if self.call("nvmlGpmSampleAlloc", ctypes.byref(s)) != 0:
            return None
        if self.call("nvmlGpmSampleGet", h, s) != 0:
            self.call("nvmlGpmSampleFree", s)
            return None
        return s

    def gpm_metrics(self, s1, s2, ids, free_second=True):
        """Metric id → value between two samples (freed here, the second unless told not to);
        only those NVML answered."""
        get = GpmMetricsGet(version=1, numMetrics=len(ids), sample1=s1, sample2=s2)
        for i, m in enumerate(ids):
            get.metrics[i].metricId = m
        rc = self.call("nvmlGpmMetricsGet", ctypes.byref(get))
        out = {}
        if rc == 0:
            out = {m: get.metrics[i].value for i, m in enumerate(ids) if get.metrics[i].nvmlReturn == 0}
        self.call("nvmlGpmSampleFree", s1)
        if free_second:
            self.call("nvmlGpmSampleFree", s2)
        return out


def nvidia_smi(index):
    """(memory.used MiB, utilization.gpu %) from nvidia-smi, or an error string."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "nvidia-smi not found"
    try:
        out = subprocess.run(
            [exe, "-i", str(index), "--query-gpu=memory.used,utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
        mem, util = (float(v) for v in out.strip().splitlines()[0].split(","))
        return mem, util
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        return f"nvidia-smi: {e}"


class Reference:
    """Everything read beside one tool's run: NVML every 100 ms, energy and GPM at both ends,
    nvidia-smi once half-way through (`mid` seconds after the start)."""

    def __init__(self, nvml, handle, index, mid, gpm=True):
        self.nvml, self.h, self.index, self.mid, self.use_gpm = nvml, handle, index, mid, gpm
        self.util, self.mem, self.throttle = [], [], []
        # SM activity of each second, with the seconds it spans: the time-weighted reference.
        self.sm_seconds = []
        self.smi = "not run"
        self.stop_event = threading.Event()

    def __enter__(self):
        self.t0 = time.monotonic()
        self.energy0 = self.nvml.energy_mj(self.h)
        self.gpm0 = self.nvml.gpm_sample(self.h) if self.use_gpm else None
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        self.smi_timer = threading.Timer(self.mid, self.take_smi)
        self.smi_timer.start()
        return self

    def take_smi(self):
        self.smi = nvidia_smi(self.index)

    def sample(self):
        last = (time.monotonic(), self.nvml.gpm_sample(self.h)) if self.use_gpm else None
        n = 0
        while not self.stop_event.wait(0.1):
            n += 1
            if last and last[1] and n % 10 == 0:
                now = (time.monotonic(), self.nvml.gpm_sample(self.h))
                if now[1]:
                    m = self.nvml.gpm_metrics(last[1], now[1], [GPM_SM_UTIL], free_second=False)
                    if GPM_SM_UTIL in m:
                        self.sm_seconds.append((m[GPM_SM_UTIL], now[0] - last[0]))
                    last = now
            for values, read in ((self.util, self.nvml.utilization), (self.mem, self.nvml.memory_used),
                                 (self.throttle, self.nvml.throttle)):
                v = read(self.h)
                if v is not None:
                    values.append(v)
        if last and last[1]:
            self.nvml.call("nvmlGpmSampleFree", last[1])

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join()
        self.smi_timer.cancel()
        self.seconds = time.monotonic() - self.t0
        energy1 = self.nvml.energy_mj(self.h)
        gpm1 = self.nvml.gpm_sample(self.h) if self.gpm0 else None
        self.gpm = {}
        if self.gpm0 and gpm1:
            self.gpm = self.nvml.gpm_metrics(self.gpm0, gpm1, [GPM_SM_UTIL, GPM_ANY_TENSOR_UTIL])
        self.energy_j = (energy1 - self.energy0) / 1000 if None not in (self.energy0, energy1) else None

    def figures(self):
        mean = lambda v: sum(v) / len(v) if v else None  # noqa: E731
        smi = self.smi if isinstance(self.smi, tuple) else (None, None)
        slowed = [b for b in self.throttle if b & ~THROTTLE_NOT_SLOWDOWN]
        return {
            "seconds": self.seconds,
            "samples": len(self.util),
            "utilization_mean_percent": mean(self.util),
            "memory_used_max_bytes": max(self.mem) if self.mem else None,
            "energy_joules": self.energy_j,
            "sm_active_percent": self.gpm.get(GPM_SM_UTIL),
            "sm_active_1s_mean_percent": (
                sum(v * w for v, w in self.sm_seconds) / sum(w for _, w in self.sm_seconds) if self.sm_seconds else None
            ),
            "tensor_active_percent": self.gpm.get(GPM_ANY_TENSOR_UTIL),
            "throttled_percent": 100 * len(slowed) / len(self.throttle) if self.throttle else None,
            "throttle_reasons_seen": hex(_or_all(self.throttle)) if self.throttle else None,
            "smi_memory_used_bytes": smi[0] * (1 << 20) if smi[0] is not None else None,
            "smi_utilization_percent": smi[1],
            "smi_error": None if isinstance(self.smi, tuple) else self.smi,
        }


def _or_all(bits):
    out = 0
    for b in bits:
        out |= b
    return out


# --------------------------------------------------------------------------------------------
# The tools, and their figures read defensively: builds differ in what they record.


def dig(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def first_number(g, paths):
    """The first of `paths` (key tuples) that leads to a number in `g`."""
    for p in paths:
        v = dig(g, *p)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


SM_PATHS = [("sm_active_percent", "mean"), ("sm_active_percent",), ("mean_sm_active_percent",),
            ("sm_activity_percent", "mean"), ("sm_active", "mean_percent")]
THROTTLE_PATHS = [("throttled_percent",), ("throttle_percent",), ("throttle", "percent"),
                  ("throttle", "throttled_percent"), ("clock_events", "throttled_percent")]
ENERGY_PATHS = [("energy_joules",), ("energy", "joules")]


def tool_figures(tool, doc, uuid):
    """The figures of the GPU `uuid` in a tool's JSON (None for what this build lacks)."""
    g = next((g for g in (doc or {}).get("gpus", []) if g.get("uuid") == uuid), None)
    if g is None:
        return {"error": "the GPU is not in the tool's output"}
    if tool == "gpu-tracker":
        scale = 1.0 if g.get("unit", "bytes") == "bytes" else None
        proc, dev = first_number(g, [("max_tracked",)]), first_number(g, [("max_used",)])
        if scale is None:
            proc = dev = None
    else:
        proc = first_number(g, [("peak_step_memory_bytes",)])
        dev = first_number(g, [("peak_device_memory_bytes",)])
    return {
        "command_memory_bytes": proc,
        "device_memory_bytes": dev,
        "utilization_mean_percent": first_number(g, [("mean_utilization_percent",)]),
        "energy_joules": first_number(g, ENERGY_PATHS),
        "sm_active_percent": first_number(g, SM_PATHS),
        "throttled_percent": slowed_percent(doc, g),
    }


SLOWDOWN_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown",
                    "hw_thermal_slowdown", "hw_power_brake_slowdown")
TIME_UNITS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}


def slowed_percent(doc, g):
    """Share of the run the GPU was slowed down (power cap, thermal, ...), percent: the longest
    time in one slowdown reason (reasons overlap) over the run's elapsed time."""
    secs = g.get("throttle_seconds")
    if not isinstance(secs, dict):
        return first_number(g, THROTTLE_PATHS)
    elapsed = first_number(doc, [("step", "elapsed_seconds")])
    if elapsed is None:
        ct = doc.get("compute_time") or {}
        t = ct.get("time")
        if isinstance(t, (int, float)):
            elapsed = t * TIME_UNITS.get(ct.get("unit"), 1)
    if not elapsed:
        return None
    slow = [v for k, v in secs.items() if k in SLOWDOWN_REASONS and isinstance(v, (int, float))]
    return 100.0 * max(slow, default=0.0) / elapsed


def workload_result(stdout):
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    return None


def run_tool(tool, opts, exe, name, gpu, tmp):
    """Runs workload `name` under `tool` (the program `exe`): (tool JSON, workload result,
    error or None)."""
    wl = [sys.executable, str(Path(__file__).resolve()), "workload", name,
          "--seconds", str(opts.hold_seconds if name == "hold" else opts.seconds),
          "--hold-gib", str(opts.hold_gib)] + (["--no-torch"] if opts.no_torch else [])
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu["uuid"])
    if tool == "gpu-tracker":
        out = tmp / f"{name}.gpu-tracker.json"
        cmd = [str(exe), "-e", shlex.join(wl), "-f", "json", "-o", str(out),
               "--st", str(opts.interval), "--ru", "bytes", "--gru", "bytes", "--tu", "seconds",
               "--guuids", gpu["uuid"], "--nvml-lib", opts.nvml]
    else:
        cmd = [str(exe), "--interval", str(opts.interval), "--spool", str(tmp / "spool"),
               "--gpus", str(gpu["index"]), "--nvml", opts.nvml, "--"] + wl
    limit = (opts.hold_seconds if name == "hold" else opts.seconds) + 180
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit)
    except (OSError, subprocess.SubprocessError) as e:
        return None, None, f"{tool}: {e}"
    sys.stderr.write(p.stderr)
    result = workload_result(p.stdout)
    err = None if p.returncode == 0 else f"{tool} exited with {p.returncode}: {p.stderr.strip()[-300:]}"
    try:
        if tool == "gpu-tracker":
            doc = json.loads(out.read_text())
        else:
            doc = json.loads(Path(p.stdout.strip().splitlines()[-1]).read_text())
    except (OSError, ValueError, IndexError) as e:
        return None, result, err or f"{tool}: no JSON: {e}"
    return doc, result, err


# --------------------------------------------------------------------------------------------
# The table.

NA = "n/a (not in this build)"
# (label, tool key, reference key, unit scale, unit name).
ROWS = [
    ("command's GPU memory, peak ¹", "command_memory_bytes", "torch_max_memory_reserved", GIB, "GiB"),
    ("device memory used, peak", "device_memory_bytes", "memory_used_max_bytes", GIB, "GiB"),
    ("device memory used, peak vs nvidia-smi mid-run", "device_memory_bytes", "smi_memory_used_bytes", GIB, "GiB"),
    ("GPU utilization, mean (NVML every 100 ms)", "utilization_mean_percent", "utilization_mean_percent", 1, "%"),
    ("GPU utilization, mean vs nvidia-smi mid-run", "utilization_mean_percent", "smi_utilization_percent", 1, "%"),
    ("energy (NVML counter)", "energy_joules", "energy_joules", 1, "J"),
    ("SM active, mean (GPM each second, time-weighted)", "sm_active_percent", "sm_active_1s_mean_percent", 1, "%"),
    ("SM active, mean vs one GPM window over the run ³", "sm_active_percent", "sm_active_percent", 1, "%"),
    ("throttled samples ²", "throttled_percent", "throttled_percent", 1, "%"),
]


def fmt(v, scale, unit):
    if v is None:
        return None
    return f"{v / scale:.2f} {unit}" if unit == "GiB" else f"{v / scale:.1f} {unit}"


def cells(run, tool_key, ref_key, scale, unit):
    """(tool value, reference, difference) cells of one tool's run."""
    if run is None:
        return "not run", "", ""
    figs = run["tool"]
    if "error" in figs:
        return f"n/a ({figs['error']})", "", ""
    tv, rv = figs.get(tool_key), run["reference"].get(ref_key)
    t = fmt(tv, scale, unit) or NA
    r = fmt(rv, scale, unit) or "n/a"
    # `+ 0.0` turns a -0.0 into 0.0.
    d = f"{round(100 * (tv - rv) / rv, 1) + 0.0:+.1f} %" if tv is not None and rv else ""
    return t, r, d


def table(report):
    lines = [
        "| workload | figure | gpu-tracker -e | reference | diff | step tracker | reference | diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in report["workloads"]:
        runs = report["runs"].get(name, {})
        for label, tk, rk, scale, unit in ROWS:
            a = cells(runs.get("gpu-tracker"), tk, rk, scale, unit)
            b = cells(runs.get("step"), tk, rk, scale, unit)
            lines.append(f"| {name} | {label} | " + " | ".join(a + b) + " |")
    return "\n".join(lines)


def markdown(report):
    h = report["header"]
    out = [
        f"# GPU truth, {h['date']}",
        "",
        f"- GPU {h['gpu_index']}: {h['gpu_name']} ({h['gpu_uuid']}), driver {h['driver']}, host {h['host']}",
        f"- torch {h.get('torch') or 'not used'}, CUDA {h.get('cuda') or '-'}; "
        f"{h['tool_version']}; sampling every {h['interval']} s",
        f"- workloads: {h['seconds']} s each ({h['hold_gib']} GiB held {h['hold_seconds']} s for `hold`)"
        + ("; **--no-torch: no GPU work was done, only the tools and the table were exercised**"
           if h["no_torch"] else ""),
        "",
        table(report),
        "",
        "¹ reference: `torch.cuda.max_memory_reserved()`; NVML's per-process figure the tools report "
        "also counts the CUDA context (some hundreds of MiB).",
        "² share of 100-ms samples whose clock event reasons include a slowdown (anything but idle "
        "and application clocks); reasons seen per run in the JSON beside this file.",
        "³ one GPM sample at the run's start and one at its end. The tools weigh each reading by the "
        "seconds it spans, as the row above does; a single long window need not (GPM counts cycles).",
    ]
    rates = [
        f"{n} {r['result']['rate']:.1f} {r['result']['rate_unit']}"
        for n, runs in report["runs"].items()
        for t, r in runs.items()
        if t == "step" and r and r.get("result") and r["result"].get("rate") is not None
    ]
    if rates:
        out += ["", "Workload rates (under the step tracker): " + "; ".join(rates) + "."]
    notes = [f"- {n} under {t}: {r['error']}" for n, runs in report["runs"].items()
             for t, r in runs.items() if r and r.get("error")]
    if notes:
        out += ["", "Errors:", *notes]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------


def default_bins():
    here = Path(__file__).resolve().parent
    if (here / "bin").is_dir():
        return here / "bin"
    target = Path(os.environ.get("CARGO_TARGET_DIR", here.parent / "target"))
    return target / "release"


def find_exe(bins, name):
    """`bins/name`, or `bins/examples/name` in a cargo target (where examples are built)."""
    for p in (bins / name, bins / "examples" / name):
        if p.exists():
            return p
    return bins / name


def run(opts):
    bins = Path(opts.bin_dir) if opts.bin_dir else default_bins()
    names = opts.only.split(",") if opts.only else list(WORKLOADS)
    for n in names:
        if n not in WORKLOADS:
            raise SystemExit(f"gpu-truth: unknown workload {n} (known: {', '.join(WORKLOADS)})")
    exes = {"gpu-tracker": find_exe(bins, "gpu-tracker"), "step": find_exe(bins, "step_in_cgroup")}
    try:
        version = subprocess.run([str(exes["gpu-tracker"]), "--version"], capture_output=True,
                                 text=True, timeout=30)
        tool_version = version.stdout.strip() or version.stderr.strip()
    except OSError as e:
        raise SystemExit(f"gpu-truth: cannot run {exes['gpu-tracker']}: {e}")
    if version.returncode != 0:
        raise SystemExit(f"gpu-truth: {exes['gpu-tracker']} does not run here: {tool_version}")
    try:
        nvml = Nvml(opts.nvml)
        h = nvml.handle(opts.gpu)
    except (OSError, RuntimeError) as e:
        raise SystemExit(f"gpu-truth: NVML ({opts.nvml}): {e}")
    gpu = {"index": opts.gpu, "uuid": nvml.text("nvmlDeviceGetUUID", h), "name": nvml.text("nvmlDeviceGetName", h)}
    report = {
        "header": {
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "host": platform.node(), "gpu_index": opts.gpu, "gpu_name": gpu["name"], "gpu_uuid": gpu["uuid"],
            "driver": nvml.text("nvmlSystemGetDriverVersion"), "tool_version": tool_version,
            "interval": opts.interval, "seconds": opts.seconds, "hold_gib": opts.hold_gib,
            "hold_seconds": opts.hold_seconds, "no_torch": opts.no_torch, "euid": os.geteuid(),
        },
        "workloads": names,
        "runs": {},
    }
    with tempfile.TemporaryDirectory(prefix="gpu-truth.") as tmp:
        tmp = Path(tmp)
        for name in names:
            report["runs"][name] = {}
            for tool in ("gpu-tracker", "step"):
                seconds = opts.hold_seconds if name == "hold" else opts.seconds
                print(f"gpu-truth: {name} under {tool} ({seconds} s)...", file=sys.stderr, flush=True)
                time.sleep(opts.gap)
                # nvidia-smi half-way through the workload (torch starts in a few seconds).
                with Reference(nvml, h, opts.gpu, mid=seconds / 2 + (0 if opts.no_torch else 4),
                               gpm=not opts.no_gpm) as ref:
                    doc, result, err = run_tool(tool, opts, exes[tool], name, gpu, tmp)
                refs = ref.figures()
                if result is not None:
                    refs["torch_max_memory_reserved"] = result.get("max_memory_reserved")
                    for k in ("torch", "cuda"):
                        report["header"][k] = report["header"].get(k) or result.get(k)
                report["runs"][name][tool] = {
                    "tool": tool_figures(tool, doc, gpu["uuid"]), "reference": refs, "result": result,
                    "error": err, "output": doc,
                }
    text = markdown(report)
    print(text)
    if opts.out:
        out = Path(opts.out)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(report, indent=1))
        print(f"gpu-truth: wrote {out} and {out.with_suffix('.json')}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the workloads under both tools and print the table")
    r.add_argument("--out", help="write the table here (and the raw figures beside it, .json)")
    r.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU (default 0)")
    r.add_argument("--seconds", type=float, default=17, help="length of each workload but hold")
    r.add_argument("--hold-seconds", type=float, default=10, help="how long hold keeps its memory")
    r.add_argument("--hold-gib", type=int, default=10, help="what hold allocates, GiB")
    r.add_argument("--interval", type=float, default=0.5, help="the tools' sampling interval, s")
    r.add_argument("--gap", type=float, default=2, help="idle seconds before each run")
    r.add_argument("--only", help="comma-separated workloads (default all: matmul,copy,tiny,hold)")
    r.add_argument("--nvml", default="libnvidia-ml.so.1", help="the NVML library (references and tools)")
    r.add_argument("--no-gpm", action="store_true", help="skip the GPM reference (SM activity)")
    r.add_argument("--bin-dir", help="where gpu-tracker and step_in_cgroup are (default: bin/ beside "
                   "this script, else the cargo target's release/)")
    r.add_argument("--no-torch", action="store_true", help="the workloads only sleep: checks the tools, "
                   "the references' reading and the table without a GPU (with a fake NVML)")
    w = sub.add_parser("workload", help="(internal) one workload, run under a tool")
    w.add_argument("name", choices=WORKLOADS)
    w.add_argument("--seconds", type=float, default=17)
    w.add_argument("--hold-gib", type=int, default=10)
    w.add_argument("--no-torch", action="store_true")
    opts = ap.parse_args()
    if opts.cmd == "workload":
        workload(opts.name, opts.seconds, opts.hold_gib, opts.no_torch)
    else:
        run(opts)


if __name__ == "__main__":
    main()
