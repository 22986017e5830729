#!/usr/bin/env bash
# Test machines for the Slurm releases that sites run on cgroup v2: a QEMU guest per Debian suite,
# built from Debian's packages, with the same local cluster as slurm/local-cluster.sh inside.
#
#   slurm/vm.sh image SUITE          build (or reuse) the cached image of SUITE
#   slurm/vm.sh boot SUITE           image, guest booted (no build, no cluster)
#   slurm/vm.sh up SUITE             image, plugin built for its Slurm, guest booted, cluster up
#   slurm/vm.sh run SUITE -- CMD...  CMD as root in the guest, in the project tree, with the
#                                    cluster's environment; stdin passed; CMD's exit status
#   slurm/vm.sh build SUITE          image, and what the guest runs built here (the .debs or
#                                    the plugin, the tests)
#   slurm/vm.sh test SUITE [--no-build] [FILTER...]
#                                    build (unless --no-build: slurm/vm.sh build ran), boot, the
#                                    .debs installed (apt), the real-Slurm suite inside on them,
#                                    once, in the suite's mode: without contain_spank on trixie,
#                                    with it on forky (suite_mode)
#   slurm/vm.sh debs SUITE [--install]
#                                    the .debs built here for SUITE's Slurm (packaging/build.sh
#                                    deb, into target/vm/SUITE/debs); --install: apt installs
#                                    them in the running guest (docs/INSTALL.md)
#   slurm/vm.sh down [SUITE]         power the guest(s) off
#   slurm/vm.sh suites               the suites and the Slurm release each brings
#
# SUITE: trixie (Debian 13, Slurm 24.11) or forky (Debian 14, Slurm 26.05).
#
# How it works (slurm/vm/README.md has the why): mmdebstrap builds the root filesystem, mke2fs
# turns it into a raw ext4 disk, QEMU boots the image's own kernel with software emulation (this
# host's KVM boots no stock kernel), no network device. Two 9p shares: the project tree at the
# same path as on the host, and a control folder where a runner in the guest picks up commands
# and writes back their output and exit status. The plugin is compiled here against the guest's
# Slurm headers (they are in the image); nothing is compiled in the guest.
#
# Environment: GPU_TRACKER_VM_DIR (cache and run state, default /var/tmp/gpu-tracker-vm),
# GPU_TRACKER_VM_MEM (MiB, default 6144: a job of the tests asks for --mem=4G), GPU_TRACKER_VM_CPUS (default 2),
# GPU_TRACKER_DEBIAN_MIRROR (default http://deb.debian.org/debian), GPU_TRACKER_CONTAIN_SPANK
# (0 or 1: `test` in that mode instead of the suite's own), GPU_TRACKER_VM_APPEND (more kernel
# arguments for the guests), GPU_TRACKER_GUEST_FROM (`debs`, the default: `build` makes the Debian
# packages for the suite's Slurm, `test` installs them in the guest and its cluster runs the
# installed plugin and programs, as a site's would; `tree`: the plugin and programs built from
# the tree and copied in, a minute quicker to build), GPU_TRACKER_GLIBC (for the .debs: empty
# by default here, plain cargo; 2.28 builds them as packaging/build.sh ships them, with zig).
set -euo pipefail

