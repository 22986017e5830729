#!/usr/bin/env bash
# A real Slurm cluster on this one machine (Debian's Slurm 22.05 packages) for the quick start and
# the end-to-end tests. Daemons run directly (no systemd); everything lives in one state directory.
#
#   slurm/local-cluster.sh up [OPTIONS]     install, configure, start, check jobs run as a plain user
#   slurm/local-cluster.sh down             stop every daemon this script started
#   slurm/local-cluster.sh status           which daemons run, and sinfo
#   slurm/local-cluster.sh env              shell exports for using the cluster by hand
#   slurm/local-cluster.sh demo [OPTIONS]   up, then one small batch job as the test user
#   slurm/local-cluster.sh on-node NODE -- CMD...
#                                           CMD as root as NODE sees files (its node-local spool)
#
# Plain "up": one node named after this machine (hostname -s), the only node of the default
# partition "debug". OPTIONS:
#   --nodes N            N slurmd (1-4) on this machine: the first as above, then <name>-2 ...
#                        <name>-N; partition "multi" (not the default) holds all N
#   --node-local-spool   the last node (N >= 2) keeps the plugin's records on its own "disk": its
#                        slurmd runs in a mount namespace where a private directory is mounted
#                        over spool_dir, out of sight of this machine and of slurmctld (on-node)
#   --accounting         MariaDB and slurmdbd (Debian's packages), accounting_storage/slurmdbd,
#                        the test users in an account, and EpilogSlurmctld=<state>/bin/epilog-slurmctld
#                        (slurm/epilog-slurmctld: the summary stored in Slurm's database)
#
# Environment: GPU_TRACKER_CLUSTER_DIR (state directory, default /var/tmp/gpu-tracker-cluster),
# GPU_TRACKER_PLUGIN (a SPANK plugin to install instead of building <repo>/target/release/libgpu_tracker.so),
# GPU_TRACKER_REPORT_BIN (the gpu-tracker-report installed into <state>/bin, default
# <repo>/target/release/gpu-tracker-report when built), GPU_TRACKER_BIN (likewise gpu-tracker),
# GPU_TRACKER_SLURM_PORT (first port tried for slurmctld; default 16817; the nodes get the next
# four, slurmdbd the one after and MariaDB the next: a block of 8, moved on by 8 while taken),
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
# The account the test users are in with --accounting.
TEST_ACCOUNT=gputest
# What "up" was asked for (parse_options).
NODES=1 NODE_LOCAL=0 ACCOUNTING=0
# slurmdbd's database: a MariaDB of our own (data, socket and port in the state directory).
DB_CNF=$STATE/mariadb.cnf
DB_RUN=$STATE/run/mysqld
DBD_CONF=$STATE/slurmdbd.conf
# Slurm, and what building the plugin needs (Slurm's headers, libclang for bindgen, a C linker)
# unless GPU_TRACKER_PLUGIN names a plugin built elsewhere (the test guests of slurm/vm.sh).
# fonts-dejavu-core: the font of gpu-tracker-report --plot (the demo draws its job).
PACKAGES=(slurmctld slurmd slurm-client munge fonts-dejavu-core)
[[ -n ${GPU_TRACKER_PLUGIN:-} ]] || PACKAGES+=(libslurm-dev libclang-dev gcc libc6-dev)
export SLURM_CONF=$CONF PATH=$PATH:/usr/sbin:/sbin

STEP="" STEP_LOGS=() CONF_CHANGED=0 STACK_CHANGED=0 DB_CHANGED=0 DBD_CHANGED=0 CLUSTER_ADDED=0

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
        GPU_TRACKER_SLURM_PORT="${GPU_TRACKER_SLURM_PORT:-16817}" \
        ${GPU_TRACKER_REPORT_BIN:+GPU_TRACKER_REPORT_BIN="$GPU_TRACKER_REPORT_BIN"} bash "$SCRIPT" "$@"
}

