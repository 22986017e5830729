//! The directory of the command's phase-mark socket: this user's own, private, removed when
//! the run ends.

use std::path::{Path, PathBuf};

/// A directory of this user's own for the phase-mark socket, removed when dropped.
pub(super) struct MarkDir(PathBuf);

impl MarkDir {
    /// Makes it in `XDG_RUNTIME_DIR`, else the temporary directory; `None` when it cannot be
    /// made (phase marks are then off).
    pub(super) fn create() -> Option<MarkDir> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("gpu-tracker-{}-{nanos}", std::process::id()));
        // Made here, private: nobody else can put a file in it or send through it.
        std::fs::DirBuilder::new().mode(0o700).create(&dir).ok()?;
        Some(MarkDir(dir))
    }

    /// Where it is.
    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for MarkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
