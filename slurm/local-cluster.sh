#!/usr/bin/env bash
# A real one-node Slurm cluster (Debian's Slurm 22.05 packages) for the quick start and the
# end-to-end tests. Daemons run directly (no systemd); everything lives in one state directory.
#
#   slurm/local-cluster.sh up       install, configure, start, check jobs run as a plain user
#   slurm/local-cluster.sh down     stop the daemons this script started
#   slurm/local-cluster.sh status   which daemons run, and sinfo
#   slurm/local-cluster.sh env      shell exports for using the cluster by hand
#   slurm/local-cluster.sh demo     up, then one small batch job as the test user
#
# Environment: GPU_TRACKER_CLUSTER_DIR (state directory, default /var/tmp/gpu-tracker-cluster),
# GPU_TRACKER_PLUGIN (a SPANK plugin to install instead of building <repo>/target/release/libgpu_tracker.so),
# GPU_TRACKER_SLURM_PORT (first port tried for slurmctld; slurmd gets the next one; default 16817),
# GPU_TRACKER_CONTAIN_SPANK=1 (Slurm 24.05+: SlurmdParameters=contain_spank, with the job
# container plugin that it exists for, so the task callbacks run in the job's namespace).
#
# Works on Slurm 22.05 (Debian 12, cgroup v1) and, inside the test guests of slurm/vm.sh, on
# Slurm 24.11 and 26.05 with cgroup v2: the cgroup plugin follows /sys/fs/cgroup.
set -euo pipefail

SCRIPT=$(readlink -f "${BASH_SOURCE[0]}")
REPO=$(dirname "$(dirname "$SCRIPT")")
STATE=${GPU_TRACKER_CLUSTER_DIR:-/var/tmp/gpu-tracker-cluster}
PLUGIN_SRC=${GPU_TRACKER_PLUGIN:-$REPO/target/release/libgpu_tracker.so}
CONF=$STATE/slurm.conf
TRACKER_CONF=$STATE/gpu-tracker.toml
NODE=$(hostname -s)
TEST_USERS=(gtuser gtuser2)
# Slurm, and what building the plugin needs (Slurm's headers, libclang for bindgen, a C linker)
# unless GPU_TRACKER_PLUGIN names a plugin built elsewhere (the test guests of slurm/vm.sh).
PACKAGES=(slurmctld slurmd slurm-client munge)
[[ -n ${GPU_TRACKER_PLUGIN:-} ]] || PACKAGES+=(libslurm-dev libclang-dev gcc libc6-dev)
export SLURM_CONF=$CONF PATH=$PATH:/usr/sbin:/sbin

STEP="" STEP_LOGS=() CONF_CHANGED=0 STACK_CHANGED=0

# Names the step now running and the logs worth showing if it fails.
step() { STEP=$1; shift; STEP_LOGS=("$@"); }

# On a failed exit, says which step failed and shows the tail of its logs.
on_exit() {
    local rc=$? log
    ((rc != 0)) && [[ -n $STEP ]] || return 0
    echo "local-cluster: step '$STEP' failed (exit $rc)" >&2
    for log in "${STEP_LOGS[@]}"; do
        [[ -r $log ]] && { echo "--- last lines of $log:" >&2; tail -n 20 "$log" >&2; }
    done
}
trap on_exit EXIT

# Stops with a message (the EXIT trap adds the log tail).
fail() { echo "local-cluster: $*" >&2; exit 1; }

# Re-runs this script through sudo when it is not root (for up, down, demo).
need_root() {
    ((EUID == 0)) && return 0
    command -v sudo >/dev/null || fail "must run as root (no sudo found)"
    exec sudo env GPU_TRACKER_CLUSTER_DIR="$STATE" GPU_TRACKER_PLUGIN="$PLUGIN_SRC" \
        GPU_TRACKER_SLURM_PORT="${GPU_TRACKER_SLURM_PORT:-16817}" bash "$SCRIPT" "$@"
}

# Installs the Debian packages that are missing (apt-get update first), logging to log/apt.log.
install_packages() {
    local p missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    echo "installing ${missing[*]} ..."
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        "${PACKAGES[@]}"; } >"$STATE/log/apt.log" 2>&1
}

# Creates the munge key if the package did not, owned by munge and readable by it only.
ensure_munge_key() {
    local key=/etc/munge/munge.key
    [[ -s $key ]] && return 0
    install -d -o munge -g munge -m 0700 /etc/munge
    head -c 1024 /dev/urandom >"$key"
    chown munge:munge "$key" && chmod 0400 "$key"
}