# Reads up's and demo's options into NODES, NODE_LOCAL and ACCOUNTING.
parse_options() {
    while (($# > 0)); do
        case $1 in
        --nodes)
            [[ ${2:-} =~ ^[1-4]$ ]] || fail "--nodes takes a number from 1 to 4, not '${2:-}'"
            NODES=$2
            shift ;;
        --nodes=*)
            [[ ${1#--nodes=} =~ ^[1-4]$ ]] || fail "--nodes takes a number from 1 to 4, not '${1#--nodes=}'"
            NODES=${1#--nodes=} ;;
        --node-local-spool) NODE_LOCAL=1 ;;
        --accounting) ACCOUNTING=1 ;;
        *) fail "unknown option '$1' (up|demo [--nodes N] [--node-local-spool] [--accounting])" ;;
        esac
        shift
    done
    ((NODE_LOCAL == 0 || NODES >= 2)) || fail "--node-local-spool needs --nodes 2 or more (the first node keeps the shared spool)"
    ((ACCOUNTING == 0)) || PACKAGES+=(mariadb-server slurmdbd)
    return 0
}

# The name of node $1 (1-based): this machine's short name, then <name>-2, <name>-3, ...
node_name() { if (($1 == 1)); then echo "$NODE"; else echo "$NODE-$1"; fi; }

# The names of the nodes "up" brings up, one a line.
node_names() {
    local i
    for ((i = 1; i <= NODES; i++)); do node_name "$i"; done
}

# Succeeds when node $1 is the one whose records stay on its own "disk".
node_is_local() { ((NODE_LOCAL)) && [[ $1 == "$(node_name "$NODES")" ]]; }

# slurmd's pid file and log of node $1 (slurm.conf names them with %n).
slurmd_pid() { echo "$STATE/run/slurmd-$1.pid"; }
slurmd_log() { echo "$STATE/log/slurmd-$1.log"; }

# The pid files of every slurmd this script may have started: all nodes of any earlier "up",
# and slurmd.pid of the layout before there were several nodes.
slurmd_pid_files() {
    local f
    for f in "$STATE"/run/slurmd-*.pid "$STATE/run/slurmd.pid"; do
        [[ -e $f ]] && echo "$f"
    done
    return 0
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

# The ports of a block that starts at $1: slurmctld $1, node i $1+i (i = 1..4), slurmdbd $1+5,
# MariaDB $1+6 ($1+7 is left free).
PORT_BLOCK=8
dbd_port() { echo $(($1 + 5)); }
db_port() { echo $(($1 + 6)); }

# Succeeds when every port of the block at $1 that this "up" uses is free, or is held by the
# daemon of ours that uses it (the block of an earlier "up" whose daemons still run).
ports_usable() {
    local c=$1 i
    alive "$STATE/run/slurmctld.pid" slurmctld || port_free "$c" || return 1
    for ((i = 1; i <= NODES; i++)); do
        alive "$(slurmd_pid "$(node_name "$i")")" slurmd || port_free $((c + i)) ||
            { ((i == 1)) && alive "$STATE/run/slurmd.pid" slurmd; } || return 1
    done
    ((ACCOUNTING)) || return 0
    alive "$STATE/run/slurmdbd.pid" slurmdbd || port_free "$(dbd_port "$c")" || return 1
    alive "$DB_RUN/mariadbd.pid" mariadbd || port_free "$(db_port "$c")"
}

# Succeeds when every port of the block at $1 that this "up" uses is free.
ports_free() {
    local c=$1 i
    port_free "$c" || return 1
    for ((i = 1; i <= NODES; i++)); do port_free $((c + i)) || return 1; done
    ((ACCOUNTING)) || return 0
    port_free "$(dbd_port "$c")" && port_free "$(db_port "$c")"
}

# Prints the first port of the block: slurm.conf's while it is usable, else the first free block
# from GPU_TRACKER_SLURM_PORT on.
pick_ports() {
    local p=${GPU_TRACKER_SLURM_PORT:-16817} c=""
    [[ -r $CONF ]] && c=$(sed -n 's/^SlurmctldPort=//p' "$CONF")
    if [[ $c =~ ^[0-9]+$ ]] && ports_usable "$c"; then
        echo "$c"
        return 0
    fi
    until ports_free "$p"; do p=$((p + PORT_BLOCK)); done
    echo "$p"
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

# Writes slurm.conf, cgroup.conf and gres.conf from this machine's CPUs and memory (every node
# declares them all: the nodes share this machine's CPUs and memory), and slurmdbd.conf with
# --accounting.
write_config() {
    local hw topo mem real defmem ctld cpus gpus
    hw=$(env -u SLURM_CONF slurmd -C | sed -n '1p')
    topo=$(sed 's/^NodeName=[^ ]* //; s/ RealMemory=.*//' <<<"$hw")
    mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
    cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
    real=$((mem * 95 / 100)) defmem=$((real / cpus < 1024 ? real / cpus : 1024))
    ctld=$(pick_ports)
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
    # The nodes: all on this machine (NodeHostname), each slurmd on its own port; the default
    # partition keeps the first node alone, "multi" has them all.
    local i name nodes="" multi="" all=()
    for ((i = 1; i <= NODES; i++)); do
        name=$(node_name "$i")
        all+=("$name")
        nodes+="NodeName=$name NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((ctld + i)) $topo RealMemory=$real Gres=gpu:2 State=UNKNOWN"$'\n'
    done
    ((NODES == 1)) || multi="PartitionName=multi Nodes=$(IFS=,; echo "${all[*]}") Default=NO MaxTime=INFINITE State=UP"
    # Accounting: slurmdbd on this machine, and the hook that stores each job's summary there.
    local acct="AccountingStorageType=accounting_storage/none"
    if ((ACCOUNTING)); then
        acct="AccountingStorageType=accounting_storage/slurmdbd"$'\n'
        acct+="AccountingStorageHost=127.0.0.1"$'\n'
        acct+="AccountingStoragePort=$(dbd_port "$ctld")"$'\n'
        acct+="EpilogSlurmctld=$STATE/bin/epilog-slurmctld"
        write_dbd_config "$ctld"
    fi
    put_file "$CONF" 0644 <<EOF && CONF_CHANGED=1
# Written by slurm/local-cluster.sh; edits are overwritten by the next "up".
ClusterName=gputrack
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=$ctld
SlurmdPort=$((ctld + 1))
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
PlugStackConfig=$STATE/plugstack.conf
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
JobAcctGatherType=jobacct_gather/cgroup
$acct
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
${nodes}PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
$multi
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
# behind them. Every node of this machine uses the same two files (and the same fake NVML).
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
        "$cargo" build --release --locked --bin gpu-tracker-report --bin gpu-tracker &&
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

# Copies file $1 to $2 (root's, mode $3) unless it is there already: a new file, then a rename.
install_copy() {
    cmp -s "$1" "$2" && return 0
    install -o root -g root -m "$3" "$1" "$2.new" && mv -f "$2.new" "$2"
}

# Installs into <state>/bin: gpu-tracker-report when it is built (or GPU_TRACKER_REPORT_BIN
# names one), slurm/epilog-slurmctld, and epilog-slurmctld, the wrapper EpilogSlurmctld names
# (slurmctld gives the script none of our settings: the wrapper sets them).
install_tools() {
    local report=${GPU_TRACKER_REPORT_BIN:-$REPO/target/release/gpu-tracker-report}
    install -d -m 0755 "$STATE/bin" "$STATE/lib"
    if [[ -f $report ]]; then
        install_copy "$report" "$STATE/bin/gpu-tracker-report" 0755
    else
        echo "gpu-tracker-report not built ($report): not installed"
    fi
    # gpu-tracker, for `gpu-tracker mark NAME` in jobs.
    local tracker=${GPU_TRACKER_BIN:-$REPO/target/release/gpu-tracker}
    if [[ -f $tracker ]]; then
        install_copy "$tracker" "$STATE/bin/gpu-tracker" 0755
    fi
    install_copy "$REPO/slurm/epilog-slurmctld" "$STATE/lib/epilog-slurmctld" 0755
    put_file "$STATE/bin/epilog-slurmctld" 0755 <<EOF || true
#!/bin/sh
# Written by slurm/local-cluster.sh: EpilogSlurmctld of the local cluster (up --accounting).
# slurmctld runs it with the job's variables only; our settings come from here.
export SLURM_CONF='$CONF'
export GPU_TRACKER_CONFIG='$TRACKER_CONF'
export GPU_TRACKER_REPORT='$STATE/bin/gpu-tracker-report'
exec '$STATE/lib/epilog-slurmctld' "\$@"
EOF
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
        if [[ $f == */slurmd.pid ]] || ! node_names | grep -qxF -- "$name"; then
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
    for name in $(node_names); do
        step "start slurmd of $name" "$(slurmd_log "$name")"
        start_slurmd "$name"
    done
}

# Writes slurmdbd.conf for the port block at $1 (owned by SlurmUser, root; mode 0600: it holds
# the database password, made once and kept). Sets DBD_CHANGED when it changed.
write_dbd_config() {
    local pass=""
    [[ -r $DBD_CONF ]] && pass=$(sed -n 's/^StoragePass=//p' "$DBD_CONF")
    [[ -n $pass ]] || pass=$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
    put_file "$DBD_CONF" 0600 <<EOF && DBD_CHANGED=1
# Written by slurm/local-cluster.sh up --accounting; edits are overwritten by the next one.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$(dbd_port "$1")
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$(db_port "$1")
StorageUser=slurm
StoragePass=$pass
StorageLoc=slurm_acct_db
# Each user sees only their own jobs in sacct (what keeps a stored summary to its job's user).
PrivateData=jobs
EOF
    # MariaDB's own settings: its data, socket and pid file in the state directory, TCP on
    # 127.0.0.1 only, and the lock wait slurmdbd asks for (it warns below 900 s).
    put_file "$DB_CNF" 0644 <<EOF && DB_CHANGED=1
# Written by slurm/local-cluster.sh up --accounting: the MariaDB of slurmdbd.
[mysqld]
user = mysql
datadir = $STATE/mysql
socket = $DB_RUN/mysqld.sock
pid-file = $DB_RUN/mariadbd.pid
log-error = $STATE/log/mariadb.log
bind-address = 127.0.0.1
port = $(db_port "$1")
skip-name-resolve
innodb_buffer_pool_size = 128M
innodb_lock_wait_timeout = 900
[client]
socket = $DB_RUN/mysqld.sock
EOF
    return 0
}

# Runs the MariaDB client as root (unix socket authentication) on slurmdbd's database server.
db_sql() { mariadb --defaults-file="$DB_CNF" -u root "$@"; }

# Starts the MariaDB of slurmdbd (if not running; restarted when its settings changed), creating
# its data directory the first time, and gives slurmdbd's database user its password and rights.
start_mariadb() {
    local i pass
    ((DB_CHANGED)) && stop_daemon "$DB_RUN/mariadbd.pid" mariadbd
    if ! alive "$DB_RUN/mariadbd.pid" mariadbd; then
        install -d -o mysql -g mysql -m 0755 "$DB_RUN"
        install -d -o mysql -g mysql -m 0700 "$STATE/mysql"
        if [[ ! -d $STATE/mysql/mysql ]]; then
            echo "creating slurmdbd's MariaDB data directory ($STATE/mysql) ..."
            mariadb-install-db --defaults-file="$DB_CNF" --user=mysql >"$STATE/log/mariadb-install.log" 2>&1 ||
                fail "mariadb-install-db failed (log: $STATE/log/mariadb-install.log)"
        fi
        # Detached from this shell; it writes its own pid file.
        setsid mariadbd --defaults-file="$DB_CNF" </dev/null >>"$STATE/log/mariadb.log" 2>&1 &
    fi
    for ((i = 0; i < 240; i++)); do
        db_sql -e 'SELECT 1' >/dev/null 2>&1 && break
        ((i < 8)) || pgrep -xf "mariadbd --defaults-file=$DB_CNF" >/dev/null || fail "mariadbd exited"
        sleep 0.5
    done
    ((i < 240)) || fail "MariaDB does not answer in 120 s"
    pass=$(sed -n 's/^StoragePass=//p' "$DBD_CONF")
    # slurmdbd connects over TCP to 127.0.0.1 (skip-name-resolve: the host is the address). The
    # database is made here: slurmdbd 24.11 with MariaDB 11.8 (Debian 13) makes it itself but
    # then dies on its first query ("Number of columns in result (=1) set exceeds maximum
    # allowed number of columns (=0)"), on the connection it opened before creating it.
    db_sql <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF
}

# Starts slurmdbd (if not running; restarted when slurmdbd.conf changed) and waits until it
# answers sacctmgr. It reads slurmdbd.conf from SLURM_CONF's directory.
start_slurmdbd() {
    local i
    ((DBD_CHANGED)) && stop_daemon "$STATE/run/slurmdbd.pid" slurmdbd
    alive "$STATE/run/slurmdbd.pid" slurmdbd || slurmdbd
    # The first start creates the tables: seconds here, longer under emulation.
    for ((i = 0; i < 360; i++)); do
        sacctmgr -n -P list cluster format=cluster >/dev/null 2>&1 && return 0
        alive "$STATE/run/slurmdbd.pid" slurmdbd || ((i < 10)) || fail "slurmdbd exited"
        sleep 0.5
    done
    fail "slurmdbd does not answer in 180 s"
}

# Puts the cluster, the test account and the test users into slurmdbd (what is missing only).
# Sets CLUSTER_ADDED when the cluster was new: a running slurmctld must restart to register.
register_accounting() {
    local u
    if ! sacctmgr -n -P list cluster format=cluster | grep -qxF gputrack; then
        sacctmgr -i add cluster gputrack >/dev/null
        CLUSTER_ADDED=1
    fi
    sacctmgr -n -P list account "$TEST_ACCOUNT" format=account | grep -qxF "$TEST_ACCOUNT" ||
        sacctmgr -i add account "$TEST_ACCOUNT" Cluster=gputrack \
            Description="gpu-tracker test users" Organization=gpu-tracker >/dev/null
    for u in "${TEST_USERS[@]}"; do
        sacctmgr -n -P list association where cluster=gputrack account="$TEST_ACCOUNT" user="$u" format=user |
            grep -qxF "$u" ||
            sacctmgr -i add user "$u" Account="$TEST_ACCOUNT" Cluster=gputrack >/dev/null
    done
    echo "accounting: slurmdbd on port $(sed -n 's/^DbdPort=//p' "$DBD_CONF"), users ${TEST_USERS[*]} in account $TEST_ACCOUNT"
}

# Stops the slurmdbd and the MariaDB this script started.
stop_accounting() {
    stop_daemon "$STATE/run/slurmdbd.pid" slurmdbd
    stop_daemon "$DB_RUN/mariadbd.pid" mariadbd
}

# Waits up to 60 s until every node is idle (or busy with jobs); resumes a node once if it is down.
wait_node() {
    local i name st waiting up resumed=" "
    for ((i = 0; i < 120; i++)); do
        waiting="" up=""
        for name in $(node_names); do
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
# node's records stay on it); with accounting, that slurmdbd has the check job.
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
    step "simulated GPUs" "${logs[@]}"
    gpus=$(as_user "$u" timeout 60 srun --gres=gpu:1 env | grep -E 'SLURM_STEP_GPUS|CUDA_VISIBLE_DEVICES' | sort)
    echo "srun --gres=gpu:1 as $u: ${gpus//$'\n'/ }"
    [[ $gpus == *CUDA_VISIBLE_DEVICES=0* ]] || fail "no simulated GPU in the job's environment"
    ((NODES == 1)) || verify_nodes
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

# up: installs, configures and starts the cluster, then checks that jobs run.
cmd_up() {
    local started=$SECONDS slurmd_logs name
    for name in $(node_names); do slurmd_logs+=" $(slurmd_log "$name")"; done
    install -d -m 0755 "$STATE" "$STATE/log" "$STATE/run" "$STATE/jobs"
    install -d -m 0755 "$STATE/spool" "$STATE/spool/d" # batch scripts there run as the user
    install -d -m 0700 "$STATE/spool/ctld"
    step "install packages" "$STATE/log/apt.log"; install_packages
    step "munge key"; ensure_munge_key
    step "test users"; ensure_users
    step "write config"; write_config
    step "build plugin" "$STATE/log/build.log"; build_plugin
    step "plugin hook"; install_plugin
    step "install tools"; install_tools
    step "start munged" /var/log/munge/munged.log; start_munge
    step "stop what changed"
    stop_other_slurmd
    if ((CONF_CHANGED)); then
        stop_all_slurmd
        stop_daemon "$STATE/run/slurmctld.pid" slurmctld
    elif ((STACK_CHANGED)); then
        stop_all_slurmd # job_epilog is only seen at slurmd start
    fi
    if ((ACCOUNTING)); then
        step "start MariaDB" "$STATE/log/mariadb.log"; start_mariadb
        step "start slurmdbd" "$STATE/log/slurmdbd.log"; start_slurmdbd
        step "register in slurmdbd" "$STATE/log/slurmdbd.log"; register_accounting
        if ((CLUSTER_ADDED)); then
            # slurmctld registers at its start. Slurm 24.11 and later also keep the cluster's id
            # in the state directory (one it made up while there was no slurmdbd) and refuse to
            # start when slurmdbd gives the new cluster another one: forget the old id.
            stop_daemon "$STATE/run/slurmctld.pid" slurmctld
            rm -f "$STATE/spool/ctld/clustername"
        fi
    else
        stop_accounting
    fi
    step "start slurmctld" "$STATE/log/slurmctld.log"; start_slurmctld
    # shellcheck disable=SC2086  # a word list
    step "start slurmd" $slurmd_logs; start_all_slurmd
    # shellcheck disable=SC2086
    step "wait for nodes" $slurmd_logs "$STATE/log/slurmctld.log"; wait_node
    verify_jobs
    STEP=""
    echo "up done in $((SECONDS - started)) s"
}

# down: cancels jobs, stops every slurmd, slurmctld, slurmdbd, MariaDB and the munged this
# script started.
cmd_down() {
    local i
    if alive "$STATE/run/slurmctld.pid" slurmctld; then
        squeue -h -o %A | xargs -r scancel || true
        for ((i = 0; i < 20; i++)); do [[ -z $(squeue -h 2>/dev/null) ]] && break; sleep 0.5; done
    fi
    stop_all_slurmd
    stop_daemon "$STATE/run/slurmctld.pid" slurmctld
    stop_accounting
    stop_daemon "$STATE/run/munged.pid" munged
    echo "cluster down"
}

# status: says which daemons run (every slurmd, the node-local one marked) and shows sinfo.
cmd_status() {
    local d f name pid
    for d in munged slurmctld slurmdbd mariadbd; do
        f=$STATE/run/$d.pid
        [[ $d == mariadbd ]] && f=$DB_RUN/mariadbd.pid
        if alive "$f" "$d"; then
            printf '%-10s running (pid %s)\n' "$d" "$(cat "$f")"
        elif [[ $d == munged ]] && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
            printf '%-10s running (not started by this script)\n' "$d"
        elif [[ $d == munged || $d == slurmctld ]] || grep -q '^AccountingStorageType=accounting_storage/slurmdbd' "$CONF" 2>/dev/null; then
            printf '%-10s not running\n' "$d"
        fi
    done
    # The nodes of slurm.conf, and any slurmd of an earlier layout still running.
    alive "$STATE/run/slurmd.pid" slurmd &&
        printf '%-10s running (pid %s) of the one-node layout before this version\n' slurmd "$(cat "$STATE/run/slurmd.pid")"
    for name in $( { sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$CONF" 2>/dev/null
        slurmd_pid_files | sed -n 's|.*/slurmd-\(.*\)\.pid$|\1|p'; } | awk '!seen[$0]++'); do
        f=$(slurmd_pid "$name")
        if alive "$f" slurmd; then
            pid=$(cat "$f")
            printf '%-10s running (pid %s) node %s%s\n' slurmd "$pid" "$name" \
                "$(own_mounts "$pid" && echo ", node-local spool (on-node $name -- ...)")"
        else
            printf '%-10s not running   node %s\n' slurmd "$name"
        fi
    done
    if alive "$STATE/run/slurmctld.pid" slurmctld; then sinfo; else echo "(no sinfo: slurmctld is down)"; fi
    if grep -q '^optional' "$STATE/plugstack.conf" 2>/dev/null; then echo "plugin: on"; else echo "plugin: off"; fi
}

# on-node NODE -- CMD...: runs CMD as root with NODE's view of the files: in the mount namespace
# of its slurmd (the node-local spool), or here for a node that has none of its own.
cmd_on_node() {
    local name=${1:-} f pid
    shift || true
    [[ ${1:-} == -- ]] && shift
    if [[ -z $name ]] || (($# == 0)); then fail "usage: $0 on-node NODE -- CMD..."; fi
    f=$(slurmd_pid "$name")
    alive "$f" slurmd || fail "no slurmd of node '$name' runs (slurm/local-cluster.sh status)"
    pid=$(cat "$f")
    if own_mounts "$pid"; then exec nsenter -t "$pid" -m -- "$@"; fi
    exec "$@"
}

# restart-slurmd NODE: stops the slurmd of NODE (SIGTERM, as systemd does) and starts it again;
# the slurmstepd of running steps outlive it, as on a node whose slurmd is restarted by hand.
cmd_restart_slurmd() {
    local name=${1:-} pidf
    [[ -n $name ]] || fail "usage: $0 restart-slurmd NODE"
    pidf=$(slurmd_pid "$name")
    alive "$pidf" slurmd || fail "no slurmd of node '$name' runs (slurm/local-cluster.sh status)"
    # Started again the way it was: in a mount namespace of its own when it had one (the node
    # with a node-local spool is the last of the nodes).
    if own_mounts "$(cat "$pidf")"; then NODE_LOCAL=1 NODES=${name##*-}; fi
    stop_daemon "$pidf" slurmd
    start_slurmd "$name"
    echo "started slurmd of $name (pid $(cat "$(slurmd_pid "$name")"))"
}

# env: prints the exports for using the cluster by hand: eval "$(slurm/local-cluster.sh env)".
# No GPU_TRACKER_CONFIG: as on a site's login node, gpu-tracker-report finds the settings
# through SLURM_CONF (its PlugStackConfig, the plugin's line there and its config=).
cmd_env() {
    printf 'export SLURM_CONF=%q\n' "$CONF"
    printf 'export GPU_TRACKER_CLUSTER_DIR=%q\n' "$STATE"
}

# demo: brings the cluster up and runs one tracked batch job as the test user, in three phases
# marked with `gpu-tracker mark`: two srun steps, some memory, one SIMULATED GPU. Shows the job's
# output, the records the plugin wrote, and draws the job over time.
cmd_demo() {
    cmd_up
    step "demo job" "$(slurmd_log "$NODE")"
    local u=${TEST_USERS[0]} gt=$STATE/bin/gpu-tracker
    # With SIMULATED GPUs, the fake NVML gives 1 GiB on GPU <i> to a process whose command line
    # holds SIMGPU<i>_HOLD: the python step is named so (built at run time, so that srun's own
    # command line does not hold the marker).
    # The summary at the end of the output is what the plugin appended.
    batch_as --summary "$u" -J demo --gpu-track=0.5 --gres=gpu:1 --mem=500M -n 2 \
        --wrap "echo \"GPUs: \$SLURM_JOB_GPUS\"; $gt mark prepare; srun -n 2 sh -c 'head -c 100000000 /dev/zero | sort >/dev/null'; $gt mark compute; srun -n 1 bash -c 'm=SIMGPU\${SLURM_STEP_GPUS:-0}; exec -a \${m}_HOLD python3 -c \"import time; b = bytearray(300 << 20); time.sleep(3)\"'; $gt mark finish; sleep 2; echo done"
    if [[ -x $STATE/bin/gpu-tracker-report ]]; then
        echo
        echo "the job's user reads it again later: gpu-tracker-report $LAST_JOB --tasks"
        # As a user on a login node: SLURM_CONF only (as_user), the settings found from there.
        as_user "$u" "$STATE/bin/gpu-tracker-report" "$LAST_JOB" --tasks || true
        echo
        echo "and draws it: gpu-tracker-report $LAST_JOB --plot $STATE/jobs/$u/demo-$LAST_JOB.png"
        as_user "$u" "$STATE/bin/gpu-tracker-report" "$LAST_JOB" --plot "$STATE/jobs/$u/demo-$LAST_JOB.png" ||
            true
    fi
    echo
    echo "records (JSON, slurm/RECORD.md): $STATE/spool/gpu-tracker/gputrack/$LAST_JOB/ (<spool_dir>/<ClusterName>/<jobid>)"
    STEP=""
}

usage="usage: $0 up|demo [--nodes N] [--node-local-spool] [--accounting] | down | status | env | on-node NODE -- CMD... | restart-slurmd NODE"
cmd=${1:-}
shift || true
case $cmd in
up) need_root "$cmd" "$@"; parse_options "$@"; cmd_up ;;
demo) need_root "$cmd" "$@"; parse_options "$@"; cmd_demo ;;
down) need_root "$cmd" "$@"; cmd_down ;;
on-node) need_root "$cmd" "$@"; cmd_on_node "$@" ;;
restart-slurmd) need_root "$cmd" "$@"; cmd_restart_slurmd "$@" ;;
status) cmd_status ;;
env) cmd_env ;;
*) echo "$usage" >&2; exit 2 ;;
esac
