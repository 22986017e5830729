//! Build script. The SPANK plugin's bindings will be generated here with `bindgen` from the
//! site's `slurm/spank.h` (and `plugin_version` taken from `slurm/slurm_version.h`); until the
//! plugin lands, the crate needs nothing generated.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
