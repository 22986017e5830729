# shellcheck shell=bash
# Part of slurm/local-cluster.sh (sourced by it; not run alone): waiting for the nodes, running
# jobs as the test users, and the checks "up" ends with (jobs, nodes, the node-local spool, the
# MIG and AMD nodes, accounting).

# Waits up to 60 s until every node is idle (or busy with jobs); resumes a node once if it is down.
wait_node() {
    local i name st waiting up resumed=" "
    for ((i = 0; i < 120; i++)); do
        waiting="" up=""
        for name in $(all_node_names); do
            st=$(sinfo -h -N -n "$name" -o %T 2>/dev/null | head -n 1 || true)
            case $st in
            idle | mixed | allocated) up+=", $name is $st"; continue ;;
            down* | drain*)
                [[ $resumed == *" $name "* ]] || scontrol update NodeName="$name" State=RESUME || true
                resumed+="$name " ;;
            esac
            waiting+=" $name ($st)"
        done
        if [[ -z $waiting ]]; then
            echo "cluster up: node ${up#, } (SLURM_CONF=$CONF)"
            return 0
        fi
        sleep 0.5
    done
    sinfo -R >&2 || true
    fail "nodes not up after 60 s:$waiting"
}

# Runs a command as user $1, in that user's job directory, against this cluster.
as_user() {
    local u=$1
    shift
    (cd "$STATE/jobs/$u" && runuser -u "$u" -- env SLURM_CONF="$CONF" "$@")
}

