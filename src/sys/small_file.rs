//! Reading a small configuration file that a FIFO or a device may stand in for.

use std::path::Path;

/// Reads a small text file that only a regular file of at most `max` bytes may be (a symbolic
/// link to one is followed): a FIFO, device or directory in its place is refused without being
/// opened or waited on (`stat` before, and `fstat` after a non-blocking open), and a larger file
/// is refused as not `what` (e.g. "a settings file"). Errors keep the system's kind (`NotFound`
/// for a missing file).
pub fn read_small_file(path: &Path, max: u64, what: &str) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    let too_large = || refuse(format!("larger than {} MiB: not {what}", max >> 20));
    // Looked at before opening, so that no device is opened (opening some has effects), and
    // again on what was opened, in case the path changed in between.
    if !std::fs::metadata(path)?.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    if m.len() > max {
        return Err(too_large());
    }
    let mut text = String::new();
    f.take(max + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(too_large());
    }
    Ok(text)
}
