#!/usr/bin/env python3
"""The finished jobs bench/site-report puts into Slurm's job table: one tab-separated line per
job (the columns of COLUMNS, in that order, as `LOAD DATA LOCAL INFILE` reads them), each with
a stored summary in the format of src/report/stored.rs (version 1: `gpu-tracker:1:` and one
line of JSON with backticks for its double quotes). Standard library only; the same seed gives
the same jobs. What it made goes to stderr (sizes, states, classes) or, with --stats FILE, as
JSON to FILE.

Usage: site-report-jobs.py --jobs N --base ID --end UNIX --users UID:GID[:ASSOC],... [--seed S]
       [--stats FILE] > jobs.tsv;  site-report-jobs.py --columns (the columns and their SQL types)
"""

import argparse
import bisect
import json
import math
import random
import statistics
import sys

GIB = 1 << 30
GPU_MEM = 80 * GIB  # 85899345920
NO_VAL = 4294967294

# Slurm's job states (enum job_states, slurm.h; the same in 22.05 to 26.05).
JOB_COMPLETE = 3
JOB_FAILED = 5
JOB_OOM = 11

# The staging table's columns, in the file's order (bench/site-report creates it and copies
# each into the job table's column of the same name).
COLUMNS = [
    ("id_job", "int unsigned"),
    ("id_user", "int unsigned"),
    ("id_group", "int unsigned"),
    ("id_assoc", "int unsigned"),
    ("account", "tinytext"),
    ("partition", "tinytext"),
    ("state", "int unsigned"),
    ("exit_code", "int unsigned"),
    ("time_submit", "bigint unsigned"),
    ("time_eligible", "bigint unsigned"),
    ("time_start", "bigint unsigned"),
    ("time_end", "bigint unsigned"),
    ("timelimit", "int unsigned"),
    ("cpus_req", "int unsigned"),
    ("mem_req", "bigint unsigned"),
    ("nodes_alloc", "int unsigned"),
    ("nodelist", "text"),
    ("tres_alloc", "text"),
    ("tres_req", "text"),
    ("admin_comment", "text"),
]

ACCOUNTS = [f"acct{i:02d}" for i in range(1, 21)]
# Partition: (share of jobs, node name prefix, nodes in it, digits).
PARTITIONS = {
    "gpu": (0.40, "gpu-node-", 64, 3),
    "cpu": (0.54, "cpu-node-", 160, 3),
    "bigmem": (0.06, "bigmem-node-", 12, 2),
}


def r1(v):
    return round(v, 1)


def r2(v):
    return round(v, 2)


def pick_weighted(rng, cum, items):
    return items[bisect.bisect(cum, rng.random() * cum[-1])]


def cumulative(weights):
    out, t = [], 0.0
    for w in weights:
        t += w
        out.append(t)
    return out


