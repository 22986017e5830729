//! Listing a directory through an open descriptor (`getdents64(2)`): what is listed is the
//! directory that was opened and checked, whatever its path names by then. `std::fs::read_dir`
//! takes a path, and would list whatever is found there at that moment.
//!
//! The one `unsafe` call here is `getdents64`; its records are read by a pure parser.

use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;

/// Bytes asked of the kernel per call: about a thousand entries of short names.
const BUF_BYTES: usize = 32 << 10;

/// An entry's type as the directory gives it (`d_type`), a symbolic link not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryType {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Other,
    /// Not said (some filesystems never say): look at the entry itself.
    Unknown,
}

/// One entry of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Its name, without a path (never `.` or `..`).
    pub name: Vec<u8>,
    /// Its type.
    pub kind: EntryType,
}

fn entry_type(d_type: u8) -> EntryType {
    match d_type {
        libc::DT_REG => EntryType::File,
        libc::DT_DIR => EntryType::Dir,
        libc::DT_LNK => EntryType::Symlink,
        libc::DT_UNKNOWN => EntryType::Unknown,
        _ => EntryType::Other,
    }
}

/// The first `linux_dirent64` record of `buf` (pure): its length in `buf` and its entry. The
/// record: `d_ino` (8 bytes), `d_off` (8), `d_reclen` (2), `d_type` (1), the name up to a NUL,
/// padding to `d_reclen`. An error when it is cut short or its length does not fit.
pub fn parse_dirent(buf: &[u8]) -> io::Result<(usize, DirEntry)> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "a malformed directory record");
    let len = usize::from(u16::from_ne_bytes([
        *buf.get(16).ok_or_else(bad)?,
        *buf.get(17).ok_or_else(bad)?,
    ]));
    if len < 20 || len > buf.len() {
        return Err(bad());
    }
    let name = &buf[19..len];
    let end = name.iter().position(|b| *b == 0).ok_or_else(bad)?;
    let entry = DirEntry {
        name: name[..end].to_vec(),
        kind: entry_type(buf[18]),
    };
    Ok((len, entry))
}

/// The entries of an open directory (see [`list_dir`]).
#[derive(Debug)]
pub struct DirEntries<'a> {
    dir: &'a std::fs::File,
    buf: Vec<u8>,
    at: usize,
    end: usize,
    done: bool,
}

/// Lists the open directory `dir` from its start, `.` and `..` left out. An error of the
/// kernel's (an I/O error, a directory removed since it was opened) is the iterator's last item.
/// It moves `dir`'s position: list a directory from one thread at a time.
pub fn list_dir(dir: &std::fs::File) -> io::Result<DirEntries<'_>> {
    list_dir_reusing(dir, Vec::new())
}

/// As [`list_dir`], reading through `buf` (taken back with [`DirEntries::into_buffer`]), made
/// [`BUF_BYTES`] long if it is shorter: a caller that lists a directory at every sample
/// allocates and zeroes no buffer each time.
pub fn list_dir_reusing(dir: &std::fs::File, mut buf: Vec<u8>) -> io::Result<DirEntries<'_>> {
    let mut at = dir;
    at.seek(SeekFrom::Start(0))?;
    if buf.len() < BUF_BYTES {
        buf.resize(BUF_BYTES, 0);
    }
    Ok(DirEntries {
        dir,
        buf,
        at: 0,
        end: 0,
        done: false,
    })
}

impl DirEntries<'_> {
    /// The buffer, for the next [`list_dir_reusing`].
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }
}