# Creates the ordinary test users (uid >= 1000, home directory) and their job output directories.
ensure_users() {
    local u
    for u in "${TEST_USERS[@]}"; do
        id -u "$u" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$u"
        (($(id -u "$u") >= 1000)) || fail "user $u exists with uid < 1000"
        install -d -o "$u" -g "$(id -gn "$u")" -m 0755 "$STATE/jobs/$u"
    done
}

# Succeeds when nothing listens on TCP port $1 of 127.0.0.1.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Prints "ctld_port slurmd_port": those in slurm.conf while our daemons hold them or they are
# free, else the first free pair from GPU_TRACKER_SLURM_PORT on.
pick_ports() {
    local p=${GPU_TRACKER_SLURM_PORT:-16817} c="" d=""
    if [[ -r $CONF ]]; then
        c=$(sed -n 's/^SlurmctldPort=//p' "$CONF") d=$(sed -n 's/^SlurmdPort=//p' "$CONF")
    fi
    if [[ -n $c && -n $d ]] && { alive "$STATE/run/slurmctld.pid" slurmctld ||
        alive "$STATE/run/slurmd.pid" slurmd || { port_free "$c" && port_free "$d"; }; }; then
        echo "$c $d"
        return 0
    fi
    until port_free "$p" && port_free "$((p + 1))"; do p=$((p + 2)); done
    echo "$p $((p + 1))"
}

# Replaces file $1 (mode $2) with stdin when the content differs; returns 1 when nothing changed.
put_file() {
    local tmp
    tmp=$(mktemp "$1.XXXXXX")
    cat >"$tmp"
    if cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 1; fi
    chmod "$2" "$tmp" && mv -f "$tmp" "$1"
}

# Makes the two character devices that stand for the simulated GPUs and prints them as gres.conf's
# File=. Their minors (4 and 7, major 195 as NVIDIA's, so opening one without a driver fails)
# differ from Slurm's indices (simgpu0 = index 0 = minor 4) and from the fake NVML's (index 0 =
# minor 7): the plugin must map index -> file -> minor -> NVML device, as on a real node whose
# gres.conf names a subset or another order.
gpu_files() {
    install -d -m 0755 "$STATE/dev"
    local i minors=(4 7)
    for i in 0 1; do
        [[ $(stat -c '%F %t:%T' "$STATE/dev/simgpu$i" 2>/dev/null) == "character special file c3:$(printf %x "${minors[i]}")" ]] ||
            { rm -f "$STATE/dev/simgpu$i" && mknod -m 0600 "$STATE/dev/simgpu$i" c 195 "${minors[i]}"; }
    done
    echo "$STATE/dev/simgpu[0-1]"
}