def hostlist(prefix, digits, numbers):
    """Slurm's compact form: prefix[017,021-022]."""
    numbers = sorted(numbers)
    if len(numbers) == 1:
        return f"{prefix}{numbers[0]:0{digits}d}"
    parts, start, prev = [], numbers[0], numbers[0]
    for n in numbers[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(
            f"{start:0{digits}d}" if start == prev else f"{start:0{digits}d}-{prev:0{digits}d}"
        )
        if n is not None:
            start = prev = n
    return f"{prefix}[{','.join(parts)}]"


def make_job(rng, job_id, end_cap, users, user_cum, user_accounts):
    uid, gid, assoc = pick_weighted(rng, user_cum, users)
    accts = user_accounts[uid]
    account = accts[0] if rng.random() < 0.8 or len(accts) == 1 else accts[1]

    x = rng.random()
    partition = "gpu" if x < 0.40 else ("cpu" if x < 0.94 else "bigmem")
    _, prefix, pool, digits = PARTITIONS[partition]

    # Nodes: mostly one; a few multi-node jobs.
    y = rng.random()
    if partition == "gpu":
        nnodes = 1 if y < 0.90 else rng.choice([2, 2, 2, 3, 4, 4])
    elif partition == "cpu":
        nnodes = 1 if y < 0.92 else rng.choice([2, 2, 4, 4, 8, 16])
    else:
        nnodes = 1
    node_numbers = rng.sample(range(1, pool + 1), nnodes)
    nodes = [f"{prefix}{n:0{digits}d}" for n in node_numbers]

    # Elapsed: 1 min to 12 h, log-uniform.
    elapsed = int(math.exp(rng.uniform(math.log(60), math.log(12 * 3600))))
    start = rng.randint(end_cap - 6 * 86400, end_cap - elapsed)
    end = start + elapsed
    submit = max(end_cap - 7 * 86400 + 3600, start - int(rng.expovariate(1 / 900.0)))
    timelimit = next(t for t in (60, 240, 720, 1440, 2880) if t * 60 >= elapsed)

    z = rng.random()
    state = JOB_COMPLETE if z < 0.94 else (JOB_FAILED if z < 0.99 else JOB_OOM)
    # exit_code is the wait status: exit 1 is 256; an OOM-killed job's is 0:125.
    exit_code = {JOB_COMPLETE: 0, JOB_FAILED: 256 * rng.choice([1, 1, 1, 2, 127]), JOB_OOM: 125}[state]

    gpus_per_node = 0
    if partition == "gpu":
        gpus_per_node = 4 if nnodes > 1 else rng.choices([1, 2, 3, 4], weights=[45, 25, 5, 25])[0]
        cpus = gpus_per_node * rng.choice([4, 8, 8, 16])
        mem_gib = rng.choice([32, 64, 128, 256, 512]) if gpus_per_node > 1 else rng.choice([16, 32, 64, 128])
    elif partition == "cpu":
        cpus = rng.choice([1, 1, 2, 4, 4, 8, 8, 16, 16, 32, 48, 64])
        mem_gib = rng.choice([4, 4, 8, 8, 16, 16, 32, 64, 128])
    else:
        cpus = rng.choice([8, 16, 32, 64])
        mem_gib = rng.choice([256, 384, 512])
    mem_req = mem_gib * GIB

    # CPU use: most jobs busy, a fifth of them barely.
    low_cpu = rng.random() < 0.2
    node_rows, cpu_total, peak_total = [], 0.0, 0
    mem_over = rng.random() < 0.3
    oom_node = rng.randrange(nnodes) if state == JOB_OOM else -1
    max_cores = 0.0
    for i, node in enumerate(nodes):
        eff = rng.uniform(0.03, 0.22) if low_cpu else rng.uniform(0.45, 0.98)
        cpu_s = r2(elapsed * cpus * eff)
        busy = min(cpus, max(0.05, cpus * eff * rng.uniform(1.0, 1.3)))
        max_cores = max(max_cores, busy)
        if i == oom_node:
            peak = mem_req - rng.randint(0, 8 << 20)
        elif mem_over:
            peak = int(mem_req * rng.uniform(0.02, 0.4))
        else:
            peak = int(mem_req * rng.uniform(0.5, 0.97))
        steps = rng.choice([1, 1, 2, 3, 5]) if partition != "cpu" else rng.choice([1, 1, 1, 2, 4])
        node_rows.append([node, cpu_s, cpus, peak, mem_req, steps])
        cpu_total += cpu_s
        peak_total += peak
    alloc_cpus = cpus * nnodes

    gpu_rows, unused, idle = [], 0, 0.0
    idle_tail = False
    if gpus_per_node:
        some_unused = rng.random() < 0.10
        some_low = rng.random() < 0.12
        idle_tail = elapsed >= 3600 and rng.random() < 0.06
        for node in nodes:
            for g in range(gpus_per_node):
                if some_unused and g == gpus_per_node - 1 and (gpus_per_node > 1 or rng.random() < 0.5):
                    gpu_rows.append([node, g, 0, GPU_MEM, 0.0, 0.0])
                    unused += 1
                    idle += elapsed
                    continue
                mean = rng.uniform(1.0, 9.5) if some_low else rng.uniform(25.0, 99.0)
                top = min(100.0, mean + rng.uniform(0.0, 60.0))
                peak = rng.randint(1 * GIB, 78 * GIB)
                gpu_rows.append([node, g, peak, GPU_MEM, r1(mean), r1(top)])
                idle += elapsed * (1 - mean / 100) * rng.uniform(0.05, 0.4)
        if idle_tail:
            idle += rng.uniform(1800, min(elapsed, 4 * 3600)) * len(gpu_rows)
        idle = min(idle, float(elapsed * len(gpu_rows)))

    oom_kills = rng.choice([1, 1, 1, 2, 4]) if state == JOB_OOM else 0
    failed_tasks = rng.choice([1, 1, 2, cpus]) if state in (JOB_FAILED, JOB_OOM) else 0

    # The classes, by the built-in rules of src/report/classes.rs.
    cl = []
    if unused:
        cl.append("gpu-unused")
    if elapsed >= 60:
        if any(r[2] > 0 and r[4] < 10.0 for r in gpu_rows):
            cl.append("gpu-low")
        if idle_tail:
            cl.append("gpu-idle-tail")
    if not oom_kills:
        big = max(node_rows, key=lambda r: r[3])
        if big[3] < 0.5 * big[4] and big[4] - big[3] >= GIB:
            cl.append("mem-over")
    if elapsed >= 60 and cpus >= 2:
        eff_pct = 100 * cpu_total / (elapsed * alloc_cpus)
        if eff_pct < 25.0 and math.ceil(max_cores) <= 0.75 * cpus:
            cl.append("cpu-low")
    if oom_kills:
        cl.append("oom")
    if failed_tasks:
        cl.append("failed")

    stored = {
        "job": job_id,
        "complete": True,
        "elapsed": float(elapsed),
        "cpu": [r2(cpu_total), alloc_cpus, r2(float(max_cores))],
        "totals": [
            peak_total,
            mem_req * nnodes,
            len(gpu_rows),
            sum(r[2] for r in gpu_rows),
            r1(statistics.fmean(r[4] for r in gpu_rows)) if gpu_rows else -1.0,
        ],
        "job_nodes": nnodes,
        "nodes": node_rows,
    }
    if gpu_rows:
        stored["gpus"] = gpu_rows
    if oom_kills:
        stored["oom_kills"] = oom_kills
    if failed_tasks:
        stored["failed_tasks"] = failed_tasks
    stored["cl"] = cl
    if gpu_rows:
        stored["gu"] = [unused, r2(idle)]
    text = "gpu-tracker:1:" + json.dumps(stored, separators=(",", ":")).replace('"', "`")
    assert len(text) <= 4000 and not any(c in text for c in '|"\' \n\t\\'), text

    mem_mb = mem_gib * 1024
    tres = f"1={alloc_cpus},2={mem_mb * nnodes},4={nnodes},5={alloc_cpus}"
    row = [
        job_id, uid, gid, assoc, account, partition, state, exit_code,
        submit, submit, start, end, timelimit,
        alloc_cpus, mem_mb, nnodes, hostlist(prefix, digits, node_numbers),
        tres, tres, text,
    ]
    return row, state, cl, len(text), len(gpu_rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int)
    p.add_argument("--base", type=int, help="the first job id")
    p.add_argument("--end", type=int, help="no job ends after this (Unix time)")
    p.add_argument("--users", help="UID:GID[:ASSOC],... (ASSOC: id_assoc, 0 for none)")
    p.add_argument("--seed", type=int, default=20261125)
    p.add_argument("--stats", help="write what was made, as JSON, to this file")
    p.add_argument("--columns", action="store_true", help="print the columns and exit")
    a = p.parse_args()
    if a.columns:
        print(",".join(f"{n} {t}" for n, t in COLUMNS))
        return
    if None in (a.jobs, a.base, a.end, a.users):
        p.error("--jobs, --base, --end and --users are needed")
    rng = random.Random(a.seed)
    users = [tuple((int(v) for v in (u + ":0").split(":")[:3])) for u in a.users.split(",")]
    # A few heavy users, a long tail: weight 1/rank^0.9, in a shuffled order of uids.
    order = users[:]
    rng.shuffle(order)
    user_cum = cumulative([1 / (i + 1) ** 0.9 for i in range(len(order))])
    user_accounts = {
        u[0]: rng.sample(ACCOUNTS, 2) if rng.random() < 0.3 else [rng.choice(ACCOUNTS)] for u in order
    }
    sizes, states, classes, gpu_jobs = [], {}, {}, 0
    out = sys.stdout
    buf = []
    for i in range(a.jobs):
        row, state, cl, size, ngpus = make_job(rng, a.base + i, a.end, order, user_cum, user_accounts)
        buf.append("\t".join(str(v) for v in row))
        if len(buf) >= 5000:
            out.write("\n".join(buf) + "\n")
            buf.clear()
        sizes.append(size)
        states[state] = states.get(state, 0) + 1
        for t in cl:
            classes[t] = classes.get(t, 0) + 1
        gpu_jobs += ngpus > 0
    if buf:
        out.write("\n".join(buf) + "\n")
    out.flush()
    sizes.sort()
    stats = {
        "jobs": a.jobs,
        "gpu_jobs": gpu_jobs,
        "states": {{3: "COMPLETED", 5: "FAILED", 11: "OUT_OF_MEMORY"}[k]: v for k, v in sorted(states.items())},
        "classes": dict(sorted(classes.items())),
        "comment_bytes": {
            "min": sizes[0] if sizes else 0,
            "median": sizes[len(sizes) // 2] if sizes else 0,
            "mean": round(statistics.fmean(sizes)) if sizes else 0,
            "p99": sizes[int(len(sizes) * 0.99)] if sizes else 0,
            "max": sizes[-1] if sizes else 0,
            "total": sum(sizes),
        },
    }
    if a.stats:
        with open(a.stats, "w") as f:
            json.dump(stats, f)
    else:
        print(json.dumps(stats), file=sys.stderr)


if __name__ == "__main__":
    main()
