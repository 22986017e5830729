# shellcheck shell=bash
# Part of slurm/local-cluster.sh (sourced by it; not run alone): the gpu-tracker plugin and
# its tools: building them, the settings the plugin reads, plugstack.conf, and <state>/bin.

# The installed Slurm's version, as "24.11.5" (from the package: sinfo -V wants a configuration).
slurm_version() { dpkg-query -W -f='${Version}' slurmd 2>/dev/null | sed 's/^[0-9]*://; s/-.*//'; }

# Succeeds when the installed Slurm is release $1 (e.g. 24.05) or newer.
slurm_at_least() {
    [[ $(printf '%s\n%s\n' "$1" "$(slurm_version)" | sort -V | head -n 1) == "$1" ]]
}

# Builds the release plugin (and, without a real GPU, the test fake NVML library) with cargo,
# unless GPU_TRACKER_PLUGIN names a plugin built elsewhere.
build_plugin() {
    [[ -n ${GPU_TRACKER_PLUGIN:-} || $FROM_PACKAGES == 1 ]] && return 0
    local cargo
    cargo=$(command -v cargo || echo "${CARGO_HOME:-$HOME/.cargo}/bin/cargo")
    [[ -x $cargo ]] || fail "cargo not found: install Rust (https://rustup.rs), or set GPU_TRACKER_PLUGIN"
    echo "building the plugin and gpu-tracker-report (cargo build --release --features spank) ..."
    (cd "$REPO" && "$cargo" build --release --locked --features spank --lib -p gpu-tracker &&
        "$cargo" build --release --locked --bin gpu-tracker-report --bin gpu-tracker --bin gpu-tracker-mail &&
        { real_gpus || "$cargo" build --release --locked -p fake-nvml; }) >"$STATE/log/build.log" 2>&1
}

# Succeeds when this machine has NVIDIA GPUs and a driver: then the cluster offers those.
real_gpus() {
    compgen -G '/dev/nvidia[0-9]*' >/dev/null && ldconfig -p | grep -q 'libnvidia-ml\.so\.1'
}

