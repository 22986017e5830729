#!/usr/bin/python3
"""hangfs: a test-only FUSE filesystem whose writes can be made to hang or to take nothing.

Usage (as root, in the foreground; stop it with Ctrl-C, SIGTERM or `umount MOUNTPOINT`):

    /usr/bin/python3 tests/hangfs.py --control CONTROL_DIR BACKING_DIR MOUNTPOINT

It passes every file of MOUNTPOINT through to BACKING_DIR. It is mounted with `allow_other`
and `default_permissions`, so any user may use it and the kernel applies the usual permission
checks; files, directories and links are created owned by the user who creates them (as
slurmstepd creates a job's output file as the job's user), with the mode the kernel asks for
(the creator's umask applied, not this process's). Every file is opened with direct I/O, so
each write(2) on the mount is one request to this process, answered before write(2) returns.

CONTROL_DIR is an ordinary directory outside the mount. While a file named `hang` exists in it,
every write on the mount blocks (until `hang` is removed; other requests are still answered);
while `zero` exists there, every write returns 0 bytes written.

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

Needs Debian's python3-pyfuse3 (which brings libfuse3 and python3-trio) and fuse3 (fusermount3,
/etc/fuse.conf): `apt-get install -y python3-pyfuse3 fuse3`, and the kernel's fuse module
(/dev/fuse). Run it with Debian's /usr/bin/python3: the module is installed for that one. It
uses only what pyfuse3 3.2 (Debian 12) to 3.5 (Debian 14) all offer.
"""

import argparse
import errno
import functools
import os
import signal
import stat
import sys

try:
    import pyfuse3
    import trio
except ImportError as e:
    sys.exit(
        f"hangfs: no {e.name} module for {sys.executable}: apt-get install python3-pyfuse3 fuse3 "
        "and run it with Debian's /usr/bin/python3"
    )

POLL_SECONDS = 0.1
# How long the kernel may keep a name or attributes without asking again (libfuse's high-level
# default); a write through the mount updates the kernel's size of the file itself.
CACHE_SECONDS = 1.0
# Open flags not passed on to the backing file: the kernel sends the offsets (it applies
# O_APPEND itself), create() makes new files, and the backing file system need not do O_DIRECT.
NOT_PASSED = os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOCTTY | os.O_DIRECT
# Those libfuse's own handlers stop a file system on (SIGHUP too, as the fusepy version did).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def answering(method):
    """Make a request handler answer a failed system call with its errno.

    pyfuse3 answers only FUSEError; any other exception would end its main loop.
    """

    @functools.wraps(method)
    async def handler(self, *args):
        try:
            return await method(self, *args)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None

    return handler


class Node:
    """One file or directory the kernel knows by a FUSE inode number."""

    __slots__ = ("key", "paths", "lookups", "fds")

    def __init__(self, key, path):
        self.key = key  # (st_dev, st_ino) of the backing file; None once it is gone
        self.paths = {path}  # its names in the backing directory (bytes)
        self.lookups = 0  # how many times the kernel was told of it, less what it forgot
        self.fds = set()  # open backing file descriptors (the FUSE file handles)


