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
#                        <name>-N; partition "multi" (not the default) holds all N. With N >= 2,
#                        one more node, <name>-mig, alone in partition "mig" (not the default):
#                        a SIMULATED MIG GPU with two 1g.10gb instances, and a GPU cut in 4 shards;
#                        and <name>-amd, alone in partition "amd" (not the default): two SIMULATED
#                        AMD Instinct MI300X (gpu:mi300x:2, render nodes <state>/dev/dri/renderD128
#                        and 129), whose sysfs files tests/simamd.py keeps under <state>/amd-root
#   --node-local-spool   the last node (N >= 2) keeps the plugin's records on its own "disk": its
#                        slurmd runs in a mount namespace where a private directory is mounted
#                        over spool_dir, out of sight of this machine and of slurmctld (on-node)
#   --accounting         MariaDB and slurmdbd (Debian's packages), accounting_storage/slurmdbd
#                        with GPUs as a TRES, the test users in an account, and
#                        EpilogSlurmctld=<state>/bin/epilog-slurmctld
#                        (slurm/epilog-slurmctld: the summary stored in Slurm's database)
#   --mail               MailProg=<state>/bin/gpu-tracker-mail (the job's summary in Slurm's
#                        end-of-job mail, docs/MAIL.md) and Debian's exim4, local delivery only,
#                        to /var/mail/USER (slurm/cluster/mail.sh)
#   --quick-check        after the daemons start, one srun and one batch job as the test user,
#                        and the job in the database (with --accounting); not the GPUs, every
#                        node, MIG and AMD that "up" otherwise checks (the test suite checks
#                        them; in an emulated guest the full check took 5 minutes)
#
# Environment: GPU_TRACKER_CLUSTER_DIR (state directory, default /var/tmp/gpu-tracker-cluster),
# GPU_TRACKER_PLUGIN (a SPANK plugin to install instead of building <repo>/target/release/libgpu_tracker.so),
# GPU_TRACKER_REPORT_BIN (the gpu-tracker-report installed into <state>/bin, default
# <repo>/target/release/gpu-tracker-report when built), GPU_TRACKER_BIN (likewise gpu-tracker),
# GPU_TRACKER_SLURM_PORT (first port tried for slurmctld; default 16817; the nodes get the next
# four, slurmdbd the one after, MariaDB, the MIG node and the AMD node the next three: a block of
# 9, moved on by 9 while taken),
# GPU_TRACKER_CONTAIN_SPANK=1 (Slurm 24.05+: SlurmdParameters=contain_spank, with the job
# container plugin that it exists for, so the task callbacks run in the job's namespace),
# GPU_TRACKER_FROM_PACKAGES=1 (the Debian packages are installed, apt install ./*.deb: slurmd
# loads the plugin where the package put it, through the package's plugstack.conf.d file, which
# plugstack.conf includes as Debian's own does; the file's config= is pointed at the cluster's
# settings, as an admin edits a conffile; the programs are the package's, in /usr/bin; nothing is
# built. The test guests of slurm/vm.sh run their suites so).
#
# Works on Slurm 22.05 (Debian 12, cgroup v1) and, inside the test guests of slurm/vm.sh, on
# Slurm 24.11 and 26.05 with cgroup v2: the cgroup plugin follows /sys/fs/cgroup.
set -euo pipefail

SCRIPT=$(readlink -f "${BASH_SOURCE[0]}")
REPO=$(dirname "$(dirname "$SCRIPT")")
STATE=${GPU_TRACKER_CLUSTER_DIR:-/var/tmp/gpu-tracker-cluster}
PLUGIN_SRC=${GPU_TRACKER_PLUGIN:-$REPO/target/release/libgpu_tracker.so}
FROM_PACKAGES=${GPU_TRACKER_FROM_PACKAGES:-0}
# The Debian plugin package's plugstack.conf.d file (debian/rules), with FROM_PACKAGES.
PACKAGE_STACK=/etc/slurm/plugstack.conf.d/gpu-tracker.conf
if [[ $FROM_PACKAGES == 1 ]]; then
    GPU_TRACKER_REPORT_BIN=/usr/bin/gpu-tracker-report GPU_TRACKER_BIN=/usr/bin/gpu-tracker
