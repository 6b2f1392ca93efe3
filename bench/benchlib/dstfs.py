"""Where the copies land: a fresh journaled ext4 per timed run (`fresh-ext4`), or a directory.

Why a fresh file system: a benchmark that deletes each copy right before the next run measures
the destination file system's memory of that deletion as much as the method. On ext4 without a
journal (the test machine's `/`), the inode allocator skips inodes freed in the last minutes
and reads their inode tables to find out (`recently_deleted` in fs/ext4/ialloc.c), so every
small-file run after the first paid for the 20,000 inodes the previous run had just freed:
the same copy took 3.6 s first and 5.3-8.4 s later, cp alike. A file system made for the run
has no such history, and a journal (the ext4 default) is what a user's destination has.

`fresh-ext4`, per timed run: a sparse image file DATA_DIR/dst.img of twice the data set's
apparent size (at least 1 GiB; more inodes than the default when the set has many files),
`mkfs.ext4` with its default journal and the inode tables and journal written at once (no
lazy init thread running during the run), attached with `losetup --direct-io=on` (the image's
writes go to the disk without a second page cache, as a real device's would), mounted on
DATA_DIR/dst; the copy goes to DATA_DIR/dst/copy. After the run: unmount, detach, delete the
image. None of that is timed.

Mount namespaces: `ip netns exec` gives every command a copy of the mount table taken when it
starts, so per-run receivers see the run's mount; the test sshd (started once) would not. So
`setup` first makes DATA_DIR/dst a shared mount (a bind mount of itself): `ip netns exec`
turns the copies into slaves, and every later mount and unmount on it reaches the sshd too.

`dir`: the old behaviour, a plain directory DATA_DIR/dst on the data dir's file system,
emptied before and after each run.
"""

import re
import shutil
import sys
from pathlib import Path

from . import procs

KINDS = ("fresh-ext4", "dir")
GIB = 2**30
# Free space left on the data dir's disk after the worst case. Small enough for a CI machine
# with a couple of GiB free (the quick sparse set needs 0.5 GiB in all), large enough that a
# dense worst case never fills the disk under the running system.
MARGIN = 256 * 2**20
BYTES_PER_INODE = 16384  # mkfs.ext4's default inode ratio


class DstFs:
    """The destination of the timed runs; `fresh(ds)` before each run, `release()` after."""

    def __init__(self, kind: str, base: Path):
        if kind not in KINDS:
            raise ValueError(f"unknown destination file system {kind!r} "
                             f"(known: {', '.join(KINDS)})")
        self.kind, self.base = kind, base
        self.image = base.with_name(base.name + ".img")
        self._shared = False
        self._mounted = False

    @property
    def fresh_fs(self) -> bool:
        return self.kind == "fresh-ext4"

    @property
    def dst(self) -> Path:
        """The directory every method copies into."""
        return self.base / "copy" if self.fresh_fs else self.base

    def describe(self) -> str:
        """For the report's header."""
        if self.fresh_fs:
            return ("a fresh journaled ext4 per timed run (mkfs.ext4 defaults, on a loop device "
                    "with direct I/O over a sparse image file of twice the data set on the "
                    "data dir's disk)")
        return "a directory on the data dir's file system, emptied before and after each run"

    def check(self):
        """Raises RuntimeError when fresh-ext4 cannot work here (before anything is timed)."""
        if not self.fresh_fs:
            return
        missing = [p for p in ("mkfs.ext4", "losetup", "mount", "umount")
                   if not shutil.which(p)]
        if missing:
            raise RuntimeError(f"--dst-fs fresh-ext4 needs {', '.join(missing)} "
                               "(or use --dst-fs dir)")

    def setup(self):
        """Once, before any process that must see the runs' mounts (the sshd) starts."""
        self._unmount_stale()
        self.base.mkdir(parents=True, exist_ok=True)
        if self.fresh_fs and not self._shared:
            procs.run(["mount", "--bind", self.base, self.base])
            self._shared = True
            procs.run(["mount", "--make-shared", self.base])

    def fresh(self, ds) -> Path:
        """An empty destination for one run of ds; returns the directory to copy into."""
        if not self.fresh_fs:
            if self.base.exists():
                shutil.rmtree(self.base)
            self.base.mkdir(parents=True)
            return self.dst
        self.release()
        # Worst case the copy is written dense (scp on the sparse set): it must fit, with room.
        need = ds.bytes + ds.bytes // 10 + MARGIN
        free = shutil.disk_usage(self.image.parent).free
        if free < need:
            raise RuntimeError(f"--dst-fs fresh-ext4: {free / GIB:.1f} GiB free on "
                               f"{self.image.parent}, a run of {ds.spec.kind} needs "
                               f"{need / GIB:.1f} GiB")
        size = max(2 * ds.bytes, GIB)
        size = -(-size // 2**20) * 2**20
        with open(self.image, "wb") as f:
            f.truncate(size)
        mkfs = ["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]
        inodes = 2 * ds.files + 10_000
        if inodes > size // BYTES_PER_INODE:
            mkfs += ["-N", str(inodes)]
        procs.run([*mkfs, self.image])
        loop = procs.run(["losetup", "--find", "--show", "--direct-io=on",
                          self.image]).stdout.strip()
        try:
            procs.run(["mount", loop, self.base])
            self._mounted = True
        finally:
            # Detach now: on a mounted device this only marks it to go at the last unmount,
            # so no loop device outlives its mount, however the harness ends.
            procs.run(["losetup", "-d", loop], check=False)
        self.dst.mkdir()
        return self.dst

    def release(self):
        """Removes the copy: unmounts and deletes the run's file system (fresh-ext4)."""
        if not self.fresh_fs:
            if self.base.exists():
                shutil.rmtree(self.base)
            self.base.mkdir(parents=True)
            return
        if self._mounted:
            res = procs.run(["umount", self.base], check=False)
            if res.returncode != 0:  # busy (a lingering process): detach it lazily
                procs.run(["umount", "-l", self.base])
            self._mounted = False
        self.image.unlink(missing_ok=True)

    def teardown(self):
        """At the end of the benchmark, also after errors: nothing mounted, nothing left."""
        try:
            self.release()
        except (OSError, RuntimeError) as e:
            print(f"bench: could not remove the destination file system: {e}", file=sys.stderr)
        finally:
            if self._shared:
                procs.run(["umount", "-l", self.base], check=False)
                self._shared = False
            if self.base.exists():
                shutil.rmtree(self.base, ignore_errors=True)
            self.image.unlink(missing_ok=True)

    def _unmount_stale(self):
        """A run killed hard may have left its mounts: take them down (at most a few)."""
        for _ in range(4):
            if not _is_mountpoint(self.base):
                break
            procs.run(["umount", "-l", self.base], check=False)
        self.image.unlink(missing_ok=True)


def _is_mountpoint(path: Path) -> bool:
    """Whether something is mounted on path (also a bind mount of the same file system, which
    os.path.ismount does not see)."""
    want = str(path.resolve()) if path.exists() else str(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            # mountinfo escapes space, tab, newline and backslash as octal
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)
            if point == want:
                return True
    return False
