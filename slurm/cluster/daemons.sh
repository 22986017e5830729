# shellcheck shell=bash
# Part of slurm/local-cluster.sh (sourced by it; not run alone): starting and stopping munged,
# slurmctld, each node's slurmd (the node-local one in a mount namespace of its own), and the
# simulator of the AMD node's GPUs.

# Succeeds when pid file $1 names a live process whose command is $2.
alive() {
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]]
}

# Stops the daemon of pid file $1 (command $2, named $3 if given): SIGTERM, up to 20 s, then
# SIGKILL.
stop_daemon() {
    local i pid
    alive "$1" "$2" || { rm -f "$1"; return 0; }
    pid=$(cat "$1")
    kill "$pid"
    for ((i = 0; i < 40; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    rm -f "$1"
    echo "stopped ${3:-$2} (pid $pid)"
}

# Starts munged as the munge user unless a munged already answers; records the pid it got.
start_munge() {
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
    install -d -o munge -g munge -m 0755 /run/munge
    runuser -u munge -- munged
    cp /run/munge/munged.pid "$STATE/run/munged.pid"
    munge -n | unmunge >/dev/null
}

# Starts slurmctld (if not running) and waits until it answers scontrol ping.
start_slurmctld() {
    local i
    alive "$STATE/run/slurmctld.pid" slurmctld && return 0
    slurmctld -f "$CONF"
    for ((i = 0; i < 60; i++)); do
        scontrol ping 2>/dev/null | grep -q UP && return 0
        alive "$STATE/run/slurmctld.pid" slurmctld || ((i < 4)) || fail "slurmctld exited"
        sleep 0.5
    done
    fail "slurmctld does not answer"
}

# Cancels the jobs a slurmctld just started recovered from its state directory. "down" cancels
# every job before it stops the daemons, so there are only such jobs where the daemons were
# killed instead (a machine's restart, a test run ended at its limit): their steps died with
# the slurmd, yet slurmctld holds their nodes' CPUs and memory until it learns they are gone,
# and the first job of this cluster would wait for them.
cancel_recovered_jobs() {
    local ids i
    ids=$(squeue -h -o %A 2>/dev/null | paste -sd ' ') || true
    [[ -n $ids ]] || return 0
    echo "cancelling the jobs of a cluster stopped without 'down': $ids"
    # shellcheck disable=SC2086  # a word list
    scancel $ids || true
    for ((i = 0; i < 120; i++)); do
        [[ -z $(squeue -h 2>/dev/null) ]] && return 0
        sleep 0.5
    done
    squeue >&2 || true
    fail "jobs of a cluster stopped without 'down' still queued after 60 s"
}

# Succeeds when process $1 sees another mount table than this script (a node-local spool).
# False when it cannot tell (not root).
own_mounts() {
    local ns
    ns=$(readlink "/proc/$1/ns/mnt" 2>/dev/null) && [[ $ns != "$(readlink /proc/self/ns/mnt)" ]]
}

# Stops the slurmd of any node "up" is not bringing up now (an earlier "up" with more nodes, the
# one-node layout's slurmd.pid), and a node's slurmd whose spool layout is not the one asked for.
stop_other_slurmd() {
    local f name pid
    while read -r f; do
        name=${f##*/slurmd-}
        name=${name%.pid}
        if [[ $f == */slurmd.pid ]] || ! all_node_names | grep -qxF -- "$name"; then
            stop_daemon "$f" slurmd
        elif alive "$f" slurmd; then
            pid=$(cat "$f")
            if node_is_local "$name"; then own_mounts "$pid" || stop_daemon "$f" slurmd
            else ! own_mounts "$pid" || stop_daemon "$f" slurmd; fi
        fi
    done < <(slurmd_pid_files)
}

# Stops every slurmd this script started.
stop_all_slurmd() {
    local f
    while read -r f; do stop_daemon "$f" slurmd; done < <(slurmd_pid_files)
}

# Starts the slurmd of node $1 (if not running); it exits at once on a bad configuration. The
# node-local one runs in a mount namespace of its own where a private directory, its "disk", is
# mounted over the plugin's spool_dir: the records its steps write stay out of sight of this
# machine, as on a cluster whose compute nodes keep them on a local disk.
start_slurmd() {
    local name=$1
    # A slurmd that died waiting for systemd's scope (cgroup v2, a busy emulated guest) is
    # started once more, after the cleanup its last words ask for.
    (start_slurmd_once "$name") && return 0
    grep -q 'Scope init timed out' "$(slurmd_log "$name")" 2>/dev/null || exit 1
    echo "local-cluster: slurmd of node $name timed out waiting for its systemd scope; once more"
    systemctl reset-failed >/dev/null 2>&1 || true
    start_slurmd_once "$name"
}

start_slurmd_once() {
    local name=$1 pidf i
    pidf=$(slurmd_pid "$name")
    alive "$pidf" slurmd && return 0
    install -d -m 0755 "$STATE/spool/d/$name"
    # slurmstepd inherits slurmd's environment: the SIMULATED GPUs' scenario reaches the fake NVML.
    if node_is_local "$name"; then
        local disk=$STATE/spool/node-local/$name spool=$STATE/spool/gpu-tracker
        # Root only above the node's directory: this machine's users cannot read it from here.
        install -d -o root -g root -m 0700 "$STATE/spool/node-local"
        install -d -o root -g root -m 0755 "$disk" "$spool"
        # shellcheck disable=SC2016  # expanded by the inner bash
        FAKE_NVML_SCENARIO=$STATE/simulated-gpus.json unshare -m --propagation private -- \
            bash -c 'mount --bind "$1" "$2" && exec slurmd -f "$3" -N "$4"' bash "$disk" "$spool" "$CONF" "$name"
    else
        FAKE_NVML_SCENARIO=$STATE/simulated-gpus.json slurmd -f "$CONF" -N "$name"
    fi
    # It writes its pid file once it is set up: a second here, several under emulation.
    for ((i = 0; i < 120; i++)); do
        alive "$pidf" slurmd && return 0
        pgrep -xf "slurmd -f $CONF -N $name" >/dev/null || ((i < 4)) || fail "slurmd of node $name exited"
        sleep 0.5
    done
    fail "slurmd of node $name wrote no pid file in 60 s"
}

# Starts the slurmd of every node, and names the first node's log slurmd.log as before there
# were several nodes.
start_all_slurmd() {
    local name
    ln -sfn "slurmd-$NODE.log" "$STATE/log/slurmd.log"
    for name in $(all_node_names); do
        step "start slurmd of $name" "$(slurmd_log "$name")"
        start_slurmd "$name"
    done
}

# Succeeds when the AMD node's simulator runs: its pid file names a python3 running simamd.py.
simamd_alive() {
    alive "$SIMAMD_PID" python3 &&
        tr '\0' ' ' <"/proc/$(cat "$SIMAMD_PID")/cmdline" 2>/dev/null | grep -q 'simamd\.py'
}

# Prints how many KFD topology nodes of the simulated tree are GPUs (a gpu_id other than 0).
kfd_gpu_nodes() {
    local f n=0
    for f in "$AMD_ROOT"/sys/class/kfd/kfd/topology/nodes/*/gpu_id; do
        [[ -r $f && $(<"$f") =~ ^[1-9][0-9]*$ ]] && n=$((n + 1))
    done
    echo "$n"
}

# Starts the simulator of the AMD node's two SIMULATED MI300X unless it runs, and waits until its
# tree has their two KFD nodes: tests/simamd.py, as root (the files stand for the kernel's, which
# no user may write), in a session of its own so that it outlives this script as the other daemons
# do. Slurm's GPU i there is render minor 128+i, as gres.conf says. A fresh start begins with an
# empty tree, so that the wait sees this run's files and not an earlier run's. It rewrites its
# files every GPU_TRACKER_SIMAMD_INTERVAL_MS (100): each time it reads every process's command
# line, which in an emulated guest took 40 % of a CPU at 100 ms (slurm/vm/guest-test sets 500).
start_simamd() {
    local i pid sim=$REPO/tests/simamd.py
    simamd_alive && return 0
    [[ -f $sim ]] || fail "no $sim (the AMD node's simulator)"
    rm -rf -- "$AMD_ROOT" "$SIMAMD_PID"
    install -d -m 0755 "$AMD_ROOT"
    PYTHONUNBUFFERED=1 setsid /usr/bin/python3 "$sim" --root "$AMD_ROOT" --render-minors 128,129 \
        --interval-ms "${GPU_TRACKER_SIMAMD_INTERVAL_MS:-100}" \
        --pidfile "$SIMAMD_PID" </dev/null >>"$STATE/log/simamd.log" 2>&1 &
    pid=$!
    for ((i = 0; i < 120; i++)); do
        if simamd_alive && (($(kfd_gpu_nodes) == 2)); then
            echo "started simamd (pid $(cat "$SIMAMD_PID")): SIMULATED AMD GPUs in $AMD_ROOT"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || simamd_alive || ((i < 4)) || fail "tests/simamd.py exited"
        sleep 0.5
    done
    fail "tests/simamd.py made no pid file or no two KFD GPU nodes in 60 s"
}

# Stops the AMD node's simulator if it runs (its tree stays, no longer updated).
stop_simamd() {
    if simamd_alive; then stop_daemon "$SIMAMD_PID" python3 simamd; else rm -f "$SIMAMD_PID"; fi
}
