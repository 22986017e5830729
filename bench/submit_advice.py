#!/usr/bin/env python3
"""What the advice at submission (slurm/cli_filter.lua) adds to `sbatch` on the local cluster:
N rounds, each submitting one held job (`--hold`: nothing runs, every job is cancelled at the
end) as the test user in four ways, in turn, the first round not counted:

  off        the cluster's slurm.conf without CliFilterPlugins (no filter at all);
  untracked  the filter, a job without --gpu-track (gpu-tracker-report decides: no note);
  silenced   the filter, --gpu-track, GPU_TRACKER_ADVICE=off;
  note       the filter, --gpu-track, a name with finished jobs in the history: the note is
             made from the user's cache (fresh: Slurm's database is not asked);
  asking     the same with the user's cache removed first: Slurm's database is asked (sacct,
             in a process of its own, waited for up to advise.wait_seconds), as the first
             submission of a day does.

Medians and the time each adds to `off` are printed. Needs root and the local cluster with
accounting (slurm/local-cluster.sh up --accounting), and a history for the name (the first
rounds make one: three short jobs of the name are run first and waited for).

Usage: bench/submit_advice.py [N]   (default 30)
"""
import glob
import os
import pwd
import statistics
import subprocess
import sys
import time

CLUSTER = os.environ.get("GPU_TRACKER_CLUSTER_DIR", "/var/tmp/gpu-tracker-cluster")
NAME = "bench-advice"


def sbatch(conf, args, env=()):
    return subprocess.run(["runuser", "-u", "gtuser", "--", "env", f"SLURM_CONF={conf}", *env,
                           "sbatch", "--parsable", "-o", "/dev/null", *args],
                          cwd=f"{CLUSTER}/jobs/gtuser", capture_output=True, text=True,
                          check=False)


def job_id(r):
    if r.returncode != 0:
        raise SystemExit(f"submit_advice: sbatch failed: {r.stderr[-300:]}")
    return r.stdout.strip().split(";")[0]


def state(job):
    r = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                       text=True, env={**os.environ, "SLURM_CONF": f"{CLUSTER}/slurm.conf"},
                       check=False)
    return r.stdout.strip()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    conf = f"{CLUSTER}/slurm.conf"
    if os.geteuid() != 0 or not os.path.exists(conf):
        print("submit_advice: needs root and the local cluster (slurm/local-cluster.sh up "
              "--accounting)", file=sys.stderr)
        return 1
    # slurm.conf without the filter, beside the real one (its paths are absolute).
    bare = f"{CLUSTER}/bench-no-cli-filter/slurm.conf"
    os.makedirs(os.path.dirname(bare), exist_ok=True)
    with open(conf) as f, open(bare, "w") as out:
        out.writelines(l for l in f if not l.startswith("CliFilterPlugins="))
    os.chmod(os.path.dirname(bare), 0o755)
    os.chmod(bare, 0o644)
    # A history: three short tracked jobs of the name, run to the end.
    made = [job_id(sbatch(conf, ["--gpu-track", "-J", NAME, "--mem=2G", "-t", "30",
                                 "--wrap", "sleep 1"])) for _ in range(3)]
    for j in made:
        while state(j) not in ("", "COMPLETED", "FAILED", "CANCELLED"):
            time.sleep(0.5)
    time.sleep(25)  # the summaries stored, and refresh_seconds past
    ways = {
        "off": (bare, ["-J", NAME, "--gpu-track"], ()),
        "untracked": (conf, ["-J", NAME], ()),
        "silenced": (conf, ["-J", NAME, "--gpu-track"], ("GPU_TRACKER_ADVICE=off",)),
        # stderr is a pipe here: the note is asked for, as a terminal would show it.
        "note": (conf, ["-J", NAME, "--gpu-track"], ("GPU_TRACKER_ADVICE=always",)),
        "asking": (conf, ["-J", NAME, "--gpu-track"], ("GPU_TRACKER_ADVICE=always",)),
    }
    cache = os.path.join(pwd.getpwnam("gtuser").pw_dir, ".cache", "gpu-tracker")
    times = {k: [] for k in ways}
    held, notes = [], 0
    for i in range(n + 1):
        for k, (c, args, env) in ways.items():
            if k == "asking":
                for f in glob.glob(os.path.join(cache, "advice-*.json")):
                    os.remove(f)
            t0 = time.monotonic()
            r = sbatch(c, ["--hold", "--mem=2G", "-t", "30", *args, "--wrap", "true"], env)
            took = time.monotonic() - t0
            held.append(job_id(r))
            if k in ("note", "asking") and "gpu-tracker:" in r.stderr:
                notes += 1
            if i > 0:
                times[k].append(took)
    subprocess.run(["scancel", *held], env={**os.environ, "SLURM_CONF": conf}, check=False)
    base = statistics.median(times["off"])
    print(f"sbatch x{n} each, medians ({notes} of {2 * (n + 1)} 'note' and 'asking' "
          "submissions printed the note):")
    for k, v in times.items():
        m = statistics.median(v)
        print(f"  {k:<10} {m * 1e3:6.1f} ms   added {(m - base) * 1e3:+6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