class HangFs(pyfuse3.Operations):
    """Passthrough to a backing directory, with writes governed by the control directory."""

    def __init__(self, backing, control):
        super().__init__()
        self.backing = os.fsencode(backing)
        self.hang = os.path.join(control, "hang")
        self.zero = os.path.join(control, "zero")
        st = os.lstat(self.backing)
        root = Node((st.st_dev, st.st_ino), self.backing)
        root.lookups = 1  # never forgotten
        self.nodes = {pyfuse3.ROOT_INODE: root}  # FUSE inode -> Node
        self.inodes = {root.key: pyfuse3.ROOT_INODE}  # (st_dev, st_ino) -> FUSE inode
        self.next_inode = pyfuse3.ROOT_INODE + 1
        self.open_files = {}  # file handle (backing fd) -> FUSE inode
        self.open_dirs = {}  # directory handle -> (FUSE inode, names)
        self.next_dir = 1
        self.stopping = False  # SIGTERM/SIGINT came: held writes fail
        self.held = 0  # writes blocked now
        self.zero_writes = 0  # in a row

    # Bookkeeping of inodes.

    def _node(self, inode):
        node = self.nodes.get(inode)
        if node is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return node

    def _path(self, inode):
        node = self._node(inode)
        for path in node.paths:
            return path
        raise pyfuse3.FUSEError(errno.ENOENT)  # removed (perhaps still open)

    def _shown(self, path):
        """A backing path as seen under the mount, for the log."""
        rel = os.fsdecode(os.path.relpath(path, self.backing))
        return "/" if rel == "." else "/" + rel

    def _known(self, path, st):
        """The FUSE inode for the backing file at path (lstat st), made up if new."""
        key = (st.st_dev, st.st_ino)
        inode = self.inodes.get(key)
        if inode is None:
            inode = self.next_inode
            self.next_inode += 1
            self.nodes[inode] = Node(key, path)
            self.inodes[key] = inode
        else:
            self.nodes[inode].paths.add(path)
        return inode

    def _drop_if_unused(self, inode):
        node = self.nodes.get(inode)
        if inode == pyfuse3.ROOT_INODE or node is None or node.lookups > 0 or node.fds:
            return
        del self.nodes[inode]
        if node.key is not None and self.inodes.get(node.key) == inode:
            del self.inodes[node.key]

    def _attrs(self, inode, st):
        a = pyfuse3.EntryAttributes()
        a.st_ino = inode
        a.generation = 0
        a.entry_timeout = CACHE_SECONDS
        a.attr_timeout = CACHE_SECONDS
        a.st_mode = st.st_mode
        a.st_nlink = st.st_nlink
        a.st_uid = st.st_uid
        a.st_gid = st.st_gid
        a.st_rdev = st.st_rdev
        a.st_size = st.st_size
        a.st_blksize = st.st_blksize
        a.st_blocks = st.st_blocks
        a.st_atime_ns = st.st_atime_ns
        a.st_mtime_ns = st.st_mtime_ns
        a.st_ctime_ns = st.st_ctime_ns
        return a

    def _entry(self, path):
        """Attributes of the backing file at path, the kernel being told of it once more."""
        st = os.lstat(path)
        inode = self._known(path, st)
        self.nodes[inode].lookups += 1
        return self._attrs(inode, st)

    def _stat(self, inode):
        node = self._node(inode)
        for fd in node.fds:
            return os.fstat(fd)
        return os.lstat(self._path(inode))

    def _removed(self, path, st):
        """The name path (whose file had lstat st) no longer exists in the backing directory."""
        key = (st.st_dev, st.st_ino)
        inode = self.inodes.get(key)
        if inode is None:
            return
        node = self.nodes[inode]
        node.paths.discard(path)
        if stat.S_ISDIR(st.st_mode) or st.st_nlink <= 1:
            # Gone: a new file that gets the same backing inode number is another FUSE inode.
            del self.inodes[key]
            node.key = None
            node.paths.clear()
        self._drop_if_unused(inode)

    def _renamed(self, old, new):
        for node in self.nodes.values():
            moved = set()
            for p in node.paths:
                if p == old:
                    moved.add(new)
                elif p.startswith(old + b"/"):
                    moved.add(new + p[len(old):])
                else:
                    moved.add(p)
            node.paths = moved

    def _file_info(self, fd):
        fi = pyfuse3.FileInfo()
        fi.fh = fd
        fi.direct_io = True  # each write(2) is one request, answered before it returns
        fi.keep_cache = False
        return fi

    def _opened(self, inode, fd):
        self.open_files[fd] = inode
        self.nodes[inode].fds.add(fd)

    def _give_to_caller(self, path, ctx):
        os.lchown(path, ctx.uid, ctx.gid)

    # Metadata.

    @answering
    async def lookup(self, parent_inode, name, ctx):
        parent = self._path(parent_inode)
        if name == b".":
            return self._entry(parent)
        if name == b"..":
            return self._entry(parent if parent == self.backing else os.path.dirname(parent))
        return self._entry(os.path.join(parent, name))

    async def forget(self, inode_list):
        for inode, nlookup in inode_list:
            node = self.nodes.get(inode)
            if node is not None and inode != pyfuse3.ROOT_INODE:
                node.lookups = max(0, node.lookups - nlookup)
                self._drop_if_unused(inode)

    @answering
    async def getattr(self, inode, ctx):
        return self._attrs(inode, self._stat(inode))

    @answering
    async def setattr(self, inode, attr, fields, fh, ctx):
        # A call on an open file (ftruncate, fchmod, ...) comes with its handle: the backing fd.
        target = fh if fh is not None else self._path(inode)
        if fields.update_size:
            os.truncate(target, attr.st_size)
        if fields.update_uid or fields.update_gid:
            uid = attr.st_uid if fields.update_uid else -1
            gid = attr.st_gid if fields.update_gid else -1
            if fh is not None:
                os.fchown(fh, uid, gid)
            else:
                os.lchown(target, uid, gid)
        if fields.update_mode:
            os.chmod(target, stat.S_IMODE(attr.st_mode))
        if fields.update_atime or fields.update_mtime:
            now = self._stat(inode)
            times = (
                attr.st_atime_ns if fields.update_atime else now.st_atime_ns,
                attr.st_mtime_ns if fields.update_mtime else now.st_mtime_ns,
            )
            if fh is not None:
                os.utime(fh, ns=times)
            else:
                os.utime(target, ns=times, follow_symlinks=False)
        return self._attrs(inode, self._stat(inode))

    @answering
    async def readlink(self, inode, ctx):
        return os.readlink(self._path(inode))

    @answering
    async def opendir(self, inode, ctx):
        names = [b".", b".."] + sorted(os.listdir(self._path(inode)))
        handle = self.next_dir
        self.next_dir += 1
        self.open_dirs[handle] = (inode, names)
        return handle

    @answering
    async def readdir(self, fh, start_id, token):
        inode, names = self.open_dirs[fh]
        path = self._path(inode)
        for i in range(start_id, len(names)):
            name = names[i]
            if name in (b".", b".."):
                # Listed, but the kernel keeps no count of these.
                counted = False
                target = path if name == b"." or path == self.backing else os.path.dirname(path)
            else:
                counted = True
                target = os.path.join(path, name)
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                continue  # removed since opendir
            child = self._known(target, st)
            if not pyfuse3.readdir_reply(token, name, self._attrs(child, st), i + 1):
                self._drop_if_unused(child)
                break
            if counted:
                self.nodes[child].lookups += 1

    async def releasedir(self, fh):
        self.open_dirs.pop(fh, None)

    @answering
    async def statfs(self, ctx):
        sv = os.statvfs(self.backing)
        s = pyfuse3.StatvfsData()
        for k in (
            "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
            "f_files", "f_ffree", "f_favail", "f_namemax",
        ):
            setattr(s, k, getattr(sv, k))
        return s

    # Names.

    @answering
    async def mkdir(self, parent_inode, name, mode, ctx):
        path = os.path.join(self._path(parent_inode), name)
        os.mkdir(path, stat.S_IMODE(mode))
        self._give_to_caller(path, ctx)
        return self._entry(path)

    @answering
    async def rmdir(self, parent_inode, name, ctx):
        path = os.path.join(self._path(parent_inode), name)
        st = os.lstat(path)
        os.rmdir(path)
        self._removed(path, st)

    @answering
    async def unlink(self, parent_inode, name, ctx):
        path = os.path.join(self._path(parent_inode), name)
        st = os.lstat(path)
        os.unlink(path)
        self._removed(path, st)

    @answering
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        old = os.path.join(self._path(parent_inode_old), name_old)
        new = os.path.join(self._path(parent_inode_new), name_new)
        if flags & ~pyfuse3.RENAME_NOREPLACE:
            raise pyfuse3.FUSEError(errno.EINVAL)  # no RENAME_EXCHANGE
        try:
            replaced = os.lstat(new)
        except FileNotFoundError:
            replaced = None
        if replaced is not None and flags & pyfuse3.RENAME_NOREPLACE:
            raise pyfuse3.FUSEError(errno.EEXIST)
        moved = os.lstat(old)
        os.rename(old, new)
        if replaced is not None:
            if (replaced.st_dev, replaced.st_ino) == (moved.st_dev, moved.st_ino):
                return  # two names of one file: rename(2) changes nothing
            self._removed(new, replaced)
        self._renamed(old, new)

    @answering
    async def link(self, inode, new_parent_inode, new_name, ctx):
        path = os.path.join(self._path(new_parent_inode), new_name)
        os.link(self._path(inode), path, follow_symlinks=False)
        return self._entry(path)

    @answering
    async def symlink(self, parent_inode, name, target, ctx):
        path = os.path.join(self._path(parent_inode), name)
        os.symlink(target, path)
        self._give_to_caller(path, ctx)
        return self._entry(path)

    # Contents.

    @answering
    async def create(self, parent_inode, name, mode, flags, ctx):
        path = os.path.join(self._path(parent_inode), name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, stat.S_IMODE(mode))
        try:
            os.fchown(fd, ctx.uid, ctx.gid)
            attrs = self._entry(path)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        self._opened(attrs.st_ino, fd)
        return (self._file_info(fd), attrs)

    @answering
    async def open(self, inode, flags, ctx):
        # O_TRUNC is passed on: libfuse 3 asks the kernel to send it here (atomic_o_trunc).
        fd = os.open(self._path(inode), (flags & ~NOT_PASSED) | os.O_CLOEXEC)
        self._opened(inode, fd)
        return self._file_info(fd)

    @answering
    async def read(self, fh, off, size):
        return os.pread(fh, size, off)

    def _shown_file(self, fh):
        node = self.nodes.get(self.open_files.get(fh))
        for path in node.paths if node is not None else ():
            return self._shown(path)
        return f"(removed file, handle {fh})"

    @answering
    async def write(self, fh, off, buf):
        if os.path.exists(self.hang):
            path = self._shown_file(fh)
            print(f"hangfs: write to {path} blocked while {self.hang} exists", flush=True)
            self.held += 1
            try:
                while os.path.exists(self.hang):
                    if self.stopping:
                        print(f"hangfs: write to {path} fails: hangfs is stopping", flush=True)
                        raise pyfuse3.FUSEError(errno.EIO)
                    await trio.sleep(POLL_SECONDS)  # other requests are answered meanwhile
            finally:
                self.held -= 1
            print(f"hangfs: write to {path} released", flush=True)
        if os.path.exists(self.zero):
            self.zero_writes += 1
            n = self.zero_writes
            if n == 1 or str(n).rstrip("0") == "1":  # 1, 10, 100, ...: a looping writer
                path = self._shown_file(fh)
                print(f"hangfs: write {n} to {path} takes 0 bytes ({self.zero} exists)", flush=True)
            return 0
        self.zero_writes = 0
        return os.pwrite(fh, buf, off)

    async def flush(self, fh):
        pass

    @answering
    async def fsync(self, fh, datasync):
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)

    async def release(self, fh):
        inode = self.open_files.pop(fh, None)
        node = self.nodes.get(inode)
        if node is not None:
            node.fds.discard(fh)
            self._drop_if_unused(inode)
        try:
            os.close(fh)
        except OSError:
            pass

    # Stopping.

    async def stop_on_signal(self, early, task_status=trio.TASK_STATUS_IGNORED):
        """On SIGTERM, SIGINT or SIGHUP, fail the held writes with EIO, then end the main loop."""
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            task_status.started()
            if not early:
                async for _ in signals:
                    break
        self.stopping = True
        while self.held:
            await trio.sleep(POLL_SECONDS / 2)
        # The failed writes are answered by now; requests under way are answered before
        # pyfuse3.main() returns.
        pyfuse3.terminate()


async def serve(fs, early):
    async with trio.open_nursery() as nursery:
        await nursery.start(fs.stop_on_signal, early)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()  # unmounted from outside, or stopping


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
    # Modes of new files come from the kernel with the creator's umask already applied.
    os.umask(0)

    # A signal between mounting and serving is kept for then (trio handles them from there on).
    early = []
    previous = {
        s: signal.signal(s, lambda signum, frame: early.append(signum))
        for s in STOP_SIGNALS
    }
    fs = HangFs(backing, control)
    options = set(pyfuse3.default_options)
    options.update({"allow_other", "default_permissions", "fsname=hangfs"})
    pyfuse3.init(fs, mnt, options)
    try:
        trio.run(serve, fs, early)
    finally:
        pyfuse3.close(unmount=True)
        for s, h in previous.items():
            signal.signal(s, h)


if __name__ == "__main__":
    main()
