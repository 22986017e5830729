#!/usr/bin/env bash
# A shared GPU on a real GPU machine: another process (a stand-in for another job) keeps GPU 0
# busy while the plugin's step tracker (examples/step_in_cgroup) tracks a light job on it. The
# record must say the GPU is shared (other_processes), give the device's utilization, and the
# step's own share (process_utilization_percent) and memory apart. See docs/MIG.md.
#
#   bench/gpu-shared.sh [BIN_DIR]     from the folder `bench/gpu-truth pack` made (BIN_DIR: bin)
set -euo pipefail
bin=${1:-bin}
load='
import sys, time, torch
busy = sys.argv[1] == "busy"
x = torch.empty((1 if busy else 2) << 28, dtype=torch.float32, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
end = time.time() + float(sys.argv[2])
while time.time() < end:
    a = a @ a; a = a / a.norm()
    if not busy:
        torch.cuda.synchronize(); time.sleep(0.05)
torch.cuda.synchronize()
'
python3 -c "$load" busy 20 &
other=$!
sleep 4
"$bin/step_in_cgroup" --interval 0.5 --gpus 0 --json -- python3 -c "$load" light 10 >shared-record.json
wait "$other"
python3 - <<'PY'
import json
r = json.load(open("shared-record.json"))
for g in r["gpus"]:
    print(json.dumps({k: g.get(k) for k in ("uuid", "shared", "peak_step_memory_bytes", "peak_device_memory_bytes",
        "mean_utilization_percent", "process_utilization_percent", "sm_active_percent")}, indent=1))
PY
