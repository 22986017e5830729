//! Safe wrappers over the few libc calls the library needs. Every `unsafe` block of the library
//! outside the FFI modules lives here, one per call.
//!
//! One file per job; everything is re-exported here, so callers say `crate::sys::name`.

mod children;
mod dir;
mod environment;
mod fd;
mod job_output;
mod process;
mod small_file;
mod socket;
mod stream;
mod users;
mod wait;

pub use children::{
    CgroupJoin, ExitStatus, forward_signals_to, join_cgroup, set_child_subreaper,
    set_interactive_signals, signal_name, spawn_shell, wait_any_ended, wait4,
};
pub use dir::{DirEntries, DirEntry, EntryType, list_dir, list_dir_reusing, parse_dirent};
pub use environment::{replace_environment_at_start, syslog_line};
pub use fd::{
    create_at, fd_filesystem_type, fd_identity, filesystem_type_of, grow_fd_table, is_fuse,
    move_fd_at_least, openat, rename_at, rename_noreplace, set_cloexec, try_lock, unlinkat,
};
pub use fd::{mkdirat, openat_mode, readlink_fd};
pub use job_output::{JOB_OUTPUT_DEADLINE, write_to_job_output, write_to_job_output_within};
pub use process::{
    Rusage, Who, clock_ticks, euid, gettid, glibc_version, hostname, nofile_limit, online_cpus,
    page_size, pin_this_object, raise_nofile_limit, rusage, thread_cpu_seconds, uid,
};
pub use small_file::read_small_file;
pub use socket::{pass_credentials, recv_with_sender};
pub use stream::{bytes_waiting, reset_on_close, set_send_buffer};
pub use users::{grant_user_read, group_id, user_home, user_name};
pub use wait::{Wake, wait_readable};
