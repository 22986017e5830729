#!/usr/bin/env python3
"""gpu-tracker (this project) against the Python gpu_tracker 5.0.1, measured in one run.

Run through bench/run, which builds what it needs and the virtualenv. Figures:

1. Tracker CPU per minute of tracking, at --st 0.1 and 1.0, for `sleep D`, 100 and 1000
   sleeping processes: CPU seconds of the tracker and everything it waited for (os.wait4 on
   it), minus the workload's own CPU measured alone the same way; with the samples each took
   (rows of its tracking file), against the D / st it was asked for.
2. Wall time added to `true` and `sleep 1` (default --st 1.0): tracked minus bare, medians.
3. Peak accuracy: a program that holds 200 MB for 20, 50 or 200 ms, at --st 1.0; the error of
   each tool's main peak against the kernel's (ru_maxrss of the program run alone).
4. Cost of one sample at 1, 100, 1000 and 5000 processes: tracker CPU over samples, end to
   end; and `cargo bench --bench sample_cost` for both of this project's samplers.
5. The plugin on the local cluster (slurm/local-cluster.sh up), when it is up: time added to
   `srun true` by --gpu-track; slurmstepd's CPU and peak memory per step-minute for a step of
   100 tasks: untracked, with --gpu-track, and with Slurm's jobacct_gather/cgroup polling at
   1 s (the first two poll at Slurm's default, which it will not let a step lengthen).

Prints a Markdown table of medians and ratios and writes everything, runs included, as JSON.
No figure is a pass or a fail: a measurement that could not be made says so.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS = os.path.join(ROOT, "target/release/gpu-tracker")
HOG = os.path.join(ROOT, "target/test-support/release/gpu-tracker-test-hog")
CLUSTER = "/var/tmp/gpu-tracker-cluster"


def run_cost(cmd, timeout=None):
    """CPU seconds of `cmd` and what it waited for, and its wall seconds."""
    t = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = None if timeout is None else t + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            return ru.ru_utime + ru.ru_stime, time.monotonic() - t, status == 0
        if deadline and time.monotonic() > deadline:
            p.kill()
            _, _, ru = os.wait4(p.pid, 0)
            return ru.ru_utime + ru.ru_stime, time.monotonic() - t, False
        time.sleep(0.02)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def workload(n, seconds):
    """A command both tools run: one `sleep`, or a script starting `n` of them (gpu_tracker
    splits its command into words; it runs no shell)."""
    if n <= 1:
        return f"sleep {seconds}"
    script = os.path.join(tempfile.gettempdir(), "gpu-tracker-bench-sleepers.sh")
    with open(script, "w") as f:
        f.write('for i in $(seq "$1"); do sleep "$2" & done; wait\n')
    return f"bash {script} {n} {seconds}"


def rows_of(csv_path):
    """Samples in a tracking file: its rows after the header and static rows."""
    try:
        with open(csv_path) as f:
            lines = [line for line in f if line.strip()]
    except OSError:
        return None
    # Both write the static data first (a header and one row), then a header and one row per
    # sample; the sample header is the second line that starts with a letter.
    headers = [i for i, line in enumerate(lines) if line[0].isalpha()]
    return len(lines) - headers[-1] - 1 if headers else None


def tracker_cpu(tool, n, seconds, st, runs, tmp):
    """Tracker CPU (workload subtracted), samples, for `runs` runs."""
    work = workload(n, seconds)
    bare = med([run_cost(work.split())[0] for _ in range(runs)])
    out = []
    for i in range(runs):
        tf = os.path.join(tmp, f"tf-{os.path.basename(tool)}-{n}-{st}-{i}.csv")
        cmd = [tool, "-e", work, "--st", str(st), "--tf", tf, "--disable-logs", "-o", os.devnull]
        cpu, wall, ok = run_cost(cmd, timeout=3 * seconds + 60)
        out.append(
            {"cpu": cpu - bare, "wall": wall, "samples": rows_of(tf), "completed": ok}
        )
        try:
            os.remove(tf)
        except OSError:
            pass
    return bare, out


def peak_runs(tool, hold, runs, tmp):
    errs = []
    for i in range(runs):
        o = os.path.join(tmp, f"peak-{i}.json")
        cmd = [tool, "-e", f"{HOG} --mb 200 --hold-ms {hold}", "--st", "1.0", "--ru",
               "megabytes", "-f", "json", "-o", o, "--disable-logs"]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        try:
            with open(o) as f:
                errs.append(json.load(f)["max_ram"]["main"]["total_rss"] * 1e6)
        except (OSError, ValueError, KeyError):
            errs.append(None)
    return errs


def true_peak(hold):
    p = subprocess.Popen([HOG, "--mb", "200", "--hold-ms", str(hold)])
    _, _, ru = os.wait4(p.pid, 0)
    return ru.ru_maxrss * 1024


def sample_cost_bench(procs, samples):
    out = os.path.join(tempfile.mkdtemp(), "sample_cost.json")
    r = subprocess.run(
        ["cargo", "bench", "-q", "--bench", "sample_cost", "--", "--procs", procs,
         "--samples", str(samples), "--out", out],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    if r.returncode != 0:
        return {"error": r.stderr[-2000:]}
    with open(out) as f:
        return json.load(f)


# --- the plugin on the local cluster -------------------------------------------------------

def cluster_env():
    env = dict(os.environ, SLURM_CONF=f"{CLUSTER}/slurm.conf")
    return env


def as_user(args, **kw):
    return subprocess.run(["runuser", "-u", "gtuser", "--", "env",
                           f"SLURM_CONF={CLUSTER}/slurm.conf"] + args,
                          cwd=f"{CLUSTER}/jobs/gtuser", capture_output=True, text=True,
                          check=False, **kw)


def cluster_up():
    if not os.path.exists(f"{CLUSTER}/slurm.conf") or os.geteuid() != 0:
        return False
    r = subprocess.run(["scontrol", "ping"], env=cluster_env(), capture_output=True, text=True,
                       check=False)
    return r.returncode == 0 and "UP" in r.stdout


def stepd_figures(opts, seconds):
    """slurmstepd's CPU seconds and peak memory (kB) for a 100-task step of `seconds`."""
    p = subprocess.Popen(
        ["runuser", "-u", "gtuser", "--", "env", f"SLURM_CONF={CLUSTER}/slurm.conf", "srun",
         "-n", "100", "--overcommit", "--mem=0"] + opts + ["sleep", str(seconds)],
        cwd=f"{CLUSTER}/jobs/gtuser", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    pid, last, job = None, None, None
    tps = os.sysconf("SC_CLK_TCK")
    while p.poll() is None:
        if pid is None:
            q = subprocess.run(["squeue", "-h", "-u", "gtuser", "-t", "R", "-o", "%A"],
                               env=cluster_env(), capture_output=True, text=True, check=False)
            jobs = sorted(int(j) for j in q.stdout.split() if j.isdigit())
            if jobs:
                job = jobs[-1]
                g = subprocess.run(["pgrep", "-f", f"^slurmstepd: \\[{job}\\.0\\]"],
                                   capture_output=True, text=True, check=False)
                pid = (g.stdout.split() or [None])[0]
        if pid:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/status") as f:
                    hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
                last = ((int(fields[11]) + int(fields[12])) / tps, hwm)
            except (OSError, StopIteration, IndexError):
                pass
        time.sleep(0.5)
    err = p.stderr.read()
    return {"job": job, "cpu_seconds": last[0] if last else None,
            "hwm_kb": last[1] if last else None, "srun_ok": p.returncode == 0,
            "stderr_tail": err[-300:]}


def plugin_figures(quick, runs):
    if not cluster_up():
        return {"skipped": "no local cluster up (slurm/local-cluster.sh up, as root)"}
    n = 3 if quick else 20
    plain, tracked = [], []
    as_user(["srun", "true"])
    for _ in range(n):
        t0 = time.monotonic()
        as_user(["srun", "true"])
        t1 = time.monotonic()
        as_user(["srun", "--gpu-track", "true"])
        t2 = time.monotonic()
        plain.append(t1 - t0)
        tracked.append(t2 - t1)
    seconds = 5 if quick else 60
    runs = 1 if quick else runs
    settings = {
        # Slurm refuses to poll less often than its JobAcctGatherFrequency (30 s by default)
        # where it enforces memory limits: the baseline polls at that.
        "untracked, Slurm's accounting at its default": [],
        "--gpu-track (1 s), Slurm's accounting at its default": ["--gpu-track=1"],
        "jobacct_gather/cgroup at 1 s, untracked": ["--acctg-freq=task=1"],
    }
    steps = {name: [stepd_figures(o, seconds) for _ in range(runs)]
             for name, o in settings.items()}
    return {"srun_true_plain_s": plain, "srun_true_tracked_s": tracked,
            "step_seconds": seconds, "steps": steps}


# --- the run --------------------------------------------------------------------------------

def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "")
    except OSError:
        pass
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    return {"cpu": model, "cores": os.cpu_count(), "kernel": platform.release(),
            "memory_gb": round(mem_kb / 1e6, 1)}