SCRIPT=$(readlink -f "${BASH_SOURCE[0]}")
REPO=$(dirname "$(dirname "$SCRIPT")")
GUEST=$REPO/slurm/vm
# shellcheck source=../tests/times.sh
source "$REPO/tests/times.sh"
VMDIR=${GPU_TRACKER_VM_DIR:-/var/tmp/gpu-tracker-vm}
MIRROR=${GPU_TRACKER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
MEM=${GPU_TRACKER_VM_MEM:-6144}
CPUS=${GPU_TRACKER_VM_CPUS:-2}
# What the guest needs: a booting system, Slurm with its headers (the host builds against them),
# munge, MariaDB and slurmdbd (for "local-cluster.sh up --accounting"), exim4 (its local delivery
# only configuration, for "up --mail"), and what the tests and the demo run (python3, runuser
# from util-linux).
GUEST_PACKAGES=linux-image-amd64,systemd-sysv,udev,dbus,kmod,procps,util-linux,iproute2,slurmd,slurmctld,slurm-client,munge,mariadb-server,slurmdbd,libslurm-dev,python3,acl,python3-pyfuse3,fuse3,fonts-dejavu-core,prometheus,exim4-daemon-light,python3-pandas,python3-yaml,python3-requests
# Host tools: QEMU and mmdebstrap from bookworm-backports on Debian 12 (bookworm's qemu 7.2
# conflicts with the qemu-utils 10 some images carry), e2fsprogs for mke2fs -d, and what the
# plugin's build needs (libclang for bindgen, a C linker; Slurm's headers come from the image).
HOST_PACKAGES=(qemu-system-x86 mmdebstrap e2fsprogs libclang-dev gcc libc6-dev dpkg-dev debhelper)
FROM=${GPU_TRACKER_GUEST_FROM:-debs}
[[ $FROM == debs || $FROM == tree ]] || { echo "vm: GPU_TRACKER_GUEST_FROM must be debs or tree, not '$FROM'" >&2; exit 1; }

fail() { echo "vm: $*" >&2; exit 1; }
say() { echo "vm: $*" >&2; }

suite_ok() {
    case $1 in
    trixie | forky) ;;
    *) fail "unknown suite '$1' (trixie: Slurm 24.11, forky: Slurm 26.05)" ;;
    esac
}

need_root() {
    ((EUID == 0)) && return 0
    command -v sudo >/dev/null || fail "must run as root (no sudo found)"
    exec sudo --preserve-env=PATH,CARGO_HOME,RUSTUP_HOME,GPU_TRACKER_TIMES,GPU_TRACKER_VM_DIR,GPU_TRACKER_VM_MEM,GPU_TRACKER_VM_CPUS,GPU_TRACKER_DEBIAN_MIRROR \
        bash "$SCRIPT" "$@"
}

