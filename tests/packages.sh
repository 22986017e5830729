#!/bin/bash
# The packages, built from the checkout's HEAD and checked (docs/INSTALL.md, "Packages"):
#   tests/packages.sh [--install] [--no-build]
# Builds both formats (packaging/build.sh both: rpmbuild and dpkg-buildpackage, for glibc 2.28
# with cargo zigbuild) unless --no-build, then checks in target/packages/: each package's file
# list (rpm -qlp, dpkg -c) against the layout below, the config files upgrades keep, the
# plugin's pin to the Slurm release it was built for, that the shipped ELF files are stripped
# and their debug info is in the debug packages, that no shipped ELF needs a glibc above 2.28
# (packaging/check-glibc.sh), that each is built for the packages' architecture, and that the
# programs unpacked from the .deb run. GPU_TRACKER_ARCH=aarch64 builds and checks the aarch64
# packages (a cross build; their programs run under qemu-user) in GPU_TRACKER_PKG_OUT.
# Run by hand, or by .ci/run with GPU_TRACKER_CI_PACKAGES=1 (a release build: about 20 minutes
# of 2 cores from cold, docs/TESTING.md). Needs root only for nothing; needs rpm, rpm2cpio,
# cpio, dpkg-dev, debhelper, and zig with cargo-zigbuild.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${GPU_TRACKER_PKG_OUT:-$PWD/target/packages}
# The packages' architecture: GPU_TRACKER_ARCH's (packaging/build.sh), else this machine's.
arch=${GPU_TRACKER_ARCH:-$(uname -m)}
case $arch in
aarch64 | arm64) arch=aarch64 deb_arch=arm64 ;;
*) arch=x86_64 deb_arch=amd64 ;;
esac
# --install: first install what the build needs and this machine lacks (as root; Debian's
# packages, PyPI's zig and cargo-zigbuild, and for another architecture its cross tools).
if [[ ${1:-} == --install ]]; then
    shift
    need=()
    for t in rpmbuild:rpm rpm2cpio:rpm cpio:cpio rpmlint:rpmlint dpkg-buildpackage:dpkg-dev dh:debhelper \
        find-debuginfo:debugedit; do
        command -v "${t%%:*}" >/dev/null || need+=("${t#*:}")
    done
    if ((${#need[@]} > 0)); then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${need[@]}" >/dev/null || { echo "apt-get install ${need[*]} failed"; echo "0 passed, 1 failed"; exit 1; }
    fi
    # Another architecture's: its binutils, C library headers (bindgen) and libc6 in dpkg
    # (dpkg-shlibdeps), qemu-user to run what was built, and rustup's std for it.
    if [[ $arch != "$(uname -m)" ]]; then
        cross=("binutils-$arch-linux-gnu" "libc6-dev-$deb_arch-cross" qemu-user "libc6:$deb_arch")
        dpkg --print-foreign-architectures | grep -qx "$deb_arch" || dpkg --add-architecture "$deb_arch"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            "${cross[@]}" >/dev/null; } || { echo "apt-get install ${cross[*]} failed"; echo "0 passed, 1 failed"; exit 1; }
        rustup target add "$arch-unknown-linux-gnu" >/dev/null 2>&1 ||
            { echo "rustup target add $arch-unknown-linux-gnu failed"; echo "0 passed, 1 failed"; exit 1; }
    fi
    if ! command -v cargo-zigbuild >/dev/null || ! python3 -m ziglang version >/dev/null 2>&1; then
        pip3 install -q ziglang cargo-zigbuild || { echo "pip3 install ziglang cargo-zigbuild failed"; echo "0 passed, 1 failed"; exit 1; }
    fi
fi
if [[ ${1:-} != --no-build ]]; then
    GPU_TRACKER_PKG_OUT=$out packaging/build.sh both || { echo "packaging/build.sh failed"; echo "0 passed, 1 failed"; exit 1; }
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
multiarch=$arch-linux-gnu
# Another architecture's files are read with its binutils and run under qemu-user, with its
# loader and libraries from Debian's libc6-<arch>-cross (docs/TESTING.md, "aarch64").
tools= run=
if [[ $arch != "$(uname -m)" ]]; then
    tools=$arch-linux-gnu-
    loader=$(echo /usr/"$arch"-linux-gnu/lib/ld-linux-*.so.[0-9])
    run="qemu-$arch $loader --library-path /usr/$arch-linux-gnu/lib"
    command -v "qemu-$arch" >/dev/null || { echo "qemu-$arch not found (Debian: apt-get install qemu-user)"; echo "0 passed, 1 failed"; exit 1; }
fi
inc=${SLURM_INCLUDE_DIR:-/usr/include}
num=$(sed -n 's/^#define SLURM_VERSION_NUMBER \(0x[0-9a-fA-F]*\).*/\1/p' "$inc/slurm/slurm_version.h")
release=$(printf '%d.%02d' $(((num >> 16) & 255)) $(((num >> 8) & 255)))
next=$(printf '%d.%02d' $(((num >> 16) & 255)) $((((num >> 8) & 255) + 1)))
passed=0 failed=0
check() { # NAME COMMAND...: one check, its output shown when it fails
    local name=$1 log
    shift
    if log=$("$@" 2>&1); then
        echo "ok      $name"
        passed=$((passed + 1))
    else
        echo "FAILED  $name"
        printf '%s\n' "$log" | sed 's/^/        /' | head -n 40
        failed=$((failed + 1))
    fi
}
same() { # EXPECTED-LIST ACTUAL-LIST: equal as sorted sets
    diff <(printf '%s\n' "$1" | sort) <(printf '%s\n' "$2" | sort)
}
one() { # GLOB: the one file it names
    local f=("$out"/$1)
    [[ ${#f[@]} == 1 && -f ${f[0]} ]] || { echo "no single package $out/$1" >&2; return 1; }
    echo "${f[0]}"
}

docs="README.md INSTALL.md OPTIONS.md REPORT.md SUMMARY.md EXPORTER.md SECURITY.md COSTS.md LAYOUT.md AMD.md MIG.md MAIL.md"
rpm_main=$(one "gpu-tracker-$version-1.$arch.rpm") || exit 1
rpm_plugin=$(one "slurm-spank-gpu-tracker-$version-1.$arch.rpm") || exit 1
rpm_debug=$(one "gpu-tracker-debuginfo-$version-1.$arch.rpm") || exit 1
deb_main=$(one "gpu-tracker_${version}_$deb_arch.deb") || exit 1
deb_plugin=$(one "slurm-wlm-gpu-tracker-plugin_${version}_$deb_arch.deb") || exit 1
deb_debug=$(one "gpu-tracker-dbgsym_${version}_$deb_arch.*deb") || exit 1
deb_plugin_debug=$(one "slurm-wlm-gpu-tracker-plugin-dbgsym_${version}_$deb_arch.*deb") || exit 1

# --- RPM: RHEL's layout (rpm -qlp), without the build-id links rpm adds under /usr/lib/.build-id.
rpm_files() { rpm -qlp "$1" 2>/dev/null | grep -v '^/usr/lib/\.build-id'; }
expected_rpm_main="/usr/bin/gpu-tracker
/usr/bin/gpu-tracker-report
/usr/bin/gpu-tracker-exporter
/usr/bin/gpu-tracker-mail
/etc/slurm
/etc/slurm/gpu-tracker.toml
/etc/cron.d/gpu-tracker
/usr/lib/systemd/system/gpu-tracker-exporter.service
/usr/lib/sysusers.d/gpu-tracker.conf
/usr/share/licenses/gpu-tracker
/usr/share/licenses/gpu-tracker/LICENSE
/usr/share/doc/gpu-tracker
$(for d in $docs; do echo "/usr/share/doc/gpu-tracker/$d"; done)"
expected_rpm_plugin="/usr/lib64/slurm/gpu_tracker.so
/etc/slurm/plugstack.conf.d
/etc/slurm/plugstack.conf.d/gpu-tracker.conf
/usr/libexec/gpu-tracker
/usr/libexec/gpu-tracker/epilog-slurmctld
/usr/share/gpu-tracker
/usr/share/gpu-tracker/cli_filter.lua
/usr/share/doc/slurm-spank-gpu-tracker
/usr/share/doc/slurm-spank-gpu-tracker/README.md
/usr/share/doc/slurm-spank-gpu-tracker/RECORD.md"
check "rpm -qlp gpu-tracker: the programs, settings, cron line, unit, docs" \
    same "$expected_rpm_main" "$(rpm_files "$rpm_main")"
check "rpm -qlp slurm-spank-gpu-tracker: the plugin in /usr/lib64/slurm, plugstack.conf.d, scripts" \
    same "$expected_rpm_plugin" "$(rpm_files "$rpm_plugin")"
check "rpm: config files upgrades keep (%config(noreplace))" \
    same "/etc/cron.d/gpu-tracker
/etc/slurm/gpu-tracker.toml
/etc/slurm/plugstack.conf.d/gpu-tracker.conf" "$(rpm -qp --configfiles "$rpm_main" "$rpm_plugin" 2>/dev/null)"
check "rpm: noreplace on every config file" \
    bash -c "! rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' '$rpm_main' '$rpm_plugin' 2>/dev/null | grep '^[a-z]*c[a-z]* ' | grep -v '^[a-z]*n[a-z]* '"
check "rpm: the plugin requires Slurm $release and conflicts with $next" \
    bash -c "rpm -qp --requires '$rpm_plugin' 2>/dev/null | grep -qx 'slurm >= $release' &&
             rpm -qp --conflicts '$rpm_plugin' 2>/dev/null | grep -qx 'slurm >= $next'"
check "rpm: the debuginfo package holds the programs' and the plugin's debug info" \
    bash -c "rpm -qlp '$rpm_debug' 2>/dev/null | grep -E '/usr/lib/debug/usr/(bin/gpu-tracker|bin/gpu-tracker-report|bin/gpu-tracker-exporter|bin/gpu-tracker-mail|lib64/slurm/gpu_tracker.so)-.*\.debug$' | wc -l | grep -qx 5"
check "rpm: post-install message of the plugin points at gpu-tracker-report --check" \
    bash -c "rpm -qp --scripts '$rpm_plugin' 2>/dev/null | grep -q 'gpu-tracker-report --check'"

# --- Debian: dpkg -c, directories left out.
deb_files() { dpkg -c "$1" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }'; }
expected_deb_main="/usr/bin/gpu-tracker
/usr/bin/gpu-tracker-report
/usr/bin/gpu-tracker-exporter
/usr/bin/gpu-tracker-mail
/etc/slurm/gpu-tracker.toml
/etc/cron.d/gpu-tracker
/lib/systemd/system/gpu-tracker-exporter.service
/usr/lib/sysusers.d/gpu-tracker.conf
/usr/share/doc/gpu-tracker/copyright
/usr/share/doc/gpu-tracker/changelog.gz
$(for d in $docs; do echo "/usr/share/doc/gpu-tracker/$d.gz"; done)"
expected_deb_plugin="/usr/lib/$multiarch/slurm-wlm/gpu_tracker.so
/etc/slurm/plugstack.conf.d/gpu-tracker.conf
/usr/libexec/gpu-tracker/epilog-slurmctld
/usr/share/gpu-tracker/cli_filter.lua
/usr/share/doc/slurm-wlm-gpu-tracker-plugin/copyright
/usr/share/doc/slurm-wlm-gpu-tracker-plugin/changelog.gz
/usr/share/doc/slurm-wlm-gpu-tracker-plugin/README.md.gz
/usr/share/doc/slurm-wlm-gpu-tracker-plugin/RECORD.md.gz"
check "dpkg -c gpu-tracker: the programs, settings, cron line, unit, docs" \
    same "$expected_deb_main" "$(deb_files "$deb_main")"
check "dpkg -c slurm-wlm-gpu-tracker-plugin: the plugin in slurm-wlm/, plugstack.conf.d, scripts" \
    same "$expected_deb_plugin" "$(deb_files "$deb_plugin")"
conffiles() { dpkg-deb --ctrl-tarfile "$1" | tar -xO ./conffiles 2>/dev/null; }
check "deb: conffiles (upgrades keep the site's changes)" \
    same "/etc/cron.d/gpu-tracker
/etc/slurm/gpu-tracker.toml
/etc/slurm/plugstack.conf.d/gpu-tracker.conf" "$(conffiles "$deb_main"; conffiles "$deb_plugin")"
check "deb: the plugstack.conf.d line loads the plugin optional, with the settings" \
    bash -c "dpkg-deb --fsys-tarfile '$deb_plugin' | tar -xO ./etc/slurm/plugstack.conf.d/gpu-tracker.conf |
             grep -qx 'optional /usr/lib/$multiarch/slurm-wlm/gpu_tracker.so config=/etc/slurm/gpu-tracker.toml'"
check "deb: the plugin depends on Slurm $release, not $next" \
    bash -c "d=\$(dpkg-deb -f '$deb_plugin' Depends); echo \"\$d\";
             [[ \$d == *'slurm-wlm-basic-plugins (>= $release~)'* && \$d == *'slurm-wlm-basic-plugins (<< $next~)'* ]]"
check "deb: the programs need libc6 2.28 at most (dpkg-shlibdeps)" \
    bash -c "d=\$(dpkg-deb -f '$deb_main' Depends); echo \"\$d\"; [[ \$d =~ libc6\ \(\>=\ 2\.(1[0-9]|2[0-8])[\)\.] ]]"
# dh_installsystemd --no-enable keeps only "enable again what the admin had enabled".
check "deb: the exporter's unit is not enabled or started on install" \
    bash -c "dpkg-deb --ctrl-tarfile '$deb_main' | tar -xO ./postinst | awk '
        /was-enabled/ { kept = 1 } /^[[:space:]]*fi/ { kept = 0 }
        /deb-systemd-invoke (start|restart)/ { bad = 1 }
        /deb-systemd-helper enable/ && !kept { bad = 1 }
        END { exit bad }'"
check "deb: post-install message of the plugin points at gpu-tracker-report --check" \
    bash -c "dpkg-deb --ctrl-tarfile '$deb_plugin' | tar -xO ./postinst | grep -q 'gpu-tracker-report --check'"
check "deb: the dbgsym packages hold the debug info of each shipped ELF" \
    bash -c "[[ \$( (dpkg -c '$deb_debug'; dpkg -c '$deb_plugin_debug') | grep -c '/usr/lib/debug/.build-id/.*\.debug$') == 5 ]]"

# --- Both: stripped, glibc 2.28 at most, and the programs run.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/deb" "$tmp/rpm"
for p in "$deb_main" "$deb_plugin"; do dpkg-deb -x "$p" "$tmp/deb"; done
for p in "$rpm_main" "$rpm_plugin"; do (cd "$tmp/rpm" && rpm2cpio "$p" | cpio -idm --quiet); done
stripped() {
    local f bad=0
    for f in "$@"; do
        if "${tools}readelf" -S -W "$f" | grep -qE '\.debug_(info|line)|\.symtab'; then echo "$f is not stripped"; bad=1; fi
    done
    return $bad
}
machine() { # FILE...: each an ELF file for $arch
    local f m want bad=0
    case $arch in aarch64) want=AArch64 ;; *) want=X86-64 ;; esac
    for f in "$@"; do
        m=$(readelf -h "$f" | sed -n 's/^ *Machine: *//p')
        [[ $m == *"$want"* ]] || { echo "$f: $m, not $arch"; bad=1; }
    done
    return $bad
}
check "every shipped ELF file is built for $arch" \
    machine "$tmp"/deb/usr/bin/* "$tmp"/deb/usr/lib/*/slurm-wlm/gpu_tracker.so \
    "$tmp"/rpm/usr/bin/* "$tmp"/rpm/usr/lib64/slurm/gpu_tracker.so
check "deb: shipped ELF files are stripped" stripped "$tmp"/deb/usr/bin/* "$tmp"/deb/usr/lib/*/slurm-wlm/gpu_tracker.so
check "rpm: shipped ELF files are stripped" stripped "$tmp"/rpm/usr/bin/* "$tmp"/rpm/usr/lib64/slurm/gpu_tracker.so
check "every shipped ELF needs GLIBC_2.28 at most (packaging/check-glibc.sh)" \
    packaging/check-glibc.sh --max 2.28 "$tmp/deb" "$tmp/rpm"
check "gpu-tracker from the .deb tracks a command${run:+ (under qemu-$arch)}" \
    bash -c "$run '$tmp/deb/usr/bin/gpu-tracker' -e 'sleep 0.2' | grep -q ."
check "gpu-tracker-report, gpu-tracker-exporter and gpu-tracker-mail from the .rpm answer --help" \
    bash -c "$run '$tmp/rpm/usr/bin/gpu-tracker-report' --help >/dev/null && $run '$tmp/rpm/usr/bin/gpu-tracker-exporter' --help >/dev/null && $run '$tmp/rpm/usr/bin/gpu-tracker-mail' --help >/dev/null"
# plugin_version: the 4 bytes (little-endian) at the symbol, as slurmstepd reads them.
plugin_version() {
    local so=$1 a
    a=$("${tools}nm" -D --defined-only "$so" | awk '$3 == "plugin_version" { print $1 }')
    [[ -n $a ]] || return 1
    "${tools}objdump" -s --start-address="0x$a" --stop-address="$(printf '0x%x' $((0x$a + 4)))" "$so" |
        awk 'END { b = $2; print "0x" substr(b, 7, 2) substr(b, 5, 2) substr(b, 3, 2) substr(b, 1, 2) }'
}
same_version() {
    local got
    got=$(plugin_version "$1") || { echo "no plugin_version in $1"; return 1; }
    echo "plugin_version $got, headers $num"
    (($(printf '%d' "$got") == $(printf '%d' "$num"))) && "${tools}nm" -D --defined-only "$1" | grep -qw slurm_spank_init
}
check "the plugin in each package exports slurm_spank_init and plugin_version $num (Slurm $release)" \
    bash -c "$(declare -f plugin_version same_version); num=$num tools=$tools
             same_version '$tmp/deb/usr/lib/$multiarch/slurm-wlm/gpu_tracker.so' &&
             same_version '$tmp/rpm/usr/lib64/slurm/gpu_tracker.so'"

echo "packages: $passed passed, $failed failed"
((failed == 0))