def versions(theirs):
    v = {"python": platform.python_version()}
    for name, cmd in [("ours", [OURS, "--version"]),
                      ("gpu_tracker", [os.path.join(os.path.dirname(theirs), "pip"), "show",
                                       "gpu-tracker"]),
                      ("slurm", ["sinfo", "-V"])]:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
            line = next((x for x in out.splitlines() if x.startswith("Version:")), out.strip())
            v[name] = line.replace("Version:", "").strip()
        except OSError:
            v[name] = None
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--theirs", required=True, help="gpu_tracker's gpu-tracker command")
    ap.add_argument("--quick", action="store_true", help="short runs: proves it works")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/latest.json"))
    ap.add_argument("--runs", type=int, default=3,
                    help="runs of each tracker-CPU and plugin figure (full mode)")
    a = ap.parse_args()
    q = a.quick
    tools = {"ours": OURS, "gpu_tracker": a.theirs}
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "mode": "quick" if q else "full", "machine": machine(),
           "versions": versions(a.theirs)}
    tmp = tempfile.mkdtemp(prefix="gpu-tracker-bench-")
    seconds, runs = (3, 1) if q else (20, a.runs)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    # 1 and 4: CPU per minute and per sample.
    cpu = {}
    for st in (0.1, 1.0):
        for n in (1, 100, 1000) + ((5000,) if st == 0.1 and not q else ()):
            key = f"{n} processes, --st {st}"
            log(f"tracker CPU: {key}")
            cpu[key] = {"processes": n, "st": st, "seconds": seconds}
            for name, tool in tools.items():
                bare, r = tracker_cpu(tool, n, seconds, st, runs if n < 5000 else 1, tmp)
                cpu[key]["workload_cpu"] = bare
                cpu[key][name] = r
    res["tracker_cpu"] = cpu
    # 2: wall time added.
    added = {}
    for work in ("true", "sleep 1"):
        log(f"wall added: {work}")
        rr = {"bare": [], "ours": [], "gpu_tracker": []}
        for _ in range(3 if q else 10):
            rr["bare"].append(run_cost(work.split())[1])
            for name, tool in tools.items():
                rr[name].append(run_cost([tool, "-e", work, "--disable-logs", "-o",
                                          os.devnull])[1])
        added[work] = rr
    res["wall_added"] = added
    # 3: peak accuracy.
    peaks = {}
    for hold in (20, 50, 200):
        log(f"peak accuracy: {hold} ms")
        truth = true_peak(hold)
        peaks[hold] = {"true_bytes": truth}
        for name, tool in tools.items():
            peaks[hold][name] = [None if p is None else p - truth
                                 for p in peak_runs(tool, hold, 2 if q else 10, tmp)]
    res["peak_error_bytes"] = peaks
    log("sample cost: cargo bench --bench sample_cost")
    res["sample_cost_bench"] = sample_cost_bench("1,100,1000" if q else "1,100,1000,5000",
                                                 5 if q else 30)
    log("the plugin on the local cluster")
    res["plugin"] = plugin_figures(q, a.runs)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(table(res))
    print(f"\nwritten to {a.out}")
    return 0