# Writes slurm.conf, cgroup.conf and gres.conf from this machine's CPUs and memory.
write_config() {
    local hw topo mem real defmem ctld slurmd cpus gpus
    hw=$(env -u SLURM_CONF slurmd -C | sed -n '1p')
    topo=$(sed 's/^NodeName=[^ ]* //; s/ RealMemory=.*//' <<<"$hw")
    mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
    cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
    real=$((mem * 95 / 100)) defmem=$((real / cpus < 1024 ? real / cpus : 1024))
    read -r ctld slurmd < <(pick_ports)
    # Real per-task memory limits need the cgroup controllers. On v1 slurmd makes its hierarchy
    # at the top of each controller (memory/slurm_<node>/uid_U/job_J/step_S/task_T), so it works
    # although this shell sits in a nested memory cgroup (/process_api/...). On v2 (the test
    # guests) slurmd asks systemd for <node>_slurmstepd.scope and builds job_J/step_S below it.
    local cgplugin=cgroup/v1
    if [[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]]; then
        cgplugin=cgroup/v2
        grep -qw memory /sys/fs/cgroup/cgroup.controllers || fail "cgroup v2 without the memory controller"
    else
        [[ -d /sys/fs/cgroup/memory && -d /sys/fs/cgroup/cpuset ]] || fail "no cgroup v1 memory/cpuset controllers"
    fi
    local contain="" container=""
    if [[ ${GPU_TRACKER_CONTAIN_SPANK:-0} == 1 ]]; then
        slurm_at_least 24.05 || fail "contain_spank needs Slurm 24.05 or newer (this is $(slurm_version))"
        # The tmpfs container plugins need the extern step made at allocation (Contain).
        contain="SlurmdParameters=contain_spank"$'\n'"PrologFlags=Contain"
        # contain_spank runs the task callbacks in the job container's namespace; 26.05 renamed
        # JobContainerType=job_container/tmpfs to NamespaceType=namespace/tmpfs.
        if slurm_at_least 26.05; then
            container="NamespaceType=namespace/tmpfs"
        else
            container="JobContainerType=job_container/tmpfs"
        fi
    fi
    gpus=$(gpu_files)
    put_file "$CONF" 0644 <<EOF && CONF_CHANGED=1
# Written by slurm/local-cluster.sh; edits are overwritten by the next "up".
ClusterName=gputrack
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=$ctld
SlurmdPort=$slurmd
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
PlugStackConfig=$STATE/plugstack.conf
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
JobAcctGatherType=jobacct_gather/cgroup
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$defmem
ReturnToService=2
MinJobAge=300
KillWait=5
GresTypes=gpu
$contain
$container
NodeName=$NODE NodeHostname=$(hostname) NodeAddr=127.0.0.1 $topo RealMemory=$real Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    put_file "$STATE/cgroup.conf" 0644 <<EOF && CONF_CHANGED=1
CgroupPlugin=$cgplugin
ConstrainCores=yes
ConstrainRAMSpace=yes
EOF
    # The job container's private /tmp and /dev/shm (read only with contain_spank).
    put_file "$STATE/job_container.conf" 0644 <<EOF && CONF_CHANGED=1
AutoBasePath=true
BasePath=$STATE/spool/containers
EOF
    put_file "$STATE/gres.conf" 0644 <<EOF && CONF_CHANGED=1
# SIMULATED GPUs: two device nodes made for the test (minors 4 and 7) stand in for GPUs. Slurm
# allocates them like GPUs and sets SLURM_STEP_GPUS / CUDA_VISIBLE_DEVICES, but there is no GPU
# behind them.
Name=gpu File=$gpus
EOF
    return 0
}

# The installed Slurm's version, as "24.11.5" (from the package: sinfo -V wants a configuration).
slurm_version() { dpkg-query -W -f='${Version}' slurmd 2>/dev/null | sed 's/^[0-9]*://; s/-.*//'; }

# Succeeds when the installed Slurm is release $1 (e.g. 24.05) or newer.
slurm_at_least() {
    [[ $(printf '%s\n%s\n' "$1" "$(slurm_version)" | sort -V | head -n 1) == "$1" ]]
}

# Builds the release plugin (and, without a real GPU, the test fake NVML library) with cargo,
# unless GPU_TRACKER_PLUGIN names a plugin built elsewhere.
build_plugin() {
    [[ -n ${GPU_TRACKER_PLUGIN:-} ]] && return 0
    local cargo
    cargo=$(command -v cargo || echo "${CARGO_HOME:-$HOME/.cargo}/bin/cargo")
    [[ -x $cargo ]] || fail "cargo not found: install Rust (https://rustup.rs), or set GPU_TRACKER_PLUGIN"
    echo "building the plugin and gpu-tracker-report (cargo build --release --features spank) ..."
    (cd "$REPO" && "$cargo" build --release --locked --features spank --lib -p gpu-tracker &&
        "$cargo" build --release --locked --bin gpu-tracker-report &&
        { real_gpus || "$cargo" build --release --locked -p fake-nvml; }) >"$STATE/log/build.log" 2>&1
}

# Succeeds when this machine has NVIDIA GPUs and a driver: then the cluster offers those.
real_gpus() {
    compgen -G '/dev/nvidia[0-9]*' >/dev/null && ldconfig -p | grep -q 'libnvidia-ml\.so\.1'
}

