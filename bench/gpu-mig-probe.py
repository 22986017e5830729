#!/usr/bin/env python3
"""What a real GPU's NVML says about MIG and about shared use, read without changing anything.

Run on a machine with an NVIDIA GPU (python3 and its standard library; torch only for the
workload that gives the per-process questions something to see). It never changes a setting: it
does not enable or disable MIG, create instances or touch persistence mode. It prints, as
Markdown, each NVML call the plugin's MIG and shared-GPU paths rely on, with its return code and
what came back, and the files Slurm reads to find MIG instances (see docs/MIG.md):

    python3 gpu-mig-probe.py [--gpu 0] [--nvml libnvidia-ml.so.1] [--no-torch] [--out probe.md]

Beside --out goes the same name with `.json`: every answer, for the test NVML to be held to.
"""

import argparse
import ctypes
import glob
import json
import os
import subprocess
import sys
import time

NOT_MIG = 0xFFFFFFFF


class Probe:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.nvmlErrorString.restype = ctypes.c_char_p
        self.lib.nvmlErrorString.argtypes = [ctypes.c_int]
        self.rows = []

    def call(self, name, *args):
        """The call's return code, or None when the library lacks the symbol."""
        fn = getattr(self.lib, name, None)
        if fn is None:
            return None
        fn.restype = ctypes.c_int
        return fn(*args)

    def note(self, what, rc, value=None):
        if rc is None:
            said = "symbol absent"
        else:
            said = f"{rc} ({self.lib.nvmlErrorString(rc).decode()})"
        self.rows.append({"call": what, "rc": rc, "said": said, "value": value})
        return rc

    def text(self, name, h, size=96):
        buf = ctypes.create_string_buffer(size)
        rc = self.call(name, h, buf, ctypes.c_uint(size))
        return rc, buf.value.decode(errors="replace") if rc == 0 else None


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t, as _v3 fills it
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class ProcessUtil(ctypes.Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("timeStamp", ctypes.c_ulonglong),
        ("smUtil", ctypes.c_uint),
        ("memUtil", ctypes.c_uint),
        ("encUtil", ctypes.c_uint),
        ("decUtil", ctypes.c_uint),
    ]