fi
CONF=$STATE/slurm.conf
TRACKER_CONF=$STATE/gpu-tracker.toml
NODE=$(hostname -s)
TEST_USERS=(gtuser gtuser2)
# The group that may read the live state of running steps, and the exporter's user in it.
LIVE_GROUP=gtlive EXPORTER_USER=gtexport
# The account the test users are in with --accounting.
TEST_ACCOUNT=gputest
# The SIMULATED AMD GPUs' sysfs tree (what the plugin reads as /, setting amd_root) and the
# simulator that keeps it (with the AMD node only).
AMD_ROOT=$STATE/amd-root
SIMAMD_PID=$STATE/run/simamd.pid
# What "up" was asked for (parse_options).
NODES=1 NODE_LOCAL=0 ACCOUNTING=0 QUICK_CHECK=0 MAIL=0
# slurmdbd's database: a MariaDB of our own (data, socket and port in the state directory).
DB_CNF=$STATE/mariadb.cnf
DB_RUN=$STATE/run/mysqld
DBD_CONF=$STATE/slurmdbd.conf
# Slurm, and what building the plugin needs (Slurm's headers, libclang for bindgen, a C linker)
# unless GPU_TRACKER_PLUGIN names a plugin built elsewhere (the test guests of slurm/vm.sh).
# fonts-dejavu-core: the font of gpu-tracker-report --plot (the demo draws its job).
PACKAGES=(slurmctld slurmd slurm-client munge fonts-dejavu-core)
[[ -n ${GPU_TRACKER_PLUGIN:-} || $FROM_PACKAGES == 1 ]] || PACKAGES+=(libslurm-dev libclang-dev gcc libc6-dev)
export SLURM_CONF=$CONF PATH=$PATH:/usr/sbin:/sbin

STEP="" STEP_LOGS=() CONF_CHANGED=0 STACK_CHANGED=0 DB_CHANGED=0 DBD_CHANGED=0 CLUSTER_ADDED=0

# Names the step now running and the logs worth showing if it fails.
# Each step of 3 s or more says how long it took, when the next begins (where `up` spends its
# minutes in an emulated guest).
STEP_T0=$SECONDS
step() {
    step_took
    STEP=$1 STEP_T0=$SECONDS
    shift
    STEP_LOGS=("$@")
}
step_took() {
    [[ -n ${STEP:-} ]] && ((SECONDS - STEP_T0 >= 3)) && echo "local-cluster: $STEP: $((SECONDS - STEP_T0)) s"
    return 0
}

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
        GPU_TRACKER_FROM_PACKAGES="$FROM_PACKAGES" \
        GPU_TRACKER_SLURM_PORT="${GPU_TRACKER_SLURM_PORT:-16817}" \
        ${GPU_TRACKER_REPORT_BIN:+GPU_TRACKER_REPORT_BIN="$GPU_TRACKER_REPORT_BIN"} bash "$SCRIPT" "$@"
}

# Reads up's and demo's options into NODES, NODE_LOCAL, ACCOUNTING and QUICK_CHECK.
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
        --mail) MAIL=1 ;;
        --quick-check) QUICK_CHECK=1 ;;
        *) fail "unknown option '$1' (up|demo [--nodes N] [--node-local-spool] [--accounting] [--mail] [--quick-check])" ;;
        esac
        shift
    done
    ((NODE_LOCAL == 0 || NODES >= 2)) || fail "--node-local-spool needs --nodes 2 or more (the first node keeps the shared spool)"
    ((ACCOUNTING == 0)) || PACKAGES+=(mariadb-server slurmdbd)
    ((MAIL == 0)) || PACKAGES+=(exim4-daemon-light)
    ((NODES == 1)) || PACKAGES+=(python3) # the AMD node's simulator (tests/simamd.py)
    return 0
}

# The name of node $1 (1-based): this machine's short name, then <name>-2, <name>-3, ...
node_name() { if (($1 == 1)); then echo "$NODE"; else echo "$NODE-$1"; fi; }