# The settings the plugin reads (config= in plugstack.conf). GPUs: the real NVML where there is
# a driver, else the test fake with a scenario of two SIMULATED GPUs.
write_tracker_config() {
    local nvml=libnvidia-ml.so.1
    if ! real_gpus; then
        install -d -m 0755 "$STATE/lib/simulated-nvml"
        install -m 0644 "$REPO/target/release/libnvidia_ml.so" "$STATE/lib/simulated-nvml/libnvidia-ml.so.1.new"
        mv -f "$STATE/lib/simulated-nvml/libnvidia-ml.so.1.new" "$STATE/lib/simulated-nvml/libnvidia-ml.so.1"
        nvml=$STATE/lib/simulated-nvml/libnvidia-ml.so.1
        # SIMULATED: the fake reports a process's GPU memory when its command line holds the marker.
        # NVML index 0 is minor 7 (Slurm's index 1), index 1 is minor 4 (Slurm's index 0): names,
        # UUIDs and SIMGPU<i>_HOLD go by Slurm's index i.
        put_file "$STATE/simulated-gpus.json" 0644 <<'EOF2' || true
{
  "driver_version": "SIMULATED (gpu-tracker test fake, no GPU)",
  "devices": [
    {"uuid": "GPU-11111111-5151-4d55-8000-111111111111", "name": "SIMULATED GPU 1 (test fake)",
     "minor": 7, "memory_total": 17179869184, "memory_used_base": 268435456, "power_mw": 60000,
     "utilization": [{"at_ms": 0, "gpu": 0, "memory": 0}],
     "processes": [{"cmdline_contains": "SIMGPU1_HOLD", "used_memory": 2147483648}]},
    {"uuid": "GPU-00000000-5151-4d55-8000-000000000000", "name": "SIMULATED GPU 0 (test fake)",
     "minor": 4, "memory_total": 17179869184, "memory_used_base": 268435456, "power_mw": 60000,
     "utilization": [{"at_ms": 0, "gpu": 37, "memory": 12}],
     "processes": [{"cmdline_contains": "SIMGPU0_HOLD", "used_memory": 1073741824}]}
  ]
}
EOF2
    fi
    put_file "$TRACKER_CONF" 0644 <<EOF2 || true
# gpu-tracker settings of the local test cluster, written by slurm/local-cluster.sh ("up"
# rewrites it). The full list of keys, with their defaults: config/gpu-tracker.toml.
spool_dir = "$STATE/spool/gpu-tracker"
interval = 1.0
min_interval = 0.1
checkpoint_interval = 5.0
nvml_library = "$nvml"
EOF2
}

# PLUGIN HOOK: installs the SPANK plugin when it is built and points plugstack.conf at it;
# otherwise plugstack.conf stays empty (comments only). Sets STACK_CHANGED when slurmd must restart.
install_plugin() {
    local so=$STATE/lib/gpu_tracker.so line=""
    if [[ -f $PLUGIN_SRC ]]; then
        install -d -m 0755 "$STATE/lib"
        if ! cmp -s "$PLUGIN_SRC" "$so"; then
            # A new file, then a rename: running slurmstepds keep the old one mapped safely.
            install -o root -g root -m 0755 "$PLUGIN_SRC" "$so.new" && mv -f "$so.new" "$so"
            STACK_CHANGED=1
        fi
        write_tracker_config
        line="optional $so config=$TRACKER_CONF"
        echo "plugin installed: $so (from $PLUGIN_SRC)"
    else
        rm -f "$so"
        echo "plugin not built: tracking off"
    fi
    printf '# SPANK plugins, written by slurm/local-cluster.sh (install_plugin)\n%s' \
        "${line:+$line$'\n'}" | put_file "$STATE/plugstack.conf" 0644 && STACK_CHANGED=1
    return 0
}

# Succeeds when pid file $1 names a live process whose command is $2.
alive() {
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ && $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]]
}

