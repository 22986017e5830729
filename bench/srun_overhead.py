#!/usr/bin/env python3
"""What --gpu-track adds to `srun true` on the local cluster, alone (bench/run measures it too,
among everything else): N alternations of `srun true` and `srun --gpu-track true` as the test
user, the first of each kind not counted, medians printed. Needs root and the local cluster
(slurm/local-cluster.sh up).

Usage: bench/srun_overhead.py [N]   (default 30)
"""
import os
import statistics
import subprocess
import sys
import time

CLUSTER = os.environ.get("GPU_TRACKER_CLUSTER_DIR", "/var/tmp/gpu-tracker-cluster")


def as_user(args):
    return subprocess.run(["runuser", "-u", "gtuser", "--", "env",
                           f"SLURM_CONF={CLUSTER}/slurm.conf"] + args,
                          cwd=f"{CLUSTER}/jobs/gtuser", capture_output=True, text=True,
                          check=False)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    if os.geteuid() != 0 or not os.path.exists(f"{CLUSTER}/slurm.conf"):
        print("srun_overhead: needs root and the local cluster (slurm/local-cluster.sh up)",
              file=sys.stderr)
        return 1
    as_user(["srun", "true"])
    as_user(["srun", "--gpu-track", "true"])
    plain, tracked = [], []
    for _ in range(n):
        t0 = time.monotonic()
        a = as_user(["srun", "true"])
        t1 = time.monotonic()
        b = as_user(["srun", "--gpu-track", "true"])
        t2 = time.monotonic()
        if a.returncode != 0 or b.returncode != 0:
            print(f"srun_overhead: srun failed: {a.stderr[-300:]}{b.stderr[-300:]}",
                  file=sys.stderr)
            return 1
        plain.append(t1 - t0)
        tracked.append(t2 - t1)
    p, t = statistics.median(plain), statistics.median(tracked)
    print(f"`srun true` x{n}: {p * 1e3:.0f} ms untracked, {t * 1e3:.0f} ms with --gpu-track "
          f"(added {(t - p) * 1e3:.0f} ms, medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