# The names of the numbered nodes "up" brings up (partition "multi"), one a line.
node_names() {
    local i
    for ((i = 1; i <= NODES; i++)); do node_name "$i"; done
}

# The node with the SIMULATED MIG GPU and the shards, alone in partition "mig": with --nodes 2
# or more (the one-node cluster stays one node).
mig_node() { ((NODES == 1)) || echo "$NODE-mig"; }

# The node with the two SIMULATED AMD GPUs, alone in partition "amd": with --nodes 2 or more.
amd_node() { ((NODES == 1)) || echo "$NODE-amd"; }

# Every node "up" brings up: the numbered ones, then the MIG node and the AMD node.
all_node_names() { node_names; mig_node; amd_node; }

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

# The parts, by what each does (each only defines functions and reads the globals above).
for part in setup plugin daemons accounting mail verify; do
    # shellcheck source=/dev/null
    source "$REPO/slurm/cluster/$part.sh"
done

# up: installs, configures and starts the cluster, then checks that jobs run.
cmd_up() {
    local started=$SECONDS slurmd_logs name ctld_was_up=0
    alive "$STATE/run/slurmctld.pid" slurmctld && ctld_was_up=1
    for name in $(all_node_names); do slurmd_logs+=" $(slurmd_log "$name")"; done
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
    if ((MAIL)); then step "mail"; install_mail_tools; start_mail; fi
    step "start munged" /var/log/munge/munged.log; start_munge
    if [[ -n $(amd_node) ]]; then
        step "start AMD simulator" "$STATE/log/simamd.log"; start_simamd
    else
        stop_simamd
    fi
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
    if ((!ctld_was_up)); then
        step "forget jobs of a cluster stopped without down" "$STATE/log/slurmctld.log"
        cancel_recovered_jobs
    fi
    step "check the cluster"
    verify_jobs
    step_took
    STEP=""
    echo "up done in $((SECONDS - started)) s"
}

# down: cancels jobs, stops every slurmd, slurmctld, slurmdbd, MariaDB, the AMD simulator and
# the munged this script started.
cmd_down() {
    local i
    if alive "$STATE/run/slurmctld.pid" slurmctld; then
        squeue -h -o %A | xargs -r scancel || true
        for ((i = 0; i < 20; i++)); do [[ -z $(squeue -h 2>/dev/null) ]] && break; sleep 0.5; done
    fi
    stop_all_slurmd
    stop_daemon "$STATE/run/slurmctld.pid" slurmctld
    stop_accounting
    stop_simamd
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
    # The AMD node's simulator, where it runs or slurm.conf has that node.
    if simamd_alive; then
        printf '%-10s running (pid %s) SIMULATED AMD GPUs in %s\n' simamd "$(cat "$SIMAMD_PID")" "$AMD_ROOT"
    elif grep -q "^NodeName=$NODE-amd " "$CONF" 2>/dev/null; then
        printf '%-10s not running\n' simamd
    fi
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
    # holds SIMGPU<i>_HOLD, and keeps the GPU busy while it also holds SIMGPU_COMPUTE (idle, as a
    # real GPU, otherwise): the python step is named so (built at run time, so that srun's own
    # command line does not hold the marker).
    # The summary at the end of the output is what the plugin appended.
    batch_as --summary "$u" -J demo --gpu-track=0.5 --gres=gpu:1 --mem=500M -n 2 \
        --wrap "echo \"GPUs: \$SLURM_JOB_GPUS\"; $gt mark prepare; srun -n 2 sh -c 'head -c 100000000 /dev/zero | sort >/dev/null'; $gt mark compute; srun -n 1 bash -c 'm=SIMGPU\${SLURM_STEP_GPUS:-0}; exec -a \${m}_HOLD_SIMGPU_COMPUTE python3 -c \"import time; b = bytearray(300 << 20); time.sleep(3)\"'; $gt mark finish; sleep 2; echo done"
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

usage="usage: $0 up|demo [--nodes N] [--node-local-spool] [--accounting] [--mail] [--quick-check] | down | status | env | on-node NODE -- CMD... | restart-slurmd NODE"
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