# Stops the daemon of pid file $1 (command $2): SIGTERM, up to 20 s, then SIGKILL.
stop_daemon() {
    local i pid
    alive "$1" "$2" || { rm -f "$1"; return 0; }
    pid=$(cat "$1")
    kill "$pid"
    for ((i = 0; i < 40; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    rm -f "$1"
    echo "stopped $2 (pid $pid)"
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

# Starts slurmd for this node (if not running); it exits at once on a bad configuration.
start_slurmd() {
    alive "$STATE/run/slurmd.pid" slurmd && return 0
    # slurmstepd inherits slurmd's environment: the SIMULATED GPUs' scenario reaches the fake NVML.
    FAKE_NVML_SCENARIO=$STATE/simulated-gpus.json slurmd -f "$CONF" -N "$NODE"
    # It writes its pid file once it is set up: a second here, several under emulation.
    local i
    for ((i = 0; i < 120; i++)); do
        alive "$STATE/run/slurmd.pid" slurmd && return 0
        pgrep -x slurmd >/dev/null || ((i < 4)) || fail "slurmd exited"
        sleep 0.5
    done
    fail "slurmd wrote no pid file in 60 s"
}

# Waits up to 60 s until the node is idle (or busy with jobs); resumes it once if it is down.
wait_node() {
    local i st resumed=0
    for ((i = 0; i < 120; i++)); do
        st=$(sinfo -h -N -n "$NODE" -o %T 2>/dev/null || true)
        case $st in
        idle | mixed | allocated) echo "cluster up: node $NODE is $st (SLURM_CONF=$CONF)"; return 0 ;;
        down* | drain*)
            ((resumed)) || scontrol update NodeName="$NODE" State=RESUME || true
            resumed=1 ;;
        esac
        sleep 0.5
    done
    sinfo -R >&2 || true
    fail "node $NODE is '$st' after 60 s"
}

# Runs a command as user $1, in that user's job directory, against this cluster.
as_user() {
    local u=$1
    shift
    (cd "$STATE/jobs/$u" && runuser -u "$u" -- env SLURM_CONF="$CONF" "$@")
}

# Submits a batch job as user $1 (sbatch options follow), polls until it ends (sbatch --wait
# polls too slowly: up to 10 s), prints its output file; fails unless it completed.
batch_as() {
    local u=$1 id out st="" i
    shift
    id=$(as_user "$u" sbatch --parsable -o "$STATE/jobs/$u/job-%j.out" "$@")
    for ((i = 0; i < 600; i++)); do
        st=$(scontrol show job -o "$id" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        [[ $st =~ ^(PENDING|CONFIGURING|RUNNING|COMPLETING)$ ]] || break
        sleep 0.2
    done
    out=$STATE/jobs/$u/job-$id.out
    LAST_JOB=$id
    echo "batch job $id as $u ($st), output $out:"
    sed 's/^/  | /' "$out" || true
    [[ $st == COMPLETED ]] || fail "batch job $id ended $st"
}

# Checks that jobs run as the ordinary test user and that the simulated GPUs are handed out.
verify_jobs() {
    local u=${TEST_USERS[0]} got gpus
    step "srun as $u" "$STATE/log/slurmd.log" "$STATE/log/slurmctld.log"
    got=$(as_user "$u" timeout 60 srun -N1 -n1 id -u)
    echo "srun -N1 -n1 id -u as $u: $got"
    [[ $got == "$(id -u "$u")" ]] || fail "srun ran as uid '$got', not $u"
    step "sbatch as $u" "$STATE/log/slurmd.log" "$STATE/log/slurmctld.log"
    # shellcheck disable=SC2016  # expanded in the job, not here
    batch_as "$u" -J check --wrap 'echo "job $SLURM_JOB_ID on $(hostname) as $(id -un), cgroup: $(grep -m1 -E ":memory:|^0::" /proc/self/cgroup)"'
    step "simulated GPUs" "$STATE/log/slurmd.log" "$STATE/log/slurmctld.log"
    gpus=$(as_user "$u" timeout 60 srun --gres=gpu:1 env | grep -E 'SLURM_STEP_GPUS|CUDA_VISIBLE_DEVICES' | sort)
    echo "srun --gres=gpu:1 as $u: ${gpus//$'\n'/ }"
    [[ $gpus == *CUDA_VISIBLE_DEVICES=0* ]] || fail "no simulated GPU in the job's environment"
}

# up: installs, configures and starts the cluster, then checks that jobs run.
cmd_up() {
    local started=$SECONDS
    install -d -m 0755 "$STATE" "$STATE/log" "$STATE/run" "$STATE/jobs"
    install -d -m 0755 "$STATE/spool" "$STATE/spool/d" # batch scripts there run as the user
    install -d -m 0700 "$STATE/spool/ctld"
    step "install packages" "$STATE/log/apt.log"; install_packages
    step "munge key"; ensure_munge_key
    step "test users"; ensure_users
    step "write config"; write_config
    step "build plugin" "$STATE/log/build.log"; build_plugin
    step "plugin hook"; install_plugin
    step "start munged" /var/log/munge/munged.log; start_munge
    if ((CONF_CHANGED)); then
        stop_daemon "$STATE/run/slurmd.pid" slurmd
        stop_daemon "$STATE/run/slurmctld.pid" slurmctld
    elif ((STACK_CHANGED)); then
        stop_daemon "$STATE/run/slurmd.pid" slurmd # job_epilog is only seen at slurmd start
    fi
    step "start slurmctld" "$STATE/log/slurmctld.log"; start_slurmctld
    step "start slurmd" "$STATE/log/slurmd.log"; start_slurmd
    step "wait for node" "$STATE/log/slurmd.log" "$STATE/log/slurmctld.log"; wait_node
    verify_jobs
    STEP=""
    echo "up done in $((SECONDS - started)) s"
}

# down: cancels jobs, stops slurmd, slurmctld and the munged this script started.
cmd_down() {
    local i
    if alive "$STATE/run/slurmctld.pid" slurmctld; then
        squeue -h -o %A | xargs -r scancel || true
        for ((i = 0; i < 20; i++)); do [[ -z $(squeue -h 2>/dev/null) ]] && break; sleep 0.5; done
    fi
    stop_daemon "$STATE/run/slurmd.pid" slurmd
    stop_daemon "$STATE/run/slurmctld.pid" slurmctld
    stop_daemon "$STATE/run/munged.pid" munged
    echo "cluster down"
}

# status: says which daemons run and shows sinfo.
cmd_status() {
    local d
    for d in munged slurmctld slurmd; do
        if alive "$STATE/run/$d.pid" "$d"; then
            printf '%-10s running (pid %s)\n' "$d" "$(cat "$STATE/run/$d.pid")"
        elif [[ $d == munged ]] && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
            printf '%-10s running (not started by this script)\n' "$d"
        else
            printf '%-10s not running\n' "$d"
        fi
    done
    if alive "$STATE/run/slurmctld.pid" slurmctld; then sinfo; else echo "(no sinfo: slurmctld is down)"; fi
    if grep -q '^optional' "$STATE/plugstack.conf" 2>/dev/null; then echo "plugin: on"; else echo "plugin: off"; fi
}

# env: prints the exports for using the cluster by hand: eval "$(slurm/local-cluster.sh env)".
cmd_env() {
    printf 'export SLURM_CONF=%q\n' "$CONF"
    printf 'export GPU_TRACKER_CONFIG=%q\n' "$TRACKER_CONF"
    printf 'export GPU_TRACKER_CLUSTER_DIR=%q\n' "$STATE"
}

# demo: brings the cluster up and runs one tracked batch job as the test user: two srun steps,
# some memory, one SIMULATED GPU. Shows the job's output and the records the plugin wrote.
cmd_demo() {
    cmd_up
    step "demo job" "$STATE/log/slurmd.log"
    local f i
    # With SIMULATED GPUs, the fake NVML gives 1 GiB on GPU <i> to a process whose command line
    # holds SIMGPU<i>_HOLD: the python step is named so (built at run time, so that srun's own
    # command line does not hold the marker).
    # shellcheck disable=SC2016  # expanded in the job, not here
    batch_as "${TEST_USERS[0]}" -J demo --gpu-track=0.5 --gres=gpu:1 --mem=500M -n 2 \
        --wrap 'echo "GPUs: $SLURM_JOB_GPUS"; srun -n 2 sh -c "head -c 100000000 /dev/zero | sort >/dev/null"; srun -n 1 bash -c '\''m=SIMGPU${SLURM_STEP_GPUS:-0}; exec -a ${m}_HOLD python3 -c "import time; b = bytearray(200 << 20); time.sleep(2)"'\''; echo done'
    # The batch step appends the summary in its exit, just after the job is reported ended.
    for ((i = 0; i < 50; i++)); do
        tail -n 1 "$STATE/jobs/${TEST_USERS[0]}/job-$LAST_JOB.out" | grep -q '^=====' && break
        sleep 0.2
    done
    echo
    echo "the end of the job's output (the summary the plugin appended):"
    sed -n '/^=====/,$p' "$STATE/jobs/${TEST_USERS[0]}/job-$LAST_JOB.out"
    if [[ -x $REPO/target/release/gpu-tracker-report ]]; then
        install -d -m 0755 "$STATE/bin"
        install -m 0755 "$REPO/target/release/gpu-tracker-report" "$STATE/bin/gpu-tracker-report"
        echo
        echo "the job's user reads it again later: gpu-tracker-report $LAST_JOB --tasks"
        as_user "${TEST_USERS[0]}" env GPU_TRACKER_CONFIG="$TRACKER_CONF" \
            "$STATE/bin/gpu-tracker-report" "$LAST_JOB" --tasks || true
    fi
    echo
    echo "records (JSON, slurm/RECORD.md): $STATE/spool/gpu-tracker/gputrack/$LAST_JOB/ (<spool_dir>/<ClusterName>/<jobid>)"
    STEP=""
}

case ${1:-} in
up) need_root "$@"; cmd_up ;;
down) need_root "$@"; cmd_down ;;
demo) need_root "$@"; cmd_demo ;;
status) cmd_status ;;
env) cmd_env ;;
*) echo "usage: $0 up|down|status|env|demo" >&2; exit 2 ;;
esac
