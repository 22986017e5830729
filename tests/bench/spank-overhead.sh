#!/usr/bin/env bash
# What the plugin costs a job, measured on the local cluster (slurm/local-cluster.sh up first):
#  1. wall time of `srun true` with and without --gpu-track, alternated, N runs each (default 20):
#     the time tracking adds to a step's start and end;
#  2. slurmstepd's resident memory during a 4 s step with and without --gpu-track.
# Prints medians. Runs the jobs as the test user gtuser.
set -euo pipefail
N=${1:-20}
STATE=${GPU_TRACKER_CLUSTER_DIR:-/var/tmp/gpu-tracker-cluster}
export SLURM_CONF=$STATE/slurm.conf
cd "$STATE/jobs/gtuser"
as_user() { runuser -u gtuser -- env SLURM_CONF="$SLURM_CONF" "$@"; }

median() { sort -n | awk '{a[NR]=$1} END {printf "%d\n", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

plain=() tracked=()
as_user srun true # warm up
for ((i = 0; i < N; i++)); do
    t0=$(date +%s%N); as_user srun true; t1=$(date +%s%N)
    as_user srun --gpu-track true 2>/dev/null; t2=$(date +%s%N)  # its summary (timed) to /dev/null
    plain+=($(((t1 - t0) / 1000))) tracked+=($(((t2 - t1) / 1000)))
done
mp=$(printf '%s\n' "${plain[@]}" | median) mt=$(printf '%s\n' "${tracked[@]}" | median)
echo "srun true, median of $N: plain $((mp / 1000)) ms, --gpu-track $((mt / 1000)) ms, added $(((mt - mp) / 1000)) ms"

# slurmstepd's VmRSS (kB) of the step's slurmstepd, read 3 s into a 4 s step.
stepd_rss() {
    local opt=$1 pid="" i job
    as_user srun $opt sleep 4 2>/dev/null &
    local srun_pid=$!
    for ((i = 0; i < 50; i++)); do
        job=$(squeue -h -u gtuser -o %A -t R | sort -n | tail -1)
        [[ -n $job ]] && pid=$(pgrep -f "^slurmstepd: \[$job\.0\]" | head -1) && [[ -n $pid ]] && break
        sleep 0.1
    done
    sleep 3
    awk '/^VmRSS/ {print $2}' "/proc/$pid/status"
    wait "$srun_pid"
}
R=${2:-5}
off=() on=()
for ((i = 0; i < R; i++)); do off+=("$(stepd_rss "")") on+=("$(stepd_rss --gpu-track=0.5)"); done
mo=$(printf '%s\n' "${off[@]}" | median) mn=$(printf '%s\n' "${on[@]}" | median)
echo "slurmstepd VmRSS 3 s into a step, median of $R: untracked $mo kB, --gpu-track=0.5 $mn kB, extra $((mn - mo)) kB"
echo "  untracked: ${off[*]}"
echo "  tracked:   ${on[*]}"