# Submits a batch job as user $1 (sbatch options follow), polls until it ends (sbatch --wait
# polls too slowly: up to 10 s), prints its output file; fails unless it completed. With
# --summary first, waits (up to 10 s) for the summary the plugin appends to the output in the
# batch step's exit, which can come just after the job is reported ended.
batch_as() {
    local summary=0 u id out st="" i
    [[ $1 == --summary ]] && { summary=1; shift; }
    u=$1
    shift
    id=$(as_user "$u" sbatch --parsable -o "$STATE/jobs/$u/job-%j.out" "$@")
    for ((i = 0; i < 600; i++)); do
        st=$(scontrol show job -o "$id" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        [[ $st =~ ^(PENDING|CONFIGURING|RUNNING|COMPLETING)$ ]] || break
        sleep 0.2
    done
    out=$STATE/jobs/$u/job-$id.out
    for ((i = 0; summary && i < 50; i++)); do
        tail -n 1 "$out" 2>/dev/null | grep -q '^=====' && break
        sleep 0.2
    done
    LAST_JOB=$id
    echo "batch job $id as $u ($st), output $out:"
    sed 's/^/  | /' "$out" || true
    [[ $st == COMPLETED ]] || fail "batch job $id ended $st"
}

# Checks that jobs run as the ordinary test user and that the simulated GPUs are handed out; with
# several nodes, that a job runs on all of them (and, with a node-local spool, that the last
# node's records stay on it), and the MIG and AMD nodes' GPUs; with accounting, that slurmdbd has
# the check job.
verify_jobs() {
    local u=${TEST_USERS[0]} got gpus logs=("$(slurmd_log "$NODE")" "$STATE/log/slurmctld.log")
    step "srun as $u" "${logs[@]}"
    got=$(as_user "$u" timeout 60 srun -N1 -n1 id -u)
    echo "srun -N1 -n1 id -u as $u: $got"
    [[ $got == "$(id -u "$u")" ]] || fail "srun ran as uid '$got', not $u"
    step "sbatch as $u" "${logs[@]}"
    # shellcheck disable=SC2016  # expanded in the job, not here
    batch_as "$u" -J check --wrap 'echo "job $SLURM_JOB_ID on $(hostname) as $(id -un), cgroup: $(grep -m1 -E ":memory:|^0::" /proc/self/cgroup)"'
    local check=$LAST_JOB
    if ((QUICK_CHECK)); then
        ((ACCOUNTING == 0)) || verify_accounting "$check"
        return 0
    fi
    step "simulated GPUs" "${logs[@]}"
    gpus=$(as_user "$u" timeout 60 srun --gres=gpu:1 env | grep -E 'SLURM_STEP_GPUS|CUDA_VISIBLE_DEVICES' | sort)
    echo "srun --gres=gpu:1 as $u: ${gpus//$'\n'/ }"
    [[ $gpus == *CUDA_VISIBLE_DEVICES=0* ]] || fail "no simulated GPU in the job's environment"
    ((NODES == 1)) || verify_nodes
    [[ -z $(mig_node) ]] || verify_mig
    [[ -z $(amd_node) ]] || verify_amd
    ((ACCOUNTING == 0)) || verify_accounting "$check"
}

# With several nodes: one job on all of them, each answering once; with a node-local spool and
# the plugin on, a tracked step's records on the shared spool for every node but the last, and
# the last one's only in its own mount namespace.
verify_nodes() {
    local u=${TEST_USERS[0]} want got name i id missing dir
    local logs=("$STATE/log/slurmctld.log")
    for name in $(node_names); do logs+=("$(slurmd_log "$name")"); done
    step "srun on every node" "${logs[@]}"
    want=$(node_names | sort)
    got=$(as_user "$u" timeout 60 srun -p multi -N "$NODES" printenv SLURMD_NODENAME | sort)
    echo "srun -p multi -N $NODES printenv SLURMD_NODENAME as $u: ${got//$'\n'/ }"
    [[ $got == "$want" ]] || fail "expected one answer from each of: ${want//$'\n'/ }"
    got=$(as_user "$u" timeout 60 srun -p multi -N "$NODES" hostname | sort | uniq -c | sed 's/^ *//')
    echo "srun -p multi -N $NODES hostname as $u: $got"
    [[ $got == "$NODES $(hostname)" ]] || fail "expected $NODES answers from $(hostname)"
    ((NODE_LOCAL)) && grep -q '^optional' "$STATE/plugstack.conf" || return 0
    # srun's summary (on stderr) is kept for the step's failure report only.
    step "node-local spool" "$STATE/log/verify-srun.err" "${logs[@]}"
    # shellcheck disable=SC2016  # expanded in the job
    id=$(as_user "$u" timeout 60 srun -p multi -N "$NODES" --gpu-track sh -c 'echo $SLURM_JOB_ID' \
        2>"$STATE/log/verify-srun.err" | sort -u)
    [[ $id =~ ^[0-9]+$ ]] || fail "no job id from the tracked srun: '$id'"
    dir=$STATE/spool/gpu-tracker/gputrack/$id
    # The records are final when each slurmstepd ends, just after srun returns.
    for ((i = 0; i < 50; i++)); do
        missing=""
        for name in $(node_names); do
            if node_is_local "$name"; then
                cmd_on_node_test "$name" test -f "$dir/$name.0.json" || missing+=" $name (node-local)"
            else
                [[ -f $dir/$name.0.json ]] || missing+=" $name"
            fi
        done
        [[ -z $missing ]] && break
        sleep 0.2
    done
    [[ -z $missing ]] || fail "tracked job $id: no record of node(s)$missing"
    name=$(node_name "$NODES")
    [[ ! -e $dir/$name.0.json ]] || fail "job $id: node $name's record is on the shared spool"
    echo "tracked srun $id on $NODES nodes: records of $(node_names | grep -vxF "$name" | paste -sd ' ') in $dir;" \
        "$name's only on its own spool (slurm/local-cluster.sh on-node $name -- ls $dir)"
}

# With the MIG node: a step on one MIG instance gets Slurm's index 1 or 2 (gres.conf's order on
# that node: the plain GPU is 0), and a step on a shard the index of the GPU the shard is on (0)
# and the number of its shards. What Slurm 22.05 gives (cgroup.conf constrains no devices, so
# CUDA_VISIBLE_DEVICES is the node's index too):
#   srun -p mig --gres=gpu:1g.10gb:1   SLURM_STEP_GPUS=1 CUDA_VISIBLE_DEVICES=1 (2 for the other)
#   srun -p mig --gres=shard:1         SLURM_STEP_GPUS=0 CUDA_VISIBLE_DEVICES=0 SLURM_SHARDS_ON_NODE=1
#   sbatch -p mig --gres=gpu:1g.10gb:1 SLURM_JOB_GPUS=1 (the batch step has no SLURM_STEP_GPUS);
#                                      two such jobs at once: one 1, the other 2
#   sbatch -p mig --gres=shard:1       SLURM_JOB_GPUS=0 SLURM_SHARDS_ON_NODE=1
# (scontrol show node: Gres=gpu:sim:1,gpu:1g.10gb:2,shard:sim:4,shard:1g.10gb:0.)
verify_mig() {
    local u=${TEST_USERS[0]} got
    step "MIG and shards" "$STATE/log/slurmctld.log" "$(slurmd_log "$(mig_node)")"
    got=$(as_user "$u" timeout 60 srun -p mig --gres=gpu:1g.10gb:1 env |
        grep -E '^(SLURM_STEP_GPUS|SLURM_SHARDS_ON_NODE)=' | sort | paste -sd ' ')
    echo "srun -p mig --gres=gpu:1g.10gb:1 as $u: $got"
    [[ $got =~ ^SLURM_STEP_GPUS=[12]$ ]] || fail "a step on a MIG instance is not given Slurm's GPU 1 or 2"
    got=$(as_user "$u" timeout 60 srun -p mig --gres=shard:1 env |
        grep -E '^(SLURM_STEP_GPUS|SLURM_SHARDS_ON_NODE)=' | sort | paste -sd ' ')
    echo "srun -p mig --gres=shard:1 as $u: $got"
    [[ $got == "SLURM_SHARDS_ON_NODE=1 SLURM_STEP_GPUS=0" ]] || fail "a step on a shard is not given one shard of Slurm's GPU 0"
}

# With the AMD node: a step on both SIMULATED MI300X gets Slurm's indices 0 and 1 (gres.conf's
# renderD128 and renderD129), and the simulator's tree has their two KFD GPU nodes, on render
# minors 128 and 129. What Slurm 22.05 sets for such a step (every vendor's variable, whatever
# the GPU; the plugin trusts none of them):
#   srun -p amd --gres=gpu:mi300x:2    SLURM_STEP_GPUS=0,1 CUDA_VISIBLE_DEVICES=0,1
#                                      ROCR_VISIBLE_DEVICES=0,1 GPU_DEVICE_ORDINAL=0,1
#                                      ZE_AFFINITY_MASK=0,1 SLURM_GPUS_ON_NODE=2
#   srun -p amd --gres=gpu:mi300x:1    the same with 0 (SLURM_GPUS_ON_NODE=1)
verify_amd() {
    local u=${TEST_USERS[0]} got minors f
    local vars='SLURM_STEP_GPUS|SLURM_JOB_GPUS|CUDA_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES'
    vars+='|GPU_DEVICE_ORDINAL|ZE_AFFINITY_MASK'
    step "AMD GPUs" "$STATE/log/slurmctld.log" "$(slurmd_log "$(amd_node)")" "$STATE/log/simamd.log"
    got=$(as_user "$u" timeout 60 srun -p amd --gres=gpu:mi300x:2 env | grep -E "^($vars)=" | sort | paste -sd ' ')
    echo "srun -p amd --gres=gpu:mi300x:2 as $u: $got"
    [[ " $got " == *" SLURM_STEP_GPUS=0,1 "* ]] || fail "a step on both AMD GPUs is not given Slurm's GPUs 0 and 1"
    simamd_alive || fail "the AMD simulator (tests/simamd.py) does not run"
    minors=$(for f in "$AMD_ROOT"/sys/class/kfd/kfd/topology/nodes/*/properties; do
        sed -n 's/^drm_render_minor \([1-9][0-9]*\)$/\1/p' "$f" 2>/dev/null || true
    done | sort -n | paste -sd ' ')
    echo "KFD GPU nodes in $AMD_ROOT: $(kfd_gpu_nodes), render minors ${minors:-none}"
    if (($(kfd_gpu_nodes) != 2)) || [[ $minors != "128 129" ]]; then
        fail "the simulated tree has not two KFD GPU nodes on render minors 128 and 129"
    fi
}

# Runs CMD in node $1's view of the files (as on-node does) and returns its exit status.
cmd_on_node_test() { (cmd_on_node "$@"); }

# With accounting: sacct, as the test user, shows check job $1 completed (slurmdbd lags a little).
verify_accounting() {
    local u=${TEST_USERS[0]} got="" i
    step "sacct as $u" "$STATE/log/slurmdbd.log" "$STATE/log/slurmctld.log"
    for ((i = 0; i < 60; i++)); do
        got=$(as_user "$u" sacct -j "$1" -X -n -P -o JobID,State 2>/dev/null || true)
        [[ $got == "$1|COMPLETED" ]] && break
        sleep 0.5
    done
    echo "sacct -j $1 -X -n -P -o JobID,State as $u: $got"
    [[ $got == "$1|COMPLETED" ]] || fail "slurmdbd does not have job $1 completed"
}
