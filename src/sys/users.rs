//! Users and groups: names from the system's databases, and read access granted by POSIX ACL.

/// The login name of user `uid` from the system's user database (`None`: no such user, or
/// the lookup failed).
pub fn user_name(uid: u32) -> Option<String> {
    passwd_field(uid, |pw| pw.pw_name)
}

/// The home directory of user `uid` from the system's user database (`None`: no such user, no
/// home, or the lookup failed).
pub fn user_home(uid: u32) -> Option<std::path::PathBuf> {
    passwd_field(uid, |pw| pw.pw_dir)
        .filter(|d| d.starts_with('/'))
        .map(std::path::PathBuf::from)
}

/// One text field (`field` picks it) of user `uid`'s entry in the user database.
fn passwd_field(uid: u32, field: impl Fn(&libc::passwd) -> *mut libc::c_char) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: an all-zero passwd is a valid value for getpwuid_r to overwrite.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: `pw`, `buf` (with its true length) and `found` are valid for writes for the call.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    let text = field(&pw);
    if rc != 0 || found.is_null() || text.is_null() {
        return None;
    }
    // SAFETY: on success the passwd's strings are NUL-terminated inside `buf`, alive here.
    let text = unsafe { std::ffi::CStr::from_ptr(text) };
    Some(text.to_string_lossy().into_owned())
}

/// The id of group `name` from the system's group database (a name of digits is the id
/// itself). `None`: no such group, or the lookup failed. A group with many members needs a
/// larger buffer than a user: it grows up to 1 MiB.
pub fn group_id(name: &str) -> Option<u32> {
    if let Ok(gid) = name.parse::<u32>() {
        return Some(gid);
    }
    let c_name = std::ffi::CString::new(name).ok()?;
    let mut len = 16 << 10;
    loop {
        let mut buf = vec![0 as libc::c_char; len];
        // SAFETY: an all-zero group is a valid value for getgrnam_r to overwrite.
        let mut gr: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `c_name` is NUL-terminated; `gr`, `buf` (with its true length) and `found`
        // are valid for writes for the call.
        let rc = unsafe {
            libc::getgrnam_r(
                c_name.as_ptr(),
                &mut gr,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            )
        };
        if rc == libc::ERANGE && len < 1 << 20 {
            len *= 4;
            continue;
        }
        return (rc == 0 && !found.is_null()).then_some(gr.gr_gid);
    }
}

/// Gives user `uid` read access to `path` (and search access, for a directory) with a POSIX
/// access ACL, on top of its mode: group and others keep no access. Replaces any ACL there.
pub fn grant_user_read(path: &std::path::Path, uid: u32, dir: bool) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    // The kernel's xattr form of an access ACL: a version, then (tag, perm, id) entries sorted
    // by tag (USER_OBJ, USER, GROUP_OBJ, MASK, OTHER).
    const VERSION: u32 = 2;
    const USER_OBJ: u16 = 0x01;
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    const UNDEFINED_ID: u32 = u32::MAX;
    let (owner, read) = if dir { (7u16, 5u16) } else { (6u16, 4u16) };
    let mut buf = VERSION.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (USER_OBJ, owner, UNDEFINED_ID),
        (USER, read, uid),
        (GROUP_OBJ, 0, UNDEFINED_ID),
        (MASK, read, UNDEFINED_ID),
        (OTHER, 0, UNDEFINED_ID),
    ] {
        buf.extend_from_slice(&tag.to_le_bytes());
        buf.extend_from_slice(&perm.to_le_bytes());
        buf.extend_from_slice(&id.to_le_bytes());
    }
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: both strings are NUL-terminated, and `buf` is valid for `buf.len()` bytes.
    let rc = unsafe {
        libc::lsetxattr(
            c_path.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            buf.as_ptr().cast(),
            buf.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn groups_are_found_by_name_or_number() {
        assert_eq!(super::group_id("root"), Some(0));
        assert_eq!(super::group_id("4242"), Some(4242));
        assert_eq!(super::group_id("no-such-group-gpu-tracker"), None);
        assert_eq!(super::group_id("a\0b"), None);
    }
}
