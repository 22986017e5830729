#!/bin/bash
# Builds the RPM and Debian packages from the checkout's HEAD (docs/INSTALL.md):
#   packaging/build.sh rpm|deb|both
# Out: target/packages/ (GPU_TRACKER_PKG_OUT): the .rpm files (gpu-tracker,
# slurm-spank-gpu-tracker, their -debuginfo), the .deb files (gpu-tracker,
# slurm-wlm-gpu-tracker-plugin, their -dbgsym) and gpu-tracker-VERSION.tar.gz, the source
# tarball `rpmbuild -ta` takes.
#
# The tree packed is HEAD as committed (git archive): uncommitted changes are left out, and the
# script says so. Both formats build in one unpacked copy (target/packages/src/) with the
# checkout's cargo target directory, so the second format and later runs reuse the first's build.
#
# Environment:
#   GPU_TRACKER_GLIBC   the oldest glibc the files must run on: 2.28 (RHEL 8) by default, built
#                       with cargo zigbuild (pip install ziglang cargo-zigbuild); "" builds with
#                       plain cargo for this machine's glibc.
#   SLURM_INCLUDE_DIR   Slurm's headers the plugin is built against (default /usr/include).
#   GPU_TRACKER_PKG_OUT where the packages go (default target/packages).
#   GPU_TRACKER_ARCH    x86_64 or aarch64: the packages' architecture (default this machine's).
#                       Another one is a cross build, with zig as the linker (GPU_TRACKER_GLIBC
#                       set), rustup's std for it and Debian's binutils and libc headers for it;
#                       the .deb also needs that architecture's libc6 in dpkg (multiarch), whose
#                       symbols dpkg-shlibdeps reads (docs/INSTALL.md, "aarch64").
#   GPU_TRACKER_SLURM_PKG  the RPM package that installs Slurm (default slurm; OpenHPC's is
#                       slurm-ohpc): the plugin's Requires and Conflicts name it.
#   RPMBUILD_NODEPS     1: rpmbuild --nodeps (the default where rpm has no slurm-devel
#                       installed, as on Debian, whose libslurm-dev then gives the headers).
set -euo pipefail
what=${1:-}
case $what in rpm | deb | both) ;; *) echo "usage: packaging/build.sh rpm|deb|both" >&2; exit 2 ;; esac
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
say() { echo "packaging/build.sh: $*" >&2; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
out=${GPU_TRACKER_PKG_OUT:-$repo/target/packages}
export GPU_TRACKER_GLIBC=${GPU_TRACKER_GLIBC-2.28}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
export SLURM_INCLUDE_DIR=${SLURM_INCLUDE_DIR:-/usr/include}
mkdir -p "$out"
out=$(cd "$out" && pwd)
arch=${GPU_TRACKER_ARCH:-$(uname -m)}
case $arch in
x86_64 | amd64) arch=x86_64 deb_arch=amd64 ;;
aarch64 | arm64) arch=aarch64 deb_arch=arm64 ;;
*) say "unsupported architecture $arch (x86_64 or aarch64)"; exit 2 ;;
esac
export GPU_TRACKER_ARCH=$arch
cross=()
if [[ $arch != "$(uname -m)" ]]; then
    [[ -n $GPU_TRACKER_GLIBC ]] || { say "building for $arch here needs GPU_TRACKER_GLIBC (cargo zigbuild links it)"; exit 2; }
    for t in "$arch-linux-gnu-strip" "$arch-linux-gnu-objdump"; do
        command -v "$t" >/dev/null || { say "$t not found (Debian: apt-get install binutils-$arch-linux-gnu)"; exit 2; }
    done
    [[ -d /usr/$arch-linux-gnu/include ]] || { say "no /usr/$arch-linux-gnu/include for bindgen (Debian: apt-get install libc6-dev-$deb_arch-cross)"; exit 2; }
    cross=(1)
fi

if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
    say "the working tree has uncommitted changes: the packages are of HEAD ($(git rev-parse --short HEAD)) without them"
fi
tarball=$out/gpu-tracker-$version.tar.gz
git archive --format=tar.gz --prefix="gpu-tracker-$version/" -o "$tarball" HEAD
src=$out/src
rm -rf "$src"
mkdir -p "$src"
tar -xzf "$tarball" -C "$src"
tree=$src/gpu-tracker-$version

build_rpm() {
    command -v rpmbuild >/dev/null || { say "rpmbuild not found (Debian: apt-get install rpm)"; return 1; }
    local top=$out/rpmbuild nodeps=()
    if [[ ${RPMBUILD_NODEPS:-} == 1 ]] || ! rpm -q slurm-devel >/dev/null 2>&1; then
        nodeps=(--nodeps)
    fi
    rm -rf "$top"
    mkdir -p "$top"/{RPMS,SRPMS,SOURCES,SPECS,BUILD}
    # In place: the unpacked tree the .deb build also uses, so cargo builds it once.
    local target=()
    # A cross build strips and reads the files with the binutils of their architecture.
    if ((${#cross[@]})); then
        target=(--target "$arch" --define "__strip $arch-linux-gnu-strip" --define "__objdump $arch-linux-gnu-objdump")
    fi
    (cd "$tree" && rpmbuild -bb --build-in-place "${nodeps[@]}" "${target[@]}" \
        --define "_topdir $top" --define "slurm_include_dir $SLURM_INCLUDE_DIR" \
        --define "slurm_pkg ${GPU_TRACKER_SLURM_PKG:-slurm}" \
        packaging/rpm/gpu-tracker.spec)
    find "$top/RPMS" -name '*.rpm' -exec mv -f {} "$out/" \;
    if command -v rpmlint >/dev/null; then
        say "rpmlint (packaging/rpm/gpu-tracker.rpmlintrc says why it stays silent on what it filters):"
        rpmlint -r packaging/rpm/gpu-tracker.rpmlintrc "$out"/*-"$version"-*.rpm || true
    fi
}

build_deb() {
    command -v dpkg-buildpackage >/dev/null || { say "dpkg-buildpackage not found (apt-get install dpkg-dev debhelper)"; return 1; }
    local target=()
    if ((${#cross[@]})); then
        # dpkg-shlibdeps reads the package's libraries' symbols from dpkg: that architecture's
        # libc6, installed beside this machine's (multiarch).
        dpkg -s "libc6:$deb_arch" >/dev/null 2>&1 || {
            say "the $deb_arch .deb needs libc6:$deb_arch in dpkg, for dpkg-shlibdeps (dpkg --add-architecture $deb_arch; apt-get update; apt-get install libc6:$deb_arch)"
            return 1
        }
        # -d: Build-Depends name this machine's own (its libslurm-dev gives the headers, which
        # are the same for every architecture), not $deb_arch's.
        target=(-a "$deb_arch" -d)
    fi
    (cd "$tree" && dpkg-buildpackage -b -us -uc "${target[@]}")
    find "$src" -maxdepth 1 \( -name '*.deb' -o -name '*.ddeb' -o -name '*.buildinfo' -o -name '*.changes' \) \
        -exec mv -f {} "$out/" \;
}

t0=$SECONDS
case $what in
rpm) build_rpm ;;
deb) build_deb ;;
both) build_rpm; build_deb ;;
esac
say "built in $((SECONDS - t0)) s, in $out:"
ls -l "$out"/*.rpm "$out"/*.deb 2>/dev/null || true
