//! Reading the small sysfs files of amdgpu and KFD, bounded: a file is read up to a limit and
//! refused past it, and only a regular file is read (a FIFO or device put in a test root's place
//! is refused without waiting on it). Outcomes are typed so each "no data" rule can say why.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Most bytes read of a text attribute (sysfs gives at most a page).
pub const MAX_TEXT: u64 = 4096;
/// Most bytes read of `gpu_metrics` (a page at most, as sysfs gives it; the 1.8 table is about
/// 2 KiB).
pub const MAX_METRICS: u64 = 16 << 10;
/// Most bytes read of a KFD `properties` file.
pub const MAX_PROPERTIES: u64 = 16 << 10;

/// Why a file gave no value.
#[derive(Debug)]
pub enum FileProblem {
    /// It is not there (this kernel or GPU does not give it, or the process or device went).
    Missing(PathBuf),
    /// It is there but could not be read (a driver error, permissions, too large, not a regular
    /// file).
    Unreadable(PathBuf, std::io::Error),
    /// It was read but does not hold what it should.
    Garbage(PathBuf, String),
}

impl FileProblem {
    /// Whether the file is absent.
    pub fn is_missing(&self) -> bool {
        matches!(self, FileProblem::Missing(_))
    }
}

impl std::fmt::Display for FileProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileProblem::Missing(p) => write!(f, "{} is missing", p.display()),
            FileProblem::Unreadable(p, e) => write!(f, "{} could not be read: {e}", p.display()),
            FileProblem::Garbage(p, what) => write!(f, "{} holds {what}", p.display()),
        }
    }
}

/// The bytes of the regular file `path`, at most `max`.
pub fn read_bytes(path: &Path, max: u64) -> Result<Vec<u8>, FileProblem> {
    let fail = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::NotFound {
            FileProblem::Missing(path.to_path_buf())
        } else {
            FileProblem::Unreadable(path.to_path_buf(), e)
        }
    };
    let refuse = |why: &str| {
        FileProblem::Unreadable(
            path.to_path_buf(),
            std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string()),
        )
    };
    // Non-blocking, so a FIFO in a test root's place is not waited on; checked after opening,
    // on what was opened. Sysfs files are regular files.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(fail)?;
    if !f.metadata().map_err(fail)?.is_file() {
        return Err(refuse("not a regular file"));
    }
    let mut out = Vec::new();
    f.take(max + 1).read_to_end(&mut out).map_err(fail)?;
    if out.len() as u64 > max {
        return Err(refuse("larger than a sysfs file"));
    }
    Ok(out)
}

/// The text of `path`, at most `max` bytes.
pub fn read_text(path: &Path, max: u64) -> Result<String, FileProblem> {
    let b = read_bytes(path, max)?;
    String::from_utf8(b).map_err(|_| FileProblem::Garbage(path.to_path_buf(), "not text".into()))
}

/// The unsigned decimal in `path` (a sysfs number file).
pub fn read_number(path: &Path) -> Result<u64, FileProblem> {
    let t = read_text(path, MAX_TEXT)?;
    super::parse::parse_number(&t).ok_or_else(|| {
        let shown = crate::text::clean_text(t.trim(), 40);
        FileProblem::Garbage(path.to_path_buf(), format!("{shown:?}, not a number"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_way_a_file_can_fail_is_told_apart() {
        let dir =
            std::env::temp_dir().join(format!("gpu-tracker-amd-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("n"), "60\n").unwrap();
        std::fs::write(dir.join("g"), "busy\n").unwrap();
        std::fs::write(dir.join("big"), vec![b'1'; 5000]).unwrap();
        std::fs::write(dir.join("bin"), [0xff, 0xfe]).unwrap();
        std::fs::create_dir(dir.join("d")).unwrap();
        assert_eq!(read_number(&dir.join("n")).unwrap(), 60);
        assert!(read_number(&dir.join("absent")).unwrap_err().is_missing());
        let g = read_number(&dir.join("g")).unwrap_err();
        assert!(matches!(g, FileProblem::Garbage(..)), "{g}");
        assert!(g.to_string().contains("\"busy\", not a number"), "{g}");
        assert!(matches!(
            read_number(&dir.join("big")),
            Err(FileProblem::Unreadable(..))
        ));
        assert!(matches!(
            read_text(&dir.join("bin"), MAX_TEXT),
            Err(FileProblem::Garbage(..))
        ));
        assert_eq!(read_bytes(&dir.join("bin"), 2).unwrap(), [0xff, 0xfe]);
        assert!(matches!(
            read_number(&dir.join("d")),
            Err(FileProblem::Unreadable(..))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
