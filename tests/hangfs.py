#!/usr/bin/python3
"""hangfs: a test-only FUSE filesystem whose writes can be made to hang or to take nothing.

Usage (as root, in the foreground; stop it with Ctrl-C, SIGTERM or `umount MOUNTPOINT`):

    /usr/bin/python3 tests/hangfs.py --control CONTROL_DIR BACKING_DIR MOUNTPOINT

It passes every file of MOUNTPOINT through to BACKING_DIR. It is mounted with `allow_other`
and `default_permissions`, so any user may use it and the kernel applies the usual permission
checks; files, directories and links are created owned by the user who creates them (as
slurmstepd creates a job's output file as the job's user). Every file is opened with direct I/O,
so each write(2) on the mount is one request to this process, answered before write(2) returns.

CONTROL_DIR is an ordinary directory outside the mount. While a file named `hang` exists in it,
every write on the mount blocks (until `hang` is removed); while `zero` exists there, every
write returns 0 bytes written.

A writer blocked here cannot be killed: once this process has taken a request, the kernel waits
for its answer uninterruptibly (state D, in request_wait_answer), even after SIGKILL, so
`timeout 3 sh -c 'echo x >> MOUNTPOINT/f'` sends its signal at 3 s but returns (124) only when
`hang` is removed; a process with a thread blocked here does not finish exiting until then
either. Stopping hangfs (Ctrl-C, SIGTERM) fails such writes with EIO, then unmounts.

It logs each blocked write, its release, and the 1st, 10th, 100th, ... 0-byte write in a row
(a writer that retries a 0-byte write forever shows as a growing count) on stdout.

    mkdir -p /tmp/hang/{backing,mnt,control}
    /usr/bin/python3 tests/hangfs.py --control /tmp/hang/control /tmp/hang/backing /tmp/hang/mnt &
    touch /tmp/hang/control/hang     # writes on /tmp/hang/mnt now block
    rm /tmp/hang/control/hang        # and go through again

Needs Debian's python3-fusepy (which brings libfuse2) and fuse3 (fusermount3, /etc/fuse.conf):
`apt-get install -y python3-fusepy fuse3`, and the kernel's fuse module (/dev/fuse). Run it with
Debian's /usr/bin/python3: the module is installed for that one.
"""

import argparse
import ctypes
import errno
import os
import sys
import threading
import time

try:
    import fusepy as fuse  # Debian's name for fusepy's module
except ImportError:
    try:
        import fuse  # upstream's
    except ImportError:
        sys.exit(
            f"hangfs: no fusepy module for {sys.executable}: apt-get install python3-fusepy "
            "and run it with Debian's /usr/bin/python3"
        )

POLL_SECONDS = 0.1

# libfuse's own flag, set by its SIGINT/SIGTERM/SIGHUP handler: a blocked write gives up then,
# or libfuse would wait for it forever before unmounting.
fuse._libfuse.fuse_exited.argtypes = [ctypes.c_void_p]
fuse._libfuse.fuse_exited.restype = ctypes.c_int


def exiting():
    """Whether libfuse is stopping (called while answering a request)."""
    return fuse._libfuse.fuse_exited(fuse._libfuse.fuse_get_context().contents.fuse) != 0