def fmt(x, nd=3):
    return "n/a" if x is None else f"{x:.{nd}g}"


def table(res):
    out = [f"Measured {res['date']}, {res['mode']} mode, on {res['machine']['cores']} cores "
           f"({res['machine']['cpu']}), kernel {res['machine']['kernel']}; ours "
           f"{res['versions'].get('ours')}, gpu_tracker {res['versions'].get('gpu_tracker')}.",
           "", "| tracked workload | ours CPU s/min | gpu_tracker CPU s/min | ratio | "
           "samples ours / theirs / asked | per sample, ours / theirs |",
           "|---|---|---|---|---|---|"]
    for key, c in res["tracker_cpu"].items():
        per_min = {}
        samples = {}
        for name in ("ours", "gpu_tracker"):
            r = c[name]
            per_min[name] = med([x["cpu"] * 60 / c["seconds"] for x in r])
            samples[name] = med([x["samples"] for x in r])
        ratio = (per_min["gpu_tracker"] / per_min["ours"]
                 if per_min["ours"] and per_min["ours"] > 0 and per_min["gpu_tracker"] else None)
        per_sample = []
        for name in ("ours", "gpu_tracker"):
            s = samples[name]
            per_sample.append(fmt(per_min[name] * c["seconds"] / 60 / s * 1e3) + " ms"
                              if s and per_min[name] is not None else "n/a")
        out.append(f"| {key} | {fmt(per_min['ours'])} | {fmt(per_min['gpu_tracker'])} | "
                   f"{fmt(ratio, 2)}x | {fmt(samples['ours'], 4)} / "
                   f"{fmt(samples['gpu_tracker'], 4)} / {c['seconds'] / c['st']:.0f} | "
                   f"{' / '.join(per_sample)} |")
    out += ["", "| wall time added to | ours | gpu_tracker |", "|---|---|---|"]
    for work, rr in res["wall_added"].items():
        b = med(rr["bare"])
        out.append(f"| `{work}` | {fmt(med(rr['ours']) - b)} s | "
                   f"{fmt(med(rr['gpu_tracker']) - b)} s |")
    out += ["", "| 200 MB held for | true peak | ours: median error (min, max) | "
            "gpu_tracker: median error (min, max) |", "|---|---|---|---|"]
    for hold, p in res["peak_error_bytes"].items():
        cells = []
        for name in ("ours", "gpu_tracker"):
            e = [x / 1e6 for x in p[name] if x is not None]
            cells.append(f"{fmt(med(e))} MB ({fmt(min(e) if e else None)}, "
                         f"{fmt(max(e) if e else None)})")
        out.append(f"| {hold} ms | {p['true_bytes'] / 1e6:.0f} MB | {cells[0]} | {cells[1]} |")
    sc = res["sample_cost_bench"]
    if isinstance(sc, list):
        out += ["", "| processes | sampler | one sample, µs (median) | µs per process |",
                "|---|---|---|---|"]
        for r in sc:
            if "procs" not in r:
                continue  # a row of its own kind (the pressure files), below
            out.append(f"| {r['procs']} | {r['sampler']} | {r['median_cpu_us']:.0f} | "
                       f"{r['per_process_us']:.2f} |")
        for r in sc:
            if r.get("sampler") == "pressure":
                out += ["", f"The step's {r['files']} pressure stall files, read once: "
                        f"{r['median_us']:.0f} µs wall, {r['median_cpu_us']:.0f} µs CPU (medians)."]
    pl = res["plugin"]
    if "skipped" in pl:
        out += ["", f"Plugin: not measured ({pl['skipped']})."]
    else:
        p0, p1 = med(pl["srun_true_plain_s"]), med(pl["srun_true_tracked_s"])
        out += ["", f"`srun true`: {p0 * 1e3:.0f} ms untracked, {p1 * 1e3:.0f} ms with "
                f"--gpu-track (added {(p1 - p0) * 1e3:.0f} ms, medians).", "",
                f"| 100-task step of {pl['step_seconds']} s | slurmstepd CPU s per step-minute "
                "| slurmstepd peak memory |", "|---|---|---|"]
        for name, runs in pl["steps"].items():
            c = med([r["cpu_seconds"] for r in runs])
            m = med([r["hwm_kb"] for r in runs])
            cpm = None if c is None else c * 60 / pl["step_seconds"]
            out.append(f"| {name} | {fmt(cpm)} | {fmt(m and m / 1024)} MiB |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
