# shellcheck shell=bash
# Part of slurm/local-cluster.sh (sourced by it; not run alone): what "up" installs and writes
# before any daemon starts: Debian's packages, the munge key, the test users, the port block,
# and slurm.conf, cgroup.conf, gres.conf with the simulated GPUs (NVIDIA's, MIG, AMD's).

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
    # The group that may read the running steps' live state (live_group), and the unprivileged
    # user the metrics exporter runs as in the tests, a member of it and of nothing else.
    getent group "$LIVE_GROUP" >/dev/null || groupadd --system "$LIVE_GROUP"
    id -u "$EXPORTER_USER" >/dev/null 2>&1 ||
        useradd --system --no-create-home --shell /usr/sbin/nologin -g "$LIVE_GROUP" "$EXPORTER_USER"
}

# Succeeds when nothing listens on TCP port $1 of 127.0.0.1.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The ports of a block that starts at $1: slurmctld $1, node i $1+i (i = 1..4), slurmdbd $1+5,
# MariaDB $1+6, the MIG node $1+7, the AMD node $1+8.
PORT_BLOCK=9
dbd_port() { echo $(($1 + 5)); }
db_port() { echo $(($1 + 6)); }
mig_port() { echo $(($1 + 7)); }
amd_port() { echo $(($1 + 8)); }

# Succeeds when every port of the block at $1 that this "up" uses is free, or is held by the
# daemon of ours that uses it (the block of an earlier "up" whose daemons still run).
ports_usable() {
    local c=$1 i
    alive "$STATE/run/slurmctld.pid" slurmctld || port_free "$c" || return 1
    for ((i = 1; i <= NODES; i++)); do
        alive "$(slurmd_pid "$(node_name "$i")")" slurmd || port_free $((c + i)) ||
            { ((i == 1)) && alive "$STATE/run/slurmd.pid" slurmd; } || return 1
    done
    local mig amd
    mig=$(mig_node) amd=$(amd_node)
    [[ -z $mig ]] || alive "$(slurmd_pid "$mig")" slurmd || port_free "$(mig_port "$c")" || return 1
    [[ -z $amd ]] || alive "$(slurmd_pid "$amd")" slurmd || port_free "$(amd_port "$c")" || return 1
    ((ACCOUNTING)) || return 0
    alive "$STATE/run/slurmdbd.pid" slurmdbd || port_free "$(dbd_port "$c")" || return 1
    alive "$DB_RUN/mariadbd.pid" mariadbd || port_free "$(db_port "$c")"
}

# Succeeds when every port of the block at $1 that this "up" uses is free.
ports_free() {
    local c=$1 i
    port_free "$c" || return 1
    for ((i = 1; i <= NODES; i++)); do port_free $((c + i)) || return 1; done
    [[ -z $(mig_node) ]] || port_free "$(mig_port "$c")" || return 1
    [[ -z $(amd_node) ]] || port_free "$(amd_port "$c")" || return 1
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
    for i in 0 1; do char_dev "$STATE/dev/simgpu$i" 195 "${minors[i]}"; done
    echo "$STATE/dev/simgpu[0-1]"
}

# Makes character device $1 (major $2, minor $3, root's, mode 0600) unless it is there as such.
char_dev() {
    [[ $(stat -c '%F %t:%T' "$1" 2>/dev/null) == "character special file $(printf '%x:%x' "$2" "$3")" ]] ||
        { rm -f "$1" && mknod -m 0600 "$1" c "$2" "$3"; }
}

# Makes the files of the SIMULATED MIG GPU as a real H100 in MIG mode has them: the parent GPU's
# device (simgpu2: major 195, minor 9) and, for each instance, the capability devices of its GPU
# instance and compute instance (nvidia-caps/nvidia-cap<minor>), whose minors the driver lists
# in /proc/driver/nvidia-caps/mig-minors; ours is <state>/nvidia-caps/mig-minors (the plugin's
# mig_minors_file). Instance 1 is GPU instance 1 / compute instance 0 (minors 12 and 13),
# instance 2 is 2 / 0 (21 and 22): the minors the driver gives those on GPU minor 9.
mig_files() {
    install -d -m 0755 "$STATE/dev/nvidia-caps" "$STATE/nvidia-caps"
    char_dev "$STATE/dev/simgpu2" 195 9
    local m
    for m in 12 13 21 22; do char_dev "$STATE/dev/nvidia-caps/nvidia-cap$m" 241 "$m"; done
    put_file "$STATE/nvidia-caps/mig-minors" 0644 <<EOF || true
config 1
monitor 2
gpu9/gi1/access 12
gpu9/gi1/ci0/access 13
gpu9/gi2/access 21
gpu9/gi2/ci0/access 22
EOF
}