impl Iterator for DirEntries<'_> {
    type Item = io::Result<DirEntry>;

    fn next(&mut self) -> Option<io::Result<DirEntry>> {
        loop {
            if self.at < self.end {
                match parse_dirent(&self.buf[self.at..self.end]) {
                    Ok((len, e)) => {
                        self.at += len;
                        if e.name != b"." && e.name != b".." {
                            return Some(Ok(e));
                        }
                        continue;
                    }
                    Err(e) => {
                        self.done = true;
                        self.at = self.end;
                        return Some(Err(e));
                    }
                }
            }
            if self.done {
                return None;
            }
            // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes for the call, and the
            // descriptor is borrowed, so open, for as long as `self` is.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    self.dir.as_raw_fd(),
                    self.buf.as_mut_ptr(),
                    self.buf.len(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                self.done = true;
                return Some(Err(e));
            }
            if n == 0 {
                self.done = true;
                return None;
            }
            self.at = 0;
            self.end = (n as usize).min(self.buf.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;

    fn record(name: &[u8], d_type: u8, len: u16) -> Vec<u8> {
        let mut r = vec![0u8; 16];
        r.extend_from_slice(&len.to_ne_bytes());
        r.push(d_type);
        r.extend_from_slice(name);
        r.resize(usize::from(len), 0);
        r
    }

    #[test]
    fn records_are_parsed_and_malformed_ones_refused() {
        let mut two = record(b"a.json", libc::DT_REG, 32);
        two.extend(record(b"sub", libc::DT_DIR, 24));
        let (len, e) = parse_dirent(&two).unwrap();
        assert_eq!(
            (len, e.name.as_slice(), e.kind),
            (32, &b"a.json"[..], EntryType::File)
        );
        let (len, e) = parse_dirent(&two[32..]).unwrap();
        assert_eq!(
            (len, e.name.as_slice(), e.kind),
            (24, &b"sub"[..], EntryType::Dir)
        );
        assert_eq!(
            parse_dirent(&record(b"l", libc::DT_LNK, 24))
                .unwrap()
                .1
                .kind,
            EntryType::Symlink
        );
        assert_eq!(
            parse_dirent(&record(b"f", libc::DT_FIFO, 24))
                .unwrap()
                .1
                .kind,
            EntryType::Other
        );
        // Cut short, a length past the buffer or too small, a name without its NUL.
        assert!(parse_dirent(&two[..10]).is_err());
        assert!(parse_dirent(&two[..31]).is_err());
        assert!(parse_dirent(&record(b"x", libc::DT_REG, 8)).is_err());
        let mut unended = record(b"abcde", libc::DT_REG, 24);
        unended.truncate(24);
        unended[19..24].copy_from_slice(b"abcde");
        assert!(parse_dirent(&unended).is_err());
    }

    #[test]
    fn an_open_directory_is_listed_whole_by_its_descriptor() {
        let t = TempTree::new("sys-dir");
        let d = t.path().join("d");
        std::fs::create_dir(&d).unwrap();
        // More than one call's buffer of entries.
        for i in 0..2500 {
            std::fs::write(d.join(format!("file-with-a-longish-name-{i}.json")), "").unwrap();
        }
        std::fs::create_dir(d.join("sub")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("link")).unwrap();
        let f = std::fs::File::open(&d).unwrap();
        // Renamed away: the descriptor still lists it.
        std::fs::rename(&d, t.path().join("moved")).unwrap();
        std::fs::create_dir(&d).unwrap();
        for round in 0..2 {
            let mut got: Vec<DirEntry> = list_dir(&f).unwrap().map(Result::unwrap).collect();
            got.sort_by(|a, b| a.name.cmp(&b.name));
            assert_eq!(got.len(), 2502, "round {round}");
            let kind = |n: &[u8]| got.iter().find(|e| e.name == n).map(|e| e.kind);
            assert_eq!(kind(b"sub"), Some(EntryType::Dir));
            assert_eq!(kind(b"link"), Some(EntryType::Symlink));
            assert_eq!(
                kind(b"file-with-a-longish-name-7.json"),
                Some(EntryType::File)
            );
        }
    }

    #[test]
    fn a_directory_removed_once_opened_is_an_error_not_an_empty_list() {
        let t = TempTree::new("sys-dir-gone");
        let d = t.path().join("d");
        std::fs::create_dir(&d).unwrap();
        let f = std::fs::File::open(&d).unwrap();
        std::fs::remove_dir(&d).unwrap();
        let got: Vec<io::Result<DirEntry>> = list_dir(&f).unwrap().collect();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].as_ref().unwrap_err().kind(), io::ErrorKind::NotFound);
    }
}