class HangFs(fuse.Operations):
    """Passthrough to a backing directory, with writes governed by the control directory."""

    use_ns = True  # times as integer nanoseconds

    def __init__(self, backing, control):
        self.backing = backing
        self.hang = os.path.join(control, "hang")
        self.zero = os.path.join(control, "zero")
        self.stopping = threading.Event()
        self.counting = threading.Lock()  # not "lock": that name is a FUSE operation
        self.zero_writes = 0  # in a row

    def _full(self, path):
        return os.path.join(self.backing, path.lstrip("/"))

    def _give_to_caller(self, full):
        uid, gid, _pid = fuse.fuse_get_context()
        os.lchown(full, uid, gid)

    def destroy(self, path):
        self.stopping.set()

    # Metadata.

    def getattr(self, path, fh=None):
        st = os.lstat(self._full(path))
        attrs = {
            k: getattr(st, k)
            for k in (
                "st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks", "st_rdev",
            )
        }
        attrs.update(
            st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns
        )
        return attrs

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._full(path))

    def readlink(self, path):
        return os.readlink(self._full(path))

    def statfs(self, path):
        sv = os.statvfs(self._full(path))
        return {
            k: getattr(sv, k)
            for k in (
                "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax",
            )
        }

    def chmod(self, path, mode):
        os.chmod(self._full(path), mode)

    def chown(self, path, uid, gid):
        os.lchown(self._full(path), uid, gid)

    def utimens(self, path, times=None):
        if times is None:
            os.utime(self._full(path), follow_symlinks=False)
        else:
            os.utime(self._full(path), ns=times, follow_symlinks=False)

    def truncate(self, path, length, fh=None):
        os.truncate(self._full(path), length)

    # Names.

    def mkdir(self, path, mode):
        full = self._full(path)
        os.mkdir(full, mode)
        self._give_to_caller(full)

    def rmdir(self, path):
        os.rmdir(self._full(path))

    def unlink(self, path):
        os.unlink(self._full(path))

    def rename(self, old, new):
        os.rename(self._full(old), self._full(new))

    def link(self, target, source):
        os.link(self._full(source), self._full(target))

    def symlink(self, target, source):
        full = self._full(target)
        os.symlink(source, full)
        self._give_to_caller(full)

    # Contents.

    def create(self, path, mode, fi=None):
        full = self._full(path)
        fd = os.open(full, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
        self._give_to_caller(full)
        return fd

    def open(self, path, flags):
        # Offsets come from the kernel (it applies O_APPEND); truncation came as truncate().
        keep = ~(os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_TRUNC)
        return os.open(self._full(path), flags & keep)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        if os.path.exists(self.hang):
            print(f"hangfs: write to {path} blocked while {self.hang} exists", flush=True)
            while os.path.exists(self.hang):
                if self.stopping.is_set() or exiting():
                    print(f"hangfs: write to {path} fails: hangfs is stopping", flush=True)
                    raise fuse.FuseOSError(errno.EIO)
                time.sleep(POLL_SECONDS)
            print(f"hangfs: write to {path} released", flush=True)
        if os.path.exists(self.zero):
            with self.counting:
                self.zero_writes += 1
                n = self.zero_writes
            if n == 1 or str(n).rstrip("0") == "1":  # 1, 10, 100, ...: a looping writer
                print(f"hangfs: write {n} to {path} takes 0 bytes ({self.zero} exists)", flush=True)
            return 0
        self.zero_writes = 0
        return os.pwrite(fh, data, offset)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)
        return 0

    def release(self, path, fh):
        os.close(fh)
        return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--control", required=True, help="directory (outside the mount) of hang/zero")
    p.add_argument("backing", help="directory the files are kept in")
    p.add_argument("mountpoint", help="where to mount")
    a = p.parse_args()
    backing, mnt, control = (os.path.realpath(x) for x in (a.backing, a.mountpoint, a.control))
    for d in (backing, mnt, control):
        if not os.path.isdir(d):
            sys.exit(f"hangfs: {d}: not a directory")
    if control == mnt or control.startswith(mnt + os.sep):
        sys.exit(f"hangfs: the control directory {control} must not be inside the mount {mnt}")
    if os.geteuid() != 0:
        sys.exit("hangfs: run it as root (it mounts with allow_other and creates files as users)")
    fuse.FUSE(
        HangFs(backing, control),
        mnt,
        foreground=True,
        allow_other=True,
        default_permissions=True,
        direct_io=True,
        fsname="hangfs",
    )


if __name__ == "__main__":
    main()