# Installs QEMU and mmdebstrap when missing (from bookworm-backports on Debian 12).
install_host_tools() {
    local p missing=() backports=() bookworm=0
    grep -q '^VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null && bookworm=1
    for p in "${HOST_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' && continue
        # Only QEMU and mmdebstrap come from backports (with the dependencies of theirs that
        # backports has newer: -t), the rest is bookworm's own.
        if [[ $bookworm == 1 && $p =~ ^(qemu-system-x86|mmdebstrap)$ ]]; then
            backports+=("$p")
        else
            missing+=("$p")
        fi
    done
    ((${#missing[@]} + ${#backports[@]} == 0)) && return 0
    if ((${#backports[@]})); then
        grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/ ||
            echo "deb $MIRROR bookworm-backports main" >/etc/apt/sources.list.d/gpu-tracker-backports.list
    fi
    say "installing ${missing[*]} ${backports[*]} ..."
    mkdir -p "$VMDIR"
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends)
    {
        apt-get update &&
            { ((${#missing[@]} == 0)) || "${apt[@]}" "${missing[@]}"; } &&
            { ((${#backports[@]} == 0)) || "${apt[@]}" -t bookworm-backports "${backports[@]}"; }
    } >"$VMDIR/apt.log" 2>&1 ||
        { tail -n 20 "$VMDIR/apt.log" >&2; fail "installing ${missing[*]} ${backports[*]} failed (log: $VMDIR/apt.log)"; }
}

# The cache key of an image: the package list and the guest's files. A change rebuilds it.
image_key() {
    { echo "$GUEST_PACKAGES"; cat "$GUEST"/customize "$GUEST"/gt-runner "$GUEST"/gt-runner.service; } |
        sha256sum | cut -c1-16
}

# image SUITE: builds the root filesystem and the disk when the cache is missing or stale.
# Leaves <vmdir>/images/SUITE/{disk.img,vmlinuz,initrd.img,include/,slurm-version}.
cmd_image() {
    local suite=$1 dir key root t0=$SECONDS
    dir=$VMDIR/images/$suite
    key=$(image_key)
    if [[ -f $dir/key && $(cat "$dir/key") == "$key" && -f $dir/disk.img ]]; then
        return 0
    fi
    install_host_tools
    say "building the $suite image from Debian's packages (mmdebstrap, about 2 minutes) ..."
    rm -rf "$dir"
    mkdir -p "$dir"
    root=$dir/root
    # Check-Valid-Until off: a testing suite's Release file may have expired on the mirror.
    mmdebstrap --variant=apt --include="$GUEST_PACKAGES" \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook="$GUEST/customize \"\$1\"" \
        "$suite" "$root" "$MIRROR" >"$dir/mmdebstrap.log" 2>&1 ||
        { tail -n 30 "$dir/mmdebstrap.log" >&2; fail "mmdebstrap $suite failed (log: $dir/mmdebstrap.log)"; }
    cp -L "$root/vmlinuz" "$dir/vmlinuz"
    cp -L "$root/initrd.img" "$dir/initrd.img"
    mkdir -p "$dir/include"
    cp -a "$root/usr/include/slurm" "$dir/include/"
    local n
    n=$(sed -n 's/^#define SLURM_VERSION_NUMBER \(0x[0-9a-f]*\).*/\1/p' "$root/usr/include/slurm/slurm_version.h")
    printf '%d.%02d.%d\n' $((n >> 16)) $(((n >> 8) & 255)) $((n & 255)) >"$dir/slurm-version"
    # A sparse 6 GiB disk; the guest writes to a throw-away overlay (-snapshot).
    mke2fs -q -t ext4 -L gtroot -d "$root" "$dir/disk.img" 6G
    rm -rf "$root"
    echo "$key" >"$dir/key"
    say "$suite image ready in $((SECONDS - t0)) s: Slurm $(cat "$dir/slurm-version"), $(du -sh --apparent-size "$dir/disk.img" | cut -f1) disk"
}

run_dir() { echo "$VMDIR/run/$1"; }

# Succeeds when the guest of SUITE runs.
vm_alive() {
    local pid
    pid=$(cat "$(run_dir "$1")/qemu.pid" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
}

# The kernel arguments SUITE's guest boots with besides the root disk and the console.
# trixie's 6.12 kernel: nolapic_timer. Under software emulation on a busy host, a trixie guest
# (2026-11-27, CI and a clean-clone run) saw the timer of an idle vCPU never fire: the console
# filled with "rcu: INFO: rcu_preempt detected stalls ... timer wakeup didn't happen for 15755
# jiffies ... Possible timer handling issue on cpu=0", the guest went idle (QEMU at 15 % of a
# core) and its suite crawled, while forky's 7.2 kernel on the same QEMU never did. Without the
# local APIC timer each vCPU is woken by the HPET's periodic broadcast tick (250 Hz, 100 MHz,
# nothing calibrated at boot) rather than by a one-shot timer of its own.
# GPU_TRACKER_VM_APPEND adds more (for both suites).
kernel_args() {
    local args="root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 systemd.show_status=0"
    [[ $1 == trixie ]] && args+=" nolapic_timer"
    echo "$args${GPU_TRACKER_VM_APPEND:+ $GPU_TRACKER_VM_APPEND}"
}

# Boots the guest of SUITE (in the background) and waits until its runner answers.
boot() {
    local suite=$1 img rd i t0=$SECONDS
    img=$VMDIR/images/$suite
    rd=$(run_dir "$suite")
    if vm_alive "$suite"; then
        # A guest shares the tree it was booted for: one booted from another checkout would
        # run that checkout's scripts and see none of this one's files. And it runs the image it
        # was booted from: one booted before the image was rebuilt lacks the new packages.
        if [[ $(cat "$rd/ctl/tree" 2>/dev/null) != "$REPO" ]]; then
            say "the running $suite guest shares $(cat "$rd/ctl/tree" 2>/dev/null || echo '?'), not $REPO: restarting it"
        elif [[ $(cat "$rd/image-key" 2>/dev/null) != "$(cat "$img/key")" ]]; then
            say "the running $suite guest was booted from an earlier image: restarting it"
        else
            return 0
        fi
        cmd_down "$suite"
    fi
    rm -rf "$rd"
    mkdir -p "$rd/ctl/req"
    cp "$img/key" "$rd/image-key"
    # The runner mounts the project tree at this path, the same as here.
    echo "$REPO" >"$rd/ctl/tree"
    say "booting $suite (software emulation; 30-60 s) ..."
    qemu-system-x86_64 -name "gpu-tracker-$suite" \
        -accel tcg,thread=multi,tb-size=512 -cpu max -smp "$CPUS" -m "$MEM" \
        -kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
        -append "$(kernel_args "$suite")" \
        -drive "file=$img/disk.img,format=raw,if=virtio,snapshot=on" \
        -virtfs "local,path=$rd/ctl,mount_tag=gtctl,security_model=none" \
        -virtfs "local,path=$REPO,mount_tag=gttree,security_model=none" \
        -nic none -display none -no-reboot -serial "file:$rd/console.log" -monitor none \
        -daemonize -pidfile "$rd/qemu.pid" ||
        fail "qemu did not start"
    for ((i = 0; i < 600; i++)); do
        [[ -f $rd/ctl/ready ]] && break
        vm_alive "$suite" || { tail -n 30 "$rd/console.log" >&2; fail "the $suite guest stopped while booting"; }
        sleep 0.5
    done
    [[ -f $rd/ctl/ready ]] || { tail -n 30 "$rd/console.log" >&2; fail "the $suite guest's runner did not answer in 300 s"; }
    say "$suite up in $((SECONDS - t0)) s: $(cat "$rd/ctl/ready")"
}

# Runs "$@" as root in the guest of SUITE, in the project tree; streams its output; returns its
# exit status. stdin is passed when it is not a terminal.
guest() {
    local suite=$1 rd id req waiter rc
    shift
    rd=$(run_dir "$suite")
    vm_alive "$suite" || fail "the $suite guest is not running (slurm/vm.sh up $suite)"
    id=$(date +%s%N)-$$
    req=$rd/ctl/req/$id
    if [[ -t 0 ]]; then : >"$req.in"; else cat >"$req.in"; fi
    printf '%q ' "$@" >"$req.tmp"
    : >"$req.out"
    : >"$req.err"
    mv "$req.tmp" "$req.cmd"
    # tail --pid reads what is left once the waiter ends, so the last lines are never lost.
    (while [[ ! -f $req.rc ]] && vm_alive "$suite"; do sleep 0.2; done) &
    waiter=$!
    tail -n +1 -s 0.2 -f --pid="$waiter" "$req.out" &
    local t1=$!
    tail -n +1 -s 0.2 -f --pid="$waiter" "$req.err" >&2 &
    local t2=$!
    wait "$waiter" || true
    wait "$t1" "$t2" || true
    rc=$(cat "$req.rc" 2>/dev/null) || { say "the $suite guest stopped while running: $*"; rc=255; }
    rm -f "$req".*
    return "$rc"
}

# Builds, on this host, what the guest runs: the plugin against the guest's Slurm headers, copied
# out to target/vm/SUITE, and the release and test binaries, which do not depend on Slurm's
# version. It shares cargo's target directory with the host's builds (a second one would build
# every dependency again): target/release/libgpu_tracker.so is then this guest's until the next
# build for the host (slurm/local-cluster.sh up builds it again; SLURM_INCLUDE_DIR is part of
# what cargo compares), so never copy that file by hand after a guest build.
build_for() {
    local suite=$1 out cargo
    out=$REPO/target/vm/$suite
    cargo=$(command -v cargo || echo "${CARGO_HOME:-$HOME/.cargo}/bin/cargo")
    [[ -x $cargo ]] || fail "cargo not found: install Rust (https://rustup.rs)"
    mkdir -p "$out"
    if [[ $FROM == debs ]]; then
        # The packages a site installs (the plugin's pinned to this Slurm release), in place of
        # the plugin and programs below.
        GPU_TRACKER_GLIBC=${GPU_TRACKER_GLIBC-} build_debs "$suite"
    fi
    say "building the tests for $suite's Slurm $(cat "$VMDIR/images/$suite/slurm-version") (log: $out/build.log) ..."
    (cd "$REPO" &&
        export CARGO_TARGET_DIR=$REPO/target &&
        if [[ $FROM == tree ]]; then
            SLURM_INCLUDE_DIR=$VMDIR/images/$suite/include \
                "$cargo" build --release --locked --features spank --lib -p gpu-tracker &&
                cp target/release/libgpu_tracker.so "$out/libgpu_tracker.so.new" &&
                mv -f "$out/libgpu_tracker.so.new" "$out/libgpu_tracker.so" &&
                "$cargo" build --release --locked --bin gpu-tracker --bin gpu-tracker-report -p gpu-tracker
        fi &&
        "$cargo" build --release --locked -p fake-nvml &&
        "$cargo" build --locked -p fake-nvml -p gpu-tracker-test-hog --target-dir target/test-support &&
        RUSTC_BOOTSTRAP=1 "$cargo" test --locked --features spank --test slurm --no-run --message-format=json |
        grep '"kind":\["test"\]' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' >"$out/tests.list") >"$out/build.log" 2>&1 ||
        { tail -n 30 "$out/build.log" >&2; fail "build for $suite failed"; }
    [[ -s $out/tests.list ]] || fail "no test binary built for $suite"
    make_jobstats_tools || fail "reportseff or job_defense_shield could not be installed from PyPI into target/jobstats-py"
}

# jobstats' tools for the guests' jobstats test (tests/slurm/jobstats.rs), in target/jobstats-py
# (pip install --target), which the guest's own python3 runs: the guests reach no registry, and
# a virtual environment made here is bound to this machine's Python. reportseff 2.10.3 with
# click (pure Python); job_defense_shield 1.3.4 without its dependencies, which are the guest's
# Debian packages (GUEST_PACKAGES: pandas with numpy, PyYAML, requests; pyarrow, which it lists
# too, it never imports). Installed with the pip of a virtual environment of ours (Debian's own
# pip refuses to install outside one).
make_jobstats_tools() {
    local dir=$REPO/target/jobstats-py venv=$REPO/target/jobstats-pip
    [[ -d $dir/reportseff && -d $dir/click && -d $dir/job_defense_shield ]] && return 0
    [[ -x $venv/bin/pip ]] || python3 -m venv "$venv" || return 1
    rm -rf "$dir.new"
    "$venv/bin/pip" install -q --target "$dir.new" reportseff==2.10.3 &&
        "$venv/bin/pip" install -q --no-deps --target "$dir.new/jds" job-defense-shield==1.3.4 &&
        mv "$dir.new/jds/job_defense_shield" "$dir.new/" && rm -rf "$dir.new/jds" &&
        rm -rf "$dir" && mv "$dir.new" "$dir"
}

# The environment every guest command gets. With the .debs (GPU_TRACKER_GUEST_FROM=debs), the
# installed plugin and programs: the cluster loads the package's plugin, and the tests run
# /usr/bin's programs. From the tree, the plugin built for this suite and the project's binaries
# first on PATH. Both: the prebuilt test programs.
guest_env() {
    local suite=$1
    if [[ $FROM == debs ]]; then
        printf '%s ' env GPU_TRACKER_FROM_PACKAGES=1 GPU_TRACKER_TEST_BIN_DIR=/usr/bin \
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    else
        printf '%s ' env "GPU_TRACKER_PLUGIN=$REPO/target/vm/$suite/libgpu_tracker.so" \
            "PATH=$REPO/target/release:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    fi
    printf '%s ' "GPU_TRACKER_TEST_SUPPORT=$REPO/target/test-support/debug" \
        "GPU_TRACKER_GUEST_TESTS=${GPU_TRACKER_GUEST_TESTS:-}"
}

# Installs SUITE's .debs (built by build_debs) in its running guest as a site would: apt, from
# the shared tree; no network is needed, their dependencies are in the image.
install_debs() {
    local suite=$1 out=$REPO/target/vm/$1/debs
    vm_alive "$suite" || fail "the $suite guest is not running (slurm/vm.sh boot $suite)"
    local debs=("$out"/gpu-tracker_*.deb "$out"/slurm-wlm-gpu-tracker-plugin_*.deb)
    [[ -f ${debs[0]} && -f ${debs[1]} ]] || fail "no .debs for $suite in $out: slurm/vm.sh debs $suite"
    guest "$suite" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        --allow-downgrades --reinstall "${debs[@]}"
}

# build SUITE: the image (when missing or stale) and what the guest runs, built here. The test
# binary is built with RUSTC_BOOTSTRAP=1, as tests/run-all.sh runs the host's suite: cargo
# fingerprints that variable, and a host suite started beside the guests rebuilt and relinked
# the very binary the guests were listing (a clean-clone run: "no test matches" in 26.05).
cmd_build() {
    local suite=$1
    install_host_tools
    timed "$suite: image (cached when unchanged)" cmd_image "$suite"
    timed "$suite: build for Slurm $(cat "$VMDIR/images/$suite/slurm-version")" build_for "$suite"
}

cmd_boot() {
    cmd_image "$1"
    boot "$1"
}

cmd_up() {
    local suite=$1
    install_host_tools
    cmd_image "$suite"
    build_for "$suite"
    boot "$suite"
    [[ $FROM == tree ]] || install_debs "$suite"
    # shellcheck disable=SC2046  # guest_env is a word list
    guest "$suite" $(guest_env "$suite") slurm/local-cluster.sh up
}

cmd_run() {
    local suite=$1
    shift
    [[ ${1:-} == -- ]] && shift
    (($# > 0)) || fail "usage: slurm/vm.sh run SUITE -- CMD..."
    vm_alive "$suite" || fail "the $suite guest is not running (slurm/vm.sh up $suite)"
    local envs
    envs=$(guest_env "$suite")
    # The cluster's own exports (SLURM_CONF, GPU_TRACKER_CONFIG, ...), then CMD.
    # shellcheck disable=SC2086  # envs is a word list
    guest "$suite" $envs bash -c 'eval "$(slurm/local-cluster.sh env)"; exec "$@"' bash "$@"
}

# The mode SUITE's tests run in: 1 with SlurmdParameters=contain_spank, 0 without (the
# caller's GPU_TRACKER_CONTAIN_SPANK, where set, for any suite). Every real-Slurm test runs once
# on each release, in one mode: 22.05 here has no contain_spank (24.05 brought it); 24.11 runs
# without it, as most sites' slurm.conf does; 26.05 with it and the namespace/tmpfs plugin it
# exists for. With it, slurmstepd runs user_init, task_post_fork and task_exit in a
# clone(CLONE_VM) child in the job container's namespace (private /tmp and /dev/shm): each
# task's pid, cgroup, exit status and final counters, NVML's start after the last fork and a
# phase mark from inside the job all come through that path, for the whole suite. A second pass
# in the other mode cost each guest another cluster and its heaviest tests again, which CI's
# 2 cores could not give (a run over 90 minutes); `GPU_TRACKER_CONTAIN_SPANK=0|1 slurm/vm.sh
# test SUITE [FILTER...]` runs either mode on either guest.
suite_mode() {
    if [[ -n ${GPU_TRACKER_CONTAIN_SPANK:-} ]]; then
        [[ $GPU_TRACKER_CONTAIN_SPANK == [01] ]] || fail "GPU_TRACKER_CONTAIN_SPANK must be 0 or 1"
        echo "$GPU_TRACKER_CONTAIN_SPANK"
        return
    fi
    case $1 in
    forky) echo 1 ;;
    *) echo 0 ;;
    esac
}

# test SUITE [FILTER...]: the real-Slurm tests whose subject differs by release
# (slurm/vm/guest-tests.txt; GPU_TRACKER_GUEST_TESTS=all: the whole suite) in the guest, or the
# tests the FILTERs name, in the suite's mode (suite_mode).
cmd_test() {
    local suite=$1 rc=0 t0=$SECONDS release mode words
    shift
    if [[ ${1:-} == --no-build ]]; then
        shift
        [[ -s $REPO/target/vm/$suite/tests.list ]] || fail "nothing built for $suite: slurm/vm.sh build $suite"
    else
        cmd_build "$suite"
    fi
    release=$(cat "$VMDIR/images/$suite/slurm-version")
    mode=$(suite_mode "$suite")
    words="cgroup v2"
    ((mode == 1)) && words+=", contain_spank"
    timed "$suite: boot" boot "$suite"
    if [[ $FROM == debs ]]; then
        timed "$suite: apt install the .debs" install_debs "$suite" || return 1
        words+=", the installed .debs"
    fi
    say "$suite: real-Slurm suite ($words)"
    # shellcheck disable=SC2046  # guest_env is a word list
    timed "$suite: real-Slurm suite (Slurm $release, $words)" \
        guest "$suite" $(guest_env "$suite") GPU_TRACKER_CONTAIN_SPANK="$mode" \
        slurm/vm/guest-test "$REPO/target/vm/$suite/tests.list" "$@" || rc=1
    # A guest whose timers stall runs every test slowly: say so beside the result.
    local stalls
    stalls=$(grep -c 'rcu: INFO: rcu_preempt detected stalls' "$(run_dir "$suite")/console.log" || true)
    ((stalls == 0)) || say "$suite: the guest's kernel reported $stalls RCU stall(s) (console: $(run_dir "$suite")/console.log)"
    say "$suite: suite done in $((SECONDS - t0)) s (exit $rc)"
    return "$rc"
}

# debs SUITE [--install]: the packages for SUITE's Slurm, built here from HEAD against the
# image's headers (the plugin package then depends on that release), and with --install put
# into the running guest as a site would (apt, from the shared tree; no network needed: their
# dependencies are in the image). The suite itself still runs on the tree's build.
cmd_debs() {
    build_debs "$1"
    [[ ${2:-} == --install ]] || return 0
    install_debs "$1"
}

build_debs() {
    local suite=$1 out=$REPO/target/vm/$1/debs
    # The image's headers only: never rebuild an image here, a guest may be running on it.
    [[ -f $VMDIR/images/$suite/include/slurm/spank.h ]] || fail "no image of $suite yet: slurm/vm.sh image $suite"
    say "building the .debs for $suite's Slurm $(cat "$VMDIR/images/$suite/slurm-version") (log: $out.log) ..."
    mkdir -p "$out"
    SLURM_INCLUDE_DIR=$VMDIR/images/$suite/include GPU_TRACKER_PKG_OUT=$out \
        "$REPO/packaging/build.sh" deb >"$out.log" 2>&1 || { tail -n 30 "$out.log" >&2; fail "the .debs for $suite failed"; }
    ls "$out"/*.deb >&2
}

cmd_down() {
    local suite rd pid i
    for rd in "$VMDIR"/run/*; do
        [[ -d $rd ]] || continue
        suite=$(basename "$rd")
        [[ -n ${1:-} && $1 != "$suite" ]] && continue
        vm_alive "$suite" || continue
        pid=$(cat "$rd/qemu.pid")
        : >"$rd/ctl/poweroff"
        for ((i = 0; i < 120; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$pid" 2>/dev/null && kill "$pid"
        say "$suite powered off"
    done
}

cmd_suites() {
    echo "trixie  Debian 13  Slurm 24.11  cgroup v2"
    echo "forky   Debian 14  Slurm 26.05  cgroup v2"
}

cmd=${1:-}
shift || true
case $cmd in
image | build | boot | up) suite_ok "${1:-}"; need_root "$cmd" "$@"; "cmd_$cmd" "$1" ;;
test) suite_ok "${1:-}"; need_root "$cmd" "$@"; cmd_test "$@" ;;
run) suite_ok "${1:-}"; need_root "$cmd" "$@"; cmd_run "$@" ;;
debs) suite_ok "${1:-}"; need_root "$cmd" "$@"; cmd_debs "$@" ;;
down) need_root "$cmd" "$@"; cmd_down "${1:-}" ;;
suites) cmd_suites ;;
*) echo "usage: $0 image|build|boot|up SUITE | test SUITE [--no-build] [FILTER...] | run SUITE -- CMD... | debs SUITE [--install] | down [SUITE] | suites" >&2; exit 2 ;;
esac