# Makes the render nodes of the AMD node's two SIMULATED MI300X as the amdgpu driver has them
# (major 226 as DRM's, minors 128 and 129; no driver answers here) and prints them as gres.conf's
# File=, which is how AutoDetect=rsmi names AMD GPUs. tests/simamd.py gives the same minors to
# its GPUs (drm_render_minor in the KFD topology, sys/class/drm/renderD<minor>): the plugin maps
# Slurm's index -> file -> minor -> KFD node, as on a real AMD node.
amd_files() {
    install -d -m 0755 "$STATE/dev/dri"
    local m
    for m in 128 129; do char_dev "$STATE/dev/dri/renderD$m" 226 "$m"; done
    echo "$STATE/dev/dri/renderD[128-129]"
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
    # partition keeps the first node alone, "multi" has the numbered ones, "mig" the MIG node,
    # "amd" the AMD node.
    local i name nodes="" multi="" all=() mig amd amd_gpus=""
    local node_line="NodeHostname=$(hostname) NodeAddr=127.0.0.1 $topo RealMemory=$real"
    for ((i = 1; i <= NODES; i++)); do
        name=$(node_name "$i")
        all+=("$name")
        nodes+="NodeName=$name $node_line Port=$((ctld + i)) Gres=gpu:2 State=UNKNOWN"$'\n'
    done
    ((NODES == 1)) || multi="PartitionName=multi Nodes=$(IFS=,; echo "${all[*]}") Default=NO MaxTime=INFINITE State=UP"
    mig=$(mig_node)
    if [[ -n $mig ]]; then
        mig_files
        nodes+="NodeName=$mig $node_line Port=$(mig_port "$ctld") Gres=gpu:sim:1,gpu:1g.10gb:2,shard:4 State=UNKNOWN"$'\n'
        multi+=$'\n'"PartitionName=mig Nodes=$mig Default=NO MaxTime=INFINITE State=UP"
    fi
    amd=$(amd_node)
    if [[ -n $amd ]]; then
        amd_gpus=$(amd_files)
        nodes+="NodeName=$amd $node_line Port=$(amd_port "$ctld") Gres=gpu:mi300x:2 State=UNKNOWN"$'\n'
        multi+=$'\n'"PartitionName=amd Nodes=$amd Default=NO MaxTime=INFINITE State=UP"
    fi
    # Accounting: slurmdbd on this machine, and the hook that stores each job's summary there.
    local acct="AccountingStorageType=accounting_storage/none"
    if ((ACCOUNTING)); then
        acct="AccountingStorageType=accounting_storage/slurmdbd"$'\n'
        acct+="AccountingStorageHost=127.0.0.1"$'\n'
        acct+="AccountingStoragePort=$(dbd_port "$ctld")"$'\n'
        # GPUs as a TRES, as sites that count GPU-hours set it: sacct's AllocTRES then has
        # gres/gpu=N, from which job_defense_shield counts a job's GPUs.
        acct+="AccountingStorageTRES=gres/gpu"$'\n'
        acct+="EpilogSlurmctld=$STATE/bin/epilog-slurmctld"
        write_dbd_config "$ctld"
    fi
    # The end-of-job mail with the job's summary (up --mail), else Slurm's own default.
    ((MAIL == 0)) || acct+=$'\n'"MailProg=$STATE/bin/gpu-tracker-mail"
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
CliFilterPlugins=cli_filter/lua
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
GresTypes=gpu,shard
$contain
$container
${nodes}PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
$multi
EOF
    # On cgroup v2 slurmd asks systemd for its scope and gives up after SystemdTimeout (1 s by
    # default): an emulated guest busy with the other suites once took longer, and slurmd died.
    local systemd_timeout=""
    [[ $cgplugin == cgroup/v2 ]] && systemd_timeout="SystemdTimeout=30000"
    put_file "$STATE/cgroup.conf" 0644 <<EOF && CONF_CHANGED=1
CgroupPlugin=$cgplugin
ConstrainCores=yes
ConstrainRAMSpace=yes${systemd_timeout:+
$systemd_timeout}
EOF
    # The job container's private /tmp and /dev/shm (read only with contain_spank).
    put_file "$STATE/job_container.conf" 0644 <<EOF && CONF_CHANGED=1
AutoBasePath=true
BasePath=$STATE/spool/containers
EOF
    # The MIG node's lines and the AMD node's (a Name= line would apply to every node).
    local node_conf=""
    if [[ -n $mig ]]; then
        local caps=$STATE/dev/nvidia-caps/nvidia-cap
        node_conf="# The MIG node: a plain GPU (simgpu0) cut in 4 shards, and a SIMULATED MIG GPU (simgpu2,
# minor 9) with two 1g.10gb instances, each named by the parent's device and its GPU and compute
# instances' capability devices (MultipleFiles, as on a real node without AutoDetect).
NodeName=$mig Name=gpu Type=sim File=$STATE/dev/simgpu0
NodeName=$mig Name=gpu Type=1g.10gb MultipleFiles=$STATE/dev/simgpu2,${caps}12,${caps}13
NodeName=$mig Name=gpu Type=1g.10gb MultipleFiles=$STATE/dev/simgpu2,${caps}21,${caps}22
NodeName=$mig Name=shard Count=4 File=$STATE/dev/simgpu0"
    fi
    if [[ -n $amd ]]; then
        [[ -z $node_conf ]] || node_conf+=$'\n'
        node_conf+="# The AMD node: two SIMULATED AMD Instinct MI300X, named by their render nodes (minors 128
# and 129) as AutoDetect=rsmi names them; tests/simamd.py keeps their sysfs files under
# $AMD_ROOT (the plugin's amd_root).
NodeName=$amd Name=gpu Type=mi300x File=$amd_gpus"
    fi
    put_file "$STATE/gres.conf" 0644 <<EOF && CONF_CHANGED=1
# SIMULATED GPUs: two device nodes made for the test (minors 4 and 7) stand in for GPUs. Slurm
# allocates them like GPUs and sets SLURM_STEP_GPUS / CUDA_VISIBLE_DEVICES, but there is no GPU
# behind them. Every numbered node of this machine uses the same two files (and every node the
# same fake NVML).
NodeName=$(IFS=,; echo "${all[*]}") Name=gpu File=$gpus
$node_conf
EOF
    return 0
}
