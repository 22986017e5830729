#!/usr/bin/env bash
# Side by side, in one run: gpu-tracker (this project, release build) against the Python
# gpu_tracker 5.0.1 it replaces.
#   1. The peak each reports for a 256 MB, 50 ms spike at --st 1.0 (RUNS runs each).
#   2. CPU seconds and wall seconds each tracker costs on `sleep 5` at --st 0.1 (RUNS runs each).
# Needs python3 with venv and network access to PyPI (first run only). Prints medians.
# Usage: tests/bench/compare-anchor.sh [RUNS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-5}
VENV=target/anchor-venv
if [ ! -x "$VENV/bin/gpu-tracker" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q gpu-tracker==5.0.1
fi
cargo build -q --release --bin gpu-tracker
cargo build -q -p gpu-tracker-test-hog --release --target-dir target/test-support
OURS=target/release/gpu-tracker
THEIRS=$VENV/bin/gpu-tracker
HOG=target/test-support/release/gpu-tracker-test-hog
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# Runs a command, prints "<cpu seconds of it and its waited-for descendants> <wall seconds>".
cost() {
    python3 - "$@" <<'PY'
import os, subprocess, sys, time
t = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, _, ru = os.wait4(p.pid, 0)
print(f"{ru.ru_utime + ru.ru_stime:.3f} {time.monotonic() - t:.3f}")
PY
}

peak() { # tool file -> "main combined" in MB
    python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['max_ram']; print(round(d['main']['total_rss'],1), round(d['combined']['total_rss'],1))" "$1"
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "== 1. 256 MB held for 50 ms, --st 1.0 (MB; main / combined) =="
for i in $(seq "$RUNS"); do
    "$OURS" -e "$HOG --mb 256 --hold-ms 50" --st 1.0 --ru megabytes -f json -o "$OUT/o$i.json" --disable-logs 2>/dev/null
    "$THEIRS" -e "$HOG --mb 256 --hold-ms 50" --st 1.0 --ru megabytes -f json -o "$OUT/t$i.json" --disable-logs >/dev/null 2>&1
    echo "run $i: ours $(peak "$OUT/o$i.json")   gpu_tracker $(peak "$OUT/t$i.json")"
done

echo "== 2. tracker cost on 'sleep 5', --st 0.1 (seconds; CPU / wall) =="
for i in $(seq "$RUNS"); do
    o=$(cost "$OURS" -e "sleep 5" --st 0.1 --disable-logs)
    t=$(cost "$THEIRS" -e "sleep 5" --st 0.1 --disable-logs)
    echo "$o" >>"$OUT/ours"; echo "$t" >>"$OUT/theirs"
    echo "run $i: ours $o   gpu_tracker $t"
done
oc=$(cut -d' ' -f1 "$OUT/ours" | median); ow=$(cut -d' ' -f2 "$OUT/ours" | median)
tc=$(cut -d' ' -f1 "$OUT/theirs" | median); tw=$(cut -d' ' -f2 "$OUT/theirs" | median)
echo "median CPU: ours ${oc}s, gpu_tracker ${tc}s  (ratio $(python3 -c "print(round($tc/max($oc,0.001)))")x)"
echo "median wall: ours ${ow}s, gpu_tracker ${tw}s  (sleep itself: 5 s)"
