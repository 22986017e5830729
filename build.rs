//! Build script. With the `spank` feature it generates the SPANK bindings with `bindgen` from
//! the site's `slurm/spank.h`; `plugin_version` comes from `SLURM_VERSION_NUMBER` in the same
//! headers (`slurm/slurm_version.h`), so the plugin is built for the Slurm release installed.
//! Without the feature (the `gpu-tracker` command alone) nothing is generated and no Slurm
//! headers are needed.
//!
//! A missing header or a missing libclang stops the build with one line that says what fixes it.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    #[cfg(feature = "spank")]
    spank::generate();
}

#[cfg(feature = "spank")]
mod spank {
    use std::path::{Path, PathBuf};

    const FIX_HEADERS: &str = "install Debian's libslurm-dev (apt-get install libslurm-dev), \
                               or set SLURM_INCLUDE_DIR to the directory holding slurm/spank.h";
    const FIX_CLANG: &str = "bindgen needs libclang: install Debian's libclang-dev \
                             (apt-get install libclang-dev), or set LIBCLANG_PATH";

    /// Stops the build with one line on stderr (cargo shows it under the build script's name).
    fn fail(msg: String) -> ! {
        eprintln!("gpu-tracker build: {msg}");
        std::process::exit(1);
    }

    fn include_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("SLURM_INCLUDE_DIR") {
            let dir = PathBuf::from(dir);
            if !dir.join("slurm/spank.h").is_file() {
                fail(format!(
                    "SLURM_INCLUDE_DIR={} has no slurm/spank.h; {FIX_HEADERS}",
                    dir.display()
                ));
            }
            return dir;
        }
        ["/usr/include", "/usr/local/include"]
            .iter()
            .map(PathBuf::from)
            .find(|d| d.join("slurm/spank.h").is_file())
            .unwrap_or_else(|| fail(format!("slurm/spank.h not found; {FIX_HEADERS}")))
    }

    pub fn generate() {
        let inc = include_dir();
        for h in ["slurm/spank.h", "slurm/slurm_version.h"] {
            let p = inc.join(h);
            if !p.is_file() {
                fail(format!("{} not found; {FIX_HEADERS}", p.display()));
            }
            println!("cargo:rerun-if-changed={}", p.display());
        }
        let header = inc.join("slurm/spank.h");
        let builder = bindgen::Builder::default()
            .header(header.to_string_lossy())
            .clang_arg(format!("-I{}", inc.display()))
            // Only the 22.05 API that the plugin calls: a symbol the running Slurm lacks would
            // keep the plugin from loading (Rust cdylibs bind eagerly).
            .allowlist_function(
                "spank_(context|option_register|option_getopt|get_item|getenv|setenv|job_control_setenv|strerror)",
            )
            .allowlist_function("slurm_(info|error|verbose|debug)")
            .allowlist_type("spank_(t|item|item_t|context|context_t|option|err_t|opt_cb_f)")
            .allowlist_var("SLURM_VERSION_NUMBER|SLURM_SUCCESS|ESPANK_.*")
            .rustified_enum("spank_context")
            .constified_enum_module("spank_item")
            .layout_tests(false)
            .generate_comments(false);
        // bindgen panics when it cannot load libclang: turn that into the one-line message.
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let generated =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
        std::panic::set_hook(prev);
        let bindings = match generated {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => fail(format!("bindgen failed on {}: {e}", header.display())),
            Err(p) => {
                let why = p
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| p.downcast_ref::<&str>().copied())
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                fail(format!("{FIX_CLANG} ({why})"))
            }
        };
        let out = Path::new(&std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("spank.rs");
        if let Err(e) = bindings.write_to_file(&out) {
            fail(format!("cannot write {}: {e}", out.display()));
        }
    }
}