class GiProfile(ctypes.Structure):  # nvmlGpuInstanceProfileInfo_t (v1)
    _fields_ = [
        ("id", ctypes.c_uint),
        ("isP2pSupported", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("copyEngineCount", ctypes.c_uint),
        ("decoderCount", ctypes.c_uint),
        ("encoderCount", ctypes.c_uint),
        ("jpegCount", ctypes.c_uint),
        ("ofaCount", ctypes.c_uint),
        ("memorySizeMB", ctypes.c_ulonglong),
    ]


class GiProfileV2(ctypes.Structure):  # nvmlGpuInstanceProfileInfo_v2_t: adds version and name
    _fields_ = [("version", ctypes.c_uint)] + GiProfile._fields_ + [("name", ctypes.c_char * 96)]


class GpmSupport(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("isSupportedDevice", ctypes.c_uint)]


def files(pattern, limit=40):
    out = {}
    for path in sorted(glob.glob(pattern, recursive=True))[:limit]:
        try:
            if os.path.isdir(path):
                out[path] = "(directory)"
            elif path.startswith("/dev/"):
                st = os.stat(path)
                out[path] = f"char {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            else:
                with open(path, errors="replace") as f:
                    out[path] = f.read(2000).strip()
        except OSError as e:
            out[path] = f"unreadable: {e.strerror}"
    return out


def shell(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return f"rc {p.returncode}\n{(p.stdout + p.stderr).strip()[:4000]}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not run: {e}"


LOAD = r"""
import sys, time, torch
x = torch.empty(1 << 28, dtype=torch.float32, device="cuda")   # 1 GiB
a = torch.randn(4096, 4096, device="cuda")
print("ready", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    a = a @ a; a = a / a.norm()
torch.cuda.synchronize()
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--nvml", default="libnvidia-ml.so.1")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()

    p = Probe(args.nvml)
    p.note("nvmlInit_v2", p.call("nvmlInit_v2"))
    rc, drv = (lambda b: (p.call("nvmlSystemGetDriverVersion", b, ctypes.c_uint(80)), b.value.decode()))(
        ctypes.create_string_buffer(80)
    )
    p.note("nvmlSystemGetDriverVersion", rc, drv)
    count = ctypes.c_uint()
    p.note("nvmlDeviceGetCount_v2", p.call("nvmlDeviceGetCount_v2", ctypes.byref(count)), count.value)
    h = ctypes.c_void_p()
    p.note(f"nvmlDeviceGetHandleByIndex_v2({args.gpu})", p.call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(args.gpu), ctypes.byref(h)))
    for name in ("nvmlDeviceGetName", "nvmlDeviceGetUUID"):
        p.note(name, *p.text(name, h))
    minor = ctypes.c_uint()
    p.note("nvmlDeviceGetMinorNumber", p.call("nvmlDeviceGetMinorNumber", h, ctypes.byref(minor)), minor.value)

    # MIG mode and the instance handles.
    cur, pend = ctypes.c_uint(99), ctypes.c_uint(99)
    p.note("nvmlDeviceGetMigMode", p.call("nvmlDeviceGetMigMode", h, ctypes.byref(cur), ctypes.byref(pend)), {"current": cur.value, "pending": pend.value})
    is_mig = ctypes.c_uint(99)
    p.note("nvmlDeviceIsMigDeviceHandle(parent)", p.call("nvmlDeviceIsMigDeviceHandle", h, ctypes.byref(is_mig)), is_mig.value)
    maxc = ctypes.c_uint(99)
    p.note("nvmlDeviceGetMaxMigDeviceCount", p.call("nvmlDeviceGetMaxMigDeviceCount", h, ctypes.byref(maxc)), maxc.value)
    migs = []
    for i in range(max(1, min(maxc.value, 8)) if maxc.value != 99 else 1):
        m = ctypes.c_void_p()
        rc = p.note(f"nvmlDeviceGetMigDeviceHandleByIndex(parent, {i})", p.call("nvmlDeviceGetMigDeviceHandleByIndex", h, ctypes.c_uint(i), ctypes.byref(m)))
        if rc == 0:
            migs.append(m)
    for name in ("nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId"):
        v = ctypes.c_uint(99)
        p.note(f"{name}(parent)", p.call(name, h, ctypes.byref(v)), v.value)
    parent = ctypes.c_void_p()
    p.note("nvmlDeviceGetDeviceHandleFromMigDeviceHandle(parent)", p.call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", h, ctypes.byref(parent)))
    for m in migs:
        for name in ("nvmlDeviceGetUUID", "nvmlDeviceGetName"):
            p.note(f"{name}(mig)", *p.text(name, m))
        for name in ("nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId"):
            v = ctypes.c_uint(99)
            p.note(f"{name}(mig)", p.call(name, m, ctypes.byref(v)), v.value)
        mem = Memory()
        p.note("nvmlDeviceGetMemoryInfo(mig)", p.call("nvmlDeviceGetMemoryInfo", m, ctypes.byref(mem)), {"total": mem.total, "used": mem.used})
        util = (ctypes.c_uint * 2)()
        p.note("nvmlDeviceGetUtilizationRates(mig)", p.call("nvmlDeviceGetUtilizationRates", m, ctypes.byref(util)), list(util))

    # The profiles the GPU could be split into: asked whether or not MIG is on.
    for pid in range(0, 16):
        info = GiProfile()
        rc = p.call("nvmlDeviceGetGpuInstanceProfileInfo", h, ctypes.c_uint(pid), ctypes.byref(info))
        v2 = GiProfileV2()
        v2.version = ctypes.sizeof(GiProfileV2) | (2 << 24)
        rc2 = p.call("nvmlDeviceGetGpuInstanceProfileInfoV", h, ctypes.c_uint(pid), ctypes.byref(v2))
        value = None
        if rc == 0:
            value = {k: getattr(info, k) for k, _ in GiProfile._fields_}
        if rc2 == 0:
            value = dict(value or {}, name=v2.name.decode(errors="replace"))
        p.note(f"nvmlDeviceGetGpuInstanceProfileInfo(profile {pid}) / V(v2) rc {rc2}", rc, value)
    gpm = GpmSupport(version=1)
    p.note("nvmlGpmQueryDeviceSupport", p.call("nvmlGpmQueryDeviceSupport", h, ctypes.byref(gpm)), gpm.isSupportedDevice)
    sample = ctypes.c_void_p()
    if p.call("nvmlGpmSampleAlloc", ctypes.byref(sample)) == 0:
        p.note("nvmlGpmMigSampleGet(parent, gi 0)", p.call("nvmlGpmMigSampleGet", h, ctypes.c_uint(0), sample))
        p.note("nvmlGpmMigSampleGet(parent, gi 1)", p.call("nvmlGpmMigSampleGet", h, ctypes.c_uint(1), sample))
        p.call("nvmlGpmSampleFree", sample)

    # Per-process figures, which a shared GPU's job is left with: with a workload running.
    child = None
    if not args.no_torch:
        env = dict(os.environ)
        uuid = p.text("nvmlDeviceGetUUID", h)[1]
        if uuid:
            env["CUDA_VISIBLE_DEVICES"] = uuid
        # Two at once, as on a shared GPU: one busy, one mostly asleep.
        child = subprocess.Popen([sys.executable, "-c", LOAD, "8"], env=env, stdout=subprocess.PIPE, text=True)
        light = subprocess.Popen([sys.executable, "-c", LOAD.replace("a = a / a.norm()", "a = a / a.norm(); time.sleep(0.05)"), "8"], env=env, stdout=subprocess.PIPE, text=True)
        child.stdout.readline()
        light.stdout.readline()
        p.rows.append({"call": "(workloads)", "rc": None, "said": "", "value": {"busy pid": child.pid, "light pid": light.pid}})
        time.sleep(3)
    n = ctypes.c_uint(0)
    rc = p.call("nvmlDeviceGetComputeRunningProcesses_v3", h, ctypes.byref(n), None)
    p.note("nvmlDeviceGetComputeRunningProcesses_v3(count only)", rc, n.value)
    procs = (ProcessInfo * 16)()
    n = ctypes.c_uint(16)
    rc = p.call("nvmlDeviceGetComputeRunningProcesses_v3", h, ctypes.byref(n), procs)
    p.note(
        "nvmlDeviceGetComputeRunningProcesses_v3",
        rc,
        [{"pid": x.pid, "usedGpuMemory": x.usedGpuMemory, "gpuInstanceId": x.gpuInstanceId, "computeInstanceId": x.computeInstanceId} for x in procs[: n.value]] if rc == 0 else None,
    )
    last = ctypes.c_ulonglong(int((time.time() - 3) * 1e6))
    n = ctypes.c_uint(0)
    rc = p.call("nvmlDeviceGetProcessUtilization", h, None, ctypes.byref(n), last)
    p.note("nvmlDeviceGetProcessUtilization(count only)", rc, n.value)
    size = max(n.value, 1) + 16
    samples = (ProcessUtil * size)()
    n = ctypes.c_uint(size)
    rc = p.call("nvmlDeviceGetProcessUtilization", h, samples, ctypes.byref(n), last)
    p.note(
        "nvmlDeviceGetProcessUtilization(last 3 s)",
        rc,
        [{"pid": s.pid, "smUtil": s.smUtil, "memUtil": s.memUtil, "timeStamp": s.timeStamp} for s in samples[: n.value]] if rc == 0 else None,
    )
    if rc == 0:
        per_pid = {}
        for s_ in samples[: n.value]:
            per_pid.setdefault(s_.pid, []).append(s_.smUtil)
        p.note("  per pid: samples, mean smUtil", 0, {str(k): [len(v), round(sum(v) / len(v), 1)] for k, v in per_pid.items()})
    acct = ctypes.c_int(99)
    p.note("nvmlDeviceGetAccountingMode", p.call("nvmlDeviceGetAccountingMode", h, ctypes.byref(acct)), acct.value)
    if child:
        child.wait()
        light.wait()
    p.note("nvmlShutdown", p.call("nvmlShutdown"))

    found = {
        "/proc/driver/nvidia/capabilities": files("/proc/driver/nvidia/capabilities/**/*"),
        "/proc/driver/nvidia-caps": files("/proc/driver/nvidia-caps/*"),
        "/dev/nvidia-caps": files("/dev/nvidia-caps/*"),
        "/dev/nvidia*": files("/dev/nvidia*"),
    }
    smi = {
        "nvidia-smi -L": shell(["nvidia-smi", "-L"]),
        "nvidia-smi --query-gpu=...mig...": shell(["nvidia-smi", "--query-gpu=index,name,mig.mode.current,mig.mode.pending,persistence_mode,compute_mode", "--format=csv"]),
        "nvidia-smi mig -lgip": shell(["nvidia-smi", "mig", "-lgip"]),
        "nvidia-smi mig -lgi": shell(["nvidia-smi", "mig", "-lgi"]),
    }

    lines = [f"# NVML on a real GPU: MIG and per-process calls (GPU {args.gpu}, driver {drv})", "", f"Run as uid {os.getuid()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "", "| call | returned | value |", "|---|---|---|"]
    for r in p.rows:
        lines.append(f"| `{r['call']}` | {r['said']} | {json.dumps(r['value']) if r['value'] is not None else ''} |")
    for title, block in (("Files", found), ("nvidia-smi", smi)):
        lines += ["", f"## {title}", ""]
        for k, v in block.items():
            lines += [f"### {k}", "", "```", json.dumps(v, indent=1) if isinstance(v, dict) else v, "```", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump({"calls": p.rows, "files": found, "nvidia_smi": smi}, f, indent=1)


if __name__ == "__main__":
    main()
