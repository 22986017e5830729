#!/bin/bash
# Builds what the packages ship, for the RPM spec and debian/rules alike, and copies it to OUTDIR:
#   OUTDIR/gpu-tracker, gpu-tracker-report, gpu-tracker-exporter,
#          gpu-tracker-mail                                         the four programs
#   OUTDIR/gpu_tracker.so                                           the SPANK plugin
#   OUTDIR/slurm-version                                            the Slurm release it is for
# Unstripped: the package tools strip them and keep the debug info in the debug package.
#
# Environment:
#   GPU_TRACKER_GLIBC    a glibc version (2.28): build with `cargo zigbuild` for
#                        ARCH-unknown-linux-gnu.VERSION, so the files need no newer glibc than
#                        that whatever the build machine has (zig and cargo-zigbuild from PyPI).
#                        Unset: plain cargo, for the build machine's own glibc and newer.
#   GPU_TRACKER_ARCH     x86_64 or aarch64 (default: this machine's); another one needs
#                        GPU_TRACKER_GLIBC (zig is the cross linker) and rustup's std for it.
#   SLURM_INCLUDE_DIR    Slurm's headers (build.rs): default /usr/include.
#   CARGO_TARGET_DIR     cargo's, as usual: a package build may point it at a kept one.
set -euo pipefail
out=${1:?usage: packaging/cargo-build.sh OUTDIR}
cd "$(dirname "$0")/.."
arch=${GPU_TRACKER_ARCH:-$(uname -m)}
case $arch in
x86_64 | aarch64) ;;
arm64) arch=aarch64 ;;
amd64) arch=x86_64 ;;
*) echo "packaging/cargo-build.sh: unsupported architecture $arch" >&2; exit 2 ;;
esac
triple=$arch-unknown-linux-gnu
cargo=${CARGO:-cargo}
# The build id names each file's debug info (/usr/lib/debug/.build-id/): gcc passes it on its
# own on Debian and RHEL, zig's linker only when asked.
export RUSTFLAGS="${RUSTFLAGS:-} -C link-arg=-Wl,--build-id=sha1"
args=(--release --locked -p gpu-tracker --features spank --lib --bins)
if [[ -n ${GPU_TRACKER_GLIBC:-} ]]; then
    command -v cargo-zigbuild >/dev/null || {
        echo "packaging/cargo-build.sh: GPU_TRACKER_GLIBC needs cargo-zigbuild and zig (pip install ziglang cargo-zigbuild)" >&2
        exit 2
    }
    # bindgen parses spank.h for the target: its C library's headers, where they are not the
    # build machine's own (Debian's libc6-dev-arm64-cross).
    if [[ $arch != "$(uname -m)" && -d /usr/$arch-linux-gnu/include ]]; then
        export BINDGEN_EXTRA_CLANG_ARGS="${BINDGEN_EXTRA_CLANG_ARGS:-} -isystem /usr/$arch-linux-gnu/include"
    fi
    "$cargo" zigbuild "${args[@]}" --target "$triple.$GPU_TRACKER_GLIBC"
    built=${CARGO_TARGET_DIR:-target}/$triple/release
else
    [[ $arch == "$(uname -m)" ]] || {
        echo "packaging/cargo-build.sh: building for $arch here needs GPU_TRACKER_GLIBC (cargo zigbuild)" >&2
        exit 2
    }
    "$cargo" build "${args[@]}" --target "$triple"
    built=${CARGO_TARGET_DIR:-target}/$triple/release
fi
mkdir -p "$out"
for f in gpu-tracker gpu-tracker-report gpu-tracker-exporter gpu-tracker-mail; do
    install -m 0755 "$built/$f" "$out/$f"
done
install -m 0755 "$built/libgpu_tracker.so" "$out/gpu_tracker.so"
# The release the plugin was built for, as slurmstepd compares it: major.minor (22.05).
inc=${SLURM_INCLUDE_DIR:-/usr/include}
[[ -f $inc/slurm/slurm_version.h ]] || inc=/usr/local/include
num=$(sed -n 's/^#define SLURM_VERSION_NUMBER \(0x[0-9a-fA-F]*\).*/\1/p' "$inc/slurm/slurm_version.h")
[[ -n $num ]] || { echo "packaging/cargo-build.sh: no SLURM_VERSION_NUMBER in $inc/slurm/slurm_version.h" >&2; exit 1; }
printf '%d.%02d\n' $(((num >> 16) & 255)) $(((num >> 8) & 255)) >"$out/slurm-version"
