//! What slurmstepd's loader will find in the plugin file, read from its ELF headers without
//! loading it: the `plugin_version` Slurm compares with its own release, the machine it was
//! built for, and the glibc symbol versions it needs.
//!
//! Why read the file rather than `dlopen` it: loading a shared object runs its initializers,
//! so a check run as root would run the plugin's code (or whatever a broken install put at
//! that path) in its own process; and a plugin that needs a newer glibc than the node's fails
//! to load, which is the very case to tell apart. Reading runs nothing. The `object` crate
//! (gimli-rs, the reader the Rust toolchain's own backtraces use) parses the headers; only the
//! parts asked for are read from the file (`ReadCache`), not its tens of megabytes.

use std::fs::File;
use std::path::Path;

use object::read::elf::{ElfFile64, FileHeader};
use object::{Endianness, Object, ObjectSection, ObjectSymbol, ReadCache};

/// What the plugin file says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginElf {
    /// `plugin_version`: the `SLURM_VERSION_NUMBER` it was built with; `None` when the file
    /// exports no such symbol (not a Slurm plugin).
    pub plugin_version: Option<u32>,
    /// The machine it was built for (`x86_64`, `aarch64`, ...).
    pub machine: &'static str,
    /// The `GLIBC_*` versions it needs, as written (`GLIBC_2.34`).
    pub glibc_needs: Vec<String>,
}

/// Reads the plugin file at `path` (a 64-bit ELF shared object).
pub fn read_plugin(path: &Path) -> Result<PluginElf, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cache = ReadCache::new(file);
    let elf = ElfFile64::<Endianness, _>::parse(&cache)
        .map_err(|e| format!("{}: not a 64-bit ELF shared object ({e})", path.display()))?;
    let endian = elf.endian();
    let plugin_version = elf
        .dynamic_symbols()
        .find(|s| s.name() == Ok("plugin_version") && s.is_definition())
        .and_then(|s| {
            let section = elf.section_by_index(s.section_index()?).ok()?;
            let bytes = section.data_range(s.address(), 4).ok()??;
            let b: [u8; 4] = bytes.try_into().ok()?;
            Some(if elf.is_little_endian() {
                u32::from_le_bytes(b)
            } else {
                u32::from_be_bytes(b)
            })
        });
    let mut glibc_needs = Vec::new();
    let sections = elf.elf_section_table();
    let needs = sections
        .gnu_verneed(endian, elf.data())
        .map_err(|e| format!("{}: its version needs: {e}", path.display()))?;
    if let Some((mut files, link)) = needs {
        let strings = sections
            .strings(endian, elf.data(), link)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        while let Ok(Some((_, mut versions))) = files.next() {
            while let Ok(Some(v)) = versions.next() {
                if let Ok(name) = v.name(endian, strings) {
                    let name = String::from_utf8_lossy(name).into_owned();
                    if name.starts_with("GLIBC_") && !glibc_needs.contains(&name) {
                        glibc_needs.push(name);
                    }
                }
            }
        }
    }
    Ok(PluginElf {
        plugin_version,
        machine: machine_name(elf.elf_header().e_machine(endian)),
        glibc_needs,
    })
}

/// A name for an ELF `e_machine`, as `uname -m` says it.
pub fn machine_name(e_machine: u16) -> &'static str {
    match e_machine {
        object::elf::EM_X86_64 => "x86_64",
        object::elf::EM_AARCH64 => "aarch64",
        object::elf::EM_PPC64 => "ppc64le",
        object::elf::EM_RISCV => "riscv64",
        object::elf::EM_386 => "i386",
        _ => "another machine",
    }
}

/// The release a `SLURM_VERSION_NUMBER` names: (major, minor, micro), as Slurm's
/// `SLURM_VERSION_NUM(a, b, c)` packs it (`a << 16 | b << 8 | c`).
pub fn slurm_release(version_number: u32) -> (u32, u32, u32) {
    (
        version_number >> 16,
        (version_number >> 8) & 0xff,
        version_number & 0xff,
    )
}

/// A glibc version (`2.34`, or `GLIBC_2.34`) as numbers; `None` for anything else
/// (`GLIBC_PRIVATE`).
pub fn glibc_number(v: &str) -> Option<(u32, u32, u32)> {
    let v = v.strip_prefix("GLIBC_").unwrap_or(v);
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let micro = match parts.next() {
        Some(p) => p?,
        None => 0,
    };
    parts.next().is_none().then_some((major, minor, micro))
}

/// The newest of the `GLIBC_*` versions `needs` lists, as written; `None` when it lists none
/// with a number.
pub fn newest_glibc(needs: &[String]) -> Option<&str> {
    needs
        .iter()
        .filter_map(|n| Some((glibc_number(n)?, n.as_str())))
        .max()
        .map(|(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_versions_are_compared_as_numbers() {
        assert_eq!(glibc_number("GLIBC_2.34"), Some((2, 34, 0)));
        assert_eq!(glibc_number("2.2.5"), Some((2, 2, 5)));
        assert_eq!(glibc_number("GLIBC_PRIVATE"), None);
        assert_eq!(glibc_number("2"), None);
        assert_eq!(glibc_number("2.3.4.5"), None);
        let needs: Vec<String> = ["GLIBC_2.2.5", "GLIBC_2.34", "GLIBC_2.9", "GLIBC_PRIVATE"]
            .map(String::from)
            .to_vec();
        // 2.34 is newer than 2.9, though it sorts before it as text.
        assert_eq!(newest_glibc(&needs), Some("GLIBC_2.34"));
        assert_eq!(newest_glibc(&["GLIBC_PRIVATE".into()]), None);
    }

    #[test]
    fn a_version_number_names_its_release() {
        // Slurm 22.05.8 and 24.11.0 as slurm_version.h packs them.
        assert_eq!(slurm_release(0x16_05_08), (22, 5, 8));
        assert_eq!(slurm_release((24 << 16) | (11 << 8)), (24, 11, 0));
    }

    #[test]
    fn an_elf_file_is_read_without_loading_it() {
        // This test program: an ELF of this machine that needs glibc, and no Slurm plugin.
        let exe = std::env::current_exe().unwrap();
        let e = read_plugin(&exe).unwrap();
        assert_eq!(e.plugin_version, None);
        assert_eq!(e.machine, std::env::consts::ARCH);
        assert!(
            e.glibc_needs.iter().any(|n| n.starts_with("GLIBC_2.")),
            "{:?}",
            e.glibc_needs
        );
        let newest = glibc_number(newest_glibc(&e.glibc_needs).unwrap()).unwrap();
        let here = glibc_number(&crate::sys::glibc_version()).unwrap();
        assert!(newest <= here, "{newest:?} {here:?}");
        // Not an ELF file at all.
        let t = crate::cgroup::fixture::TempTree::new("elf-not");
        t.write("x.so", "#!/bin/sh\n");
        let err = read_plugin(&t.path().join("x.so")).unwrap_err();
        assert!(err.contains("not a 64-bit ELF"), "{err}");
    }
}
