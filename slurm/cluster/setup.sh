# shellcheck shell=bash
# Part of slurm/local-cluster.sh (sourced by it; not run alone): what "up" installs and writes
# before any daemon starts: Debian's packages, the munge key, the test users, the port block,
# and slurm.conf, cgroup.conf, gres.conf with the simulated GPUs.

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