# The settings the plugin reads (config= in plugstack.conf). GPUs: the real NVML where there is
# a driver, else the test fake with a scenario of two SIMULATED GPUs; with the AMD node, the AMD
# readers pointed at the simulator's tree.
write_tracker_config() {
    local nvml=libnvidia-ml.so.1 amd=""
    if ! real_gpus; then
        install -d -m 0755 "$STATE/lib/simulated-nvml"
        install -m 0644 "$REPO/target/release/libnvidia_ml.so" "$STATE/lib/simulated-nvml/libnvidia-ml.so.1.new"
        mv -f "$STATE/lib/simulated-nvml/libnvidia-ml.so.1.new" "$STATE/lib/simulated-nvml/libnvidia-ml.so.1"
        nvml=$STATE/lib/simulated-nvml/libnvidia-ml.so.1
        # SIMULATED: the fake reports a process's GPU memory when its command line holds the marker.
        # As a real GPU, a device reads 0 % utilization and SM activity with no kernel running:
        # its utilization (37 % on Slurm's GPU 0, 55 % on GPU 1) and GPM figures apply only while a holder whose
        # command line also holds SIMGPU_COMPUTE is on it; a holder that only holds memory leaves
        # it idle. The GPUs' temperature sensors read 47, 39 and 44 °C (Slurm's GPU 0, GPU 1, the
        # MIG GPU). Slurm's GPU 0 has GPM and ECC; GPU 1 has neither
        # (pre-Hopper). A holder whose command line also holds SIMGPU_XID raises one Xid 79 and a
        # 2 s thermal slowdown (and, on GPU 0, one corrected ECC error) on each GPU it holds.
        # NVML index 0 is minor 7 (Slurm's index 1), index 1 is minor 4 (Slurm's index 0): names,
        # UUIDs and SIMGPU<i>_HOLD go by Slurm's index i. NVML index 2 (minor 9) is the MIG node's
        # MIG GPU: two 1g.10gb instances, Slurm's GPUs 1 and 2 there (setup.sh), each with GPM
        # (an instance's GPM support is its parent's: the parent has GPM too, device-wide 11 %,
        # about two of seven slices at 40 %, while a holder computes).
        # A holder with SIMMIG_HOLD on its command line uses 1 GiB on the instance of the job
        # whose SLURM_JOB_GPUS is 1, 2 GiB on the one whose is 2.
        put_file "$STATE/simulated-gpus.json" 0644 <<'EOF2' || true
{
  "driver_version": "SIMULATED (gpu-tracker test fake, no GPU)",
  "fault_marker": "SIMGPU_XID",
  "compute_marker": "SIMGPU_COMPUTE",
  "devices": [
    {"uuid": "GPU-11111111-5151-4d55-8000-111111111111", "name": "SIMULATED GPU 1 (test fake)",
     "minor": 7, "memory_total": 17179869184, "memory_used_base": 268435456, "power_mw": 60000,
     "utilization": [{"at_ms": 0, "gpu": 55, "memory": 20}], "temperature_c": 39,
     "processes": [{"cmdline_contains": "SIMGPU1_HOLD", "used_memory": 2147483648}]},
    {"uuid": "GPU-00000000-5151-4d55-8000-000000000000", "name": "SIMULATED GPU 0 (test fake)",
     "minor": 4, "memory_total": 17179869184, "memory_used_base": 268435456, "power_mw": 60000,
     "utilization": [{"at_ms": 0, "gpu": 37, "memory": 12}], "temperature_c": 47,
     "gpm": {"sm_active": 25, "sm_occupancy": 15, "tensor_active": 8, "dram_bandwidth": 10},
     "ecc": {"corrected": 0, "uncorrected": 0},
     "processes": [{"cmdline_contains": "SIMGPU0_HOLD", "used_memory": 1073741824}]},
    {"uuid": "GPU-22222222-5151-4d55-8000-222222222222", "name": "SIMULATED GPU 2 (test fake, MIG)",
     "minor": 9, "memory_total": 85899345920, "memory_used_base": 268435456, "power_mw": 60000,
     "utilization": [{"at_ms": 0, "gpu": 0, "memory": 0}], "temperature_c": 44,
     "gpm": {"sm_active": 11, "sm_occupancy": 6, "tensor_active": 3, "dram_bandwidth": 2},
     "mig": {"max_instances": 7, "instances": [
       {"uuid": "MIG-a1a1a1a1-5151-4d55-8000-a1a1a1a1a1a1", "profile": "1g.10gb",
        "gpu_instance_id": 1, "compute_instance_id": 0, "memory_total": 10468982784,
        "gpm": {"sm_active": 40, "sm_occupancy": 20, "tensor_active": 10, "dram_bandwidth": 5},
        "processes": [{"cmdline_contains": "SIMMIG_HOLD", "environ_contains": "SLURM_JOB_GPUS=1",
                       "used_memory": 1073741824}]},
       {"uuid": "MIG-b2b2b2b2-5151-4d55-8000-b2b2b2b2b2b2", "profile": "1g.10gb",
        "gpu_instance_id": 2, "compute_instance_id": 0, "memory_total": 10468982784,
        "gpm": {"sm_active": 40, "sm_occupancy": 20, "tensor_active": 10, "dram_bandwidth": 5},
        "processes": [{"cmdline_contains": "SIMMIG_HOLD", "environ_contains": "SLURM_JOB_GPUS=2",
                       "used_memory": 2147483648}]}]}}
  ]
}
EOF2
    fi
    # The test-only amd_root, with the AMD node only (appended to the last line below).
    [[ -z $(amd_node) ]] || amd="
# FOR TESTS ONLY: the AMD readers read sysfs under this directory instead of / (the SIMULATED
# MI300X that tests/simamd.py keeps for the AMD node). Never set on a real node.
amd_root = \"$AMD_ROOT\""
    put_file "$TRACKER_CONF" 0644 <<EOF2 || true
# gpu-tracker settings of the local test cluster, written by slurm/local-cluster.sh ("up"
# rewrites it). The full list of keys, with their defaults: config/gpu-tracker.toml.
spool_dir = "$STATE/spool/gpu-tracker"
interval = 1.0
min_interval = 0.1
checkpoint_interval = 5.0
nvml_library = "$nvml"
mig_minors_file = "$STATE/nvidia-caps/mig-minors"
live_dir = "$STATE/live"
live_group = "$LIVE_GROUP"
# The end-of-job mail (up --mail; docs/MAIL.md): a shorter wait than the default 10 s, and the
# site's own line. Dotted keys, not a [mail] table: the tests add top-level keys at the end.
mail.wait_seconds = 5
mail.footer = "Local test cluster: this mail was written by gpu-tracker-mail (docs/MAIL.md)."
live_interval_seconds = 1$amd
EOF2
}

# PLUGIN HOOK: installs the SPANK plugin when it is built and points plugstack.conf at it;
# otherwise plugstack.conf stays empty (comments only). Sets STACK_CHANGED when slurmd must restart.
install_plugin() {
    local so=$STATE/lib/gpu_tracker.so line=""
    if [[ $FROM_PACKAGES == 1 ]]; then
        install_packaged_plugin
        return
    fi
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

# The plugin of the installed Debian package (FROM_PACKAGES): plugstack.conf includes
# plugstack.conf.d/*.conf as slurm-wlm-basic-plugins' own does, and the package's file there
# names the plugin where the package put it; its config= is pointed at this cluster's settings.
# A plugin or package file that changed (a new package) restarts slurmd (STACK_CHANGED).
install_packaged_plugin() {
    [[ -f $PACKAGE_STACK ]] || fail "GPU_TRACKER_FROM_PACKAGES=1 but $PACKAGE_STACK is missing: apt install the .debs first (slurm/vm.sh debs SUITE --install)"
    local so
    so=$(awk '$1 == "optional" || $1 == "required" { print $2; exit }' "$PACKAGE_STACK")
    [[ -f $so ]] || fail "$PACKAGE_STACK names $so, which is not there"
    write_tracker_config
    local stack
    stack=$(sed -E "s|config=[^ ]*|config=$TRACKER_CONF|" "$PACKAGE_STACK")
    [[ $stack == "$(cat "$PACKAGE_STACK")" ]] || { printf '%s\n' "$stack" | put_file "$PACKAGE_STACK" 0644 && STACK_CHANGED=1; }
    # The plugin's own identity: a package upgraded under a running cluster restarts slurmd.
    local stamp=$STATE/lib/packaged-plugin.stamp
    if [[ "$(stat -c '%s %Y %i' "$so")" != "$(cat "$stamp" 2>/dev/null)" ]]; then
        install -d -m 0755 "$STATE/lib"
        stat -c '%s %Y %i' "$so" >"$stamp"
        STACK_CHANGED=1
    fi
    echo "plugin: $so from package $(dpkg -S "$so" 2>/dev/null | cut -d: -f1), loaded through $PACKAGE_STACK"
    printf '# SPANK plugins, written by slurm/local-cluster.sh (install_packaged_plugin)\ninclude %s/*.conf\n' \
        "$(dirname "$PACKAGE_STACK")" | put_file "$STATE/plugstack.conf" 0644 && STACK_CHANGED=1
    return 0
}

# Copies file $1 to $2 (root's, mode $3) unless it is there already: a new file, then a rename.
install_copy() {
    cmp -s "$1" "$2" && return 0
    install -o root -g root -m "$3" "$1" "$2.new" && mv -f "$2.new" "$2"
}

# Installs into <state>/bin: gpu-tracker-report when it is built (or GPU_TRACKER_REPORT_BIN
# names one), slurm/epilog-slurmctld, <state>/cli_filter.lua (slurm/cli_filter.lua), and
# epilog-slurmctld, the wrapper EpilogSlurmctld names
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
    # The advice at submission: slurm/cli_filter.lua beside slurm.conf (CliFilterPlugins),
    # running this cluster's gpu-tracker-report.
    local filter=$REPO/slurm/cli_filter.lua
    [[ $FROM_PACKAGES == 1 ]] && filter=/usr/share/gpu-tracker/cli_filter.lua
    sed "s|^local GPU_TRACKER_REPORT = .*|local GPU_TRACKER_REPORT = \"$STATE/bin/gpu-tracker-report\"|" \
        "$filter" | put_file "$STATE/cli_filter.lua" 0644 || true
    local epilog=$REPO/slurm/epilog-slurmctld
    [[ $FROM_PACKAGES == 1 ]] && epilog=/usr/libexec/gpu-tracker/epilog-slurmctld
    install_copy "$epilog" "$STATE/lib/epilog-slurmctld" 0755
    put_file "$STATE/bin/epilog-slurmctld" 0755 <<EOF || true
#!/bin/sh
# Written by slurm/local-cluster.sh: EpilogSlurmctld of the local cluster (up --accounting).
# slurmctld runs it with the job's variables only; our settings come from here. What it says
# (one line a job) is kept in log/epilog-slurmctld.log: slurmctld keeps none of it.
export SLURM_CONF='$CONF'
export GPU_TRACKER_CONFIG='$TRACKER_CONF'
export GPU_TRACKER_REPORT='$STATE/bin/gpu-tracker-report'
exec '$STATE/lib/epilog-slurmctld' "\$@" 2>>'$STATE/log/epilog-slurmctld.log'
EOF
}
