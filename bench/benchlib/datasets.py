"""The data sets: generated on demand, cached between runs, listed for verification.

Four kinds, each a directory under DATA_DIR/src whose name carries its parameters (so quick and
full sizes live side by side and a changed size means a new directory):

- big     one large file of random (incompressible) bytes
- pg      a real PostgreSQL data directory: initdb + pgbench -i -s SCALE, server stopped cleanly
- small   COUNT files of SIZE random bytes, 1,000 per subdirectory
- sparse  one file of apparent SIZE holding DATA bytes of random data in 4 MiB extents
- million COUNT files of 1-8 KiB random bytes (sizes drawn per file), 1,000 per subdirectory:
          the many-files scale test; only on request (`--datasets million`), never by default

and the "stream" family, one file each, carried as one byte stream by the stream methods:

- stream-pg    pg.tar: `tar -c` of the pg set (made from it, once; mixed compressible data)
- stream-rand  rand.bin: SIZE random bytes (a hard link to the big set's file of that size)

Next to each directory, NAME.json holds the parameters and totals and NAME.manifest the content
listing (one line per entry: type, path, size, BLAKE3 or SHA-256 of the content). A cached set
is reused when its parameters match and a walk of the tree finds the same paths and sizes;
otherwise it is generated again. A copy is verified by listing it the same way and comparing.

Page cache: dropping it is not reliable on a shared machine, so `warm` reads the source (only
the data extents of sparse files) before each timed run, and `resident_fraction` reports how
much of it was in memory, so every method starts from the same warm cache and the report can
say so.
"""

import ctypes
import json
import os
import pwd
import random
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import procs

KINDS = ("big", "pg", "small", "sparse", "stream-pg", "stream-rand", "million")
# Sets that run only when named in --datasets (slow to make, and they test scale, not speed).
ON_REQUEST = ("million",)
# The stream family: one file, sent as one byte stream (`cat FILE | ...`) by the stream
# methods and as a file by haul's file mode (the reference).
STREAM_KINDS = ("stream-pg", "stream-rand")
EXTENT = 4 << 20


class Skip(Exception):
    """A data set that cannot be made on this machine (e.g. PostgreSQL is not installed)."""


def parse_size(text: str) -> int:
    """'4G' / '100K' / '256MiB' / '123' -> bytes (binary units)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in "KMGT" else t
    try:
        value = int(float(number) * mult)
    except ValueError:
        raise ValueError(f"bad size {text!r}: use e.g. 4G, 256M, 100K") from None
    if value <= 0:
        raise ValueError(f"bad size {text!r}: must be positive")
    return value


def fmt_size(n: int) -> str:
    """Human size with binary units, e.g. '2.0 GiB'."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def _tag(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


@dataclass(frozen=True)
class Spec:
    """What to generate: the kind and its parameters (which name the directory)."""

    kind: str
    params: dict = field(hash=False)

    @property
    def dirname(self) -> str:
        p = self.params
        return {
            "big": lambda: f"big-{_tag(p['size'])}",
            "pg": lambda: f"pg-s{p['scale']}",
            "small": lambda: f"small-{p['count']}x{_tag(p['size'])}",
            "sparse": lambda: f"sparse-{_tag(p['size'])}-{_tag(p['data'])}",
            "stream-pg": lambda: f"stream-pg-s{p['scale']}",
            "stream-rand": lambda: f"stream-rand-{_tag(p['size'])}",
            "million": lambda: f"million-{p['count']}" + (
                f"-per{p['per_dir']}" if p.get("per_dir", 1000) != 1000 else ""),
        }[self.kind]()

    @property
    def title(self) -> str:
        p = self.params
        return {
            "big": lambda: f"one {fmt_size(p['size'])} file of random bytes",
            "pg": lambda: f"PostgreSQL data directory, pgbench scale {p['scale']}",
            "small": lambda: f"{p['count']:,} files of {fmt_size(p['size'])} (random bytes)",
            "sparse": lambda: f"sparse {fmt_size(p['size'])} file with "
                              f"{fmt_size(p['data'])} of data",
            "stream-pg": lambda: f"stream: tar of the PostgreSQL data directory "
                                 f"(pgbench scale {p['scale']})",
            "stream-rand": lambda: f"stream: {fmt_size(p['size'])} of random bytes",
            "million": lambda: f"{p['count']:,} files of 1-8 KiB (random bytes), "
                               f"{p.get('per_dir', 1000):,} per directory",
        }[self.kind]()


@dataclass
class Dataset:
    """A generated data set: its tree, listing and totals."""

    spec: Spec
    root: Path
    listing: list[str]
    bytes: int       # apparent size of all regular files (what "logical MB/s" divides)
    disk: int        # bytes allocated on disk
    files: int
    note: str = ""   # e.g. the PostgreSQL version

    @property
    def stream_file(self) -> Path:
        """The one file of a stream data set (what the stream methods send)."""
        files = [line[2:].rsplit(" ", 2)[0] for line in self.listing if line.startswith("f ")]
        if len(files) != 1:
            raise RuntimeError(f"{self.root.name}: a stream data set holds one file, "
                               f"not {len(files)}")
        return self.root / files[0]


def prepare(spec: Spec, src_dir: Path, log) -> Dataset:
    """Returns the cached data set if it is intact, else generates it. Raises Skip."""
    root = src_dir / spec.dirname
    meta_path = root.with_name(spec.dirname + ".json")
    manifest_path = root.with_name(spec.dirname + ".manifest")
    if root.is_dir() and meta_path.exists() and manifest_path.exists():
        meta = json.loads(meta_path.read_text())
        cached = manifest_path.read_text().splitlines()
        if meta.get("params") == spec.params and _shape(cached) == _shape(listing(root, False)[0]):
            log(f"data set {spec.dirname}: cached")
            return Dataset(spec, root, cached, meta["bytes"], meta["disk"], meta["files"],
                           meta.get("note", ""))
        log(f"data set {spec.dirname}: cache does not match, generating again")
    src_dir.mkdir(parents=True, exist_ok=True)
    for stale in (root, meta_path, manifest_path):
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    log(f"data set {spec.dirname}: generating {spec.title}")
    note = GENERATORS[spec.kind](root, spec.params, log)
    os.sync()
    lines, totals = listing(root)
    manifest_path.write_text("\n".join(lines) + "\n")
    meta_path.write_text(json.dumps({"params": spec.params, "note": note, **totals}, indent=1))
    return Dataset(spec, root, lines, totals["bytes"], totals["disk"], totals["files"], note)


def _shape(lines: list[str]) -> list[str]:
    """A listing without the hashes (the last word of 'f' lines): paths, types and sizes."""
    return [line.rsplit(" ", 1)[0] if line.startswith("f ") else line for line in lines]


# ---- generators ------------------------------------------------------------------------


def _write_random(path: Path, size: int, chunk: int = 8 << 20):
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(chunk, left)
            f.write(os.urandom(n))
            left -= n


def _gen_big(root: Path, p: dict, log) -> str:
    root.mkdir()
    _write_random(root / "big.bin", p["size"])
    return ""


def _gen_small(root: Path, p: dict, log) -> str:
    root.mkdir()
    for i in range(p["count"]):
        sub = root / f"d{i // 1000:03d}"
        if i % 1000 == 0:
            sub.mkdir()
        with open(sub / f"f{i:06d}", "wb") as f:
            f.write(os.urandom(p["size"]))
    return ""


def _gen_million(root: Path, p: dict, log) -> str:
    """COUNT files of 1-8 KiB (sizes from a generator seeded with COUNT, so a set is the same
    every time it is made), PER_DIR per subdirectory (default 1,000); with fewer per
    directory, the subdirectories are grouped 1,000 to a parent (many directories is what
    `per_dir` is for: the receiver's memory against the number of directories)."""
    root.mkdir()
    sizes = random.Random(p["count"])
    per = p.get("per_dir", 1000)
    for i in range(p["count"]):
        d = i // per
        sub = root / f"d{d:04d}" if per >= 1000 else root / f"g{d // 1000:04d}" / f"d{d:07d}"
        if i % per == 0:
            sub.mkdir(parents=True, exist_ok=True)
            if i % 100_000 == 0:
                log(f"data set {root.name}: {i:,} files")
        with open(sub / f"f{i:07d}", "wb") as f:
            f.write(os.urandom(sizes.randint(1024, 8192)))
    return ""


def _gen_sparse(root: Path, p: dict, log) -> str:
    size, data = p["size"], p["data"]
    if data > size:
        raise ValueError("sparse: data must not exceed the file size")
    root.mkdir()
    extents = max(data // EXTENT, 1)
    stride, length = size // extents, data // extents
    with open(root / "sparse.img", "wb") as f:
        for i in range(extents):
            f.seek(i * stride)
            f.write(os.urandom(length))
        f.truncate(size)
    return ""


def find_pg_bin() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin holding initdb, or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else None


def _gen_pg(root: Path, p: dict, log) -> str:
    bindir = find_pg_bin()
    if bindir is None:
        raise Skip("initdb not found (apt-get install postgresql)")
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise Skip("no 'postgres' user to run initdb as") from None
    sock = Path(tempfile.mkdtemp(prefix="haulbench-pg-"))
    os.chown(sock, user.pw_uid, user.pw_gid)
    root.mkdir(mode=0o700)
    os.chown(root, user.pw_uid, user.pw_gid)

    def as_pg(*argv, timeout=None):
        return procs.run(["runuser", "-u", "postgres", "--", *map(str, argv)], cwd=sock,
                         timeout=timeout)

    started = False
    try:
        as_pg(bindir / "initdb", "-D", root, "-A", "trust", "-U", "postgres", "-E", "UTF8")
        as_pg(bindir / "pg_ctl", "-D", root, "-l", sock / "server.log", "-w", "-t", "120",
              "-o", f"-k {sock} -c listen_addresses=''", "start")
        started = True
        log(f"data set pg: pgbench -i -s {p['scale']} (this takes a while)")
        as_pg(bindir / "pgbench", "-h", sock, "-i", "-q", "-s", p["scale"], "postgres")
        as_pg(bindir / "pg_ctl", "-D", root, "-m", "fast", "-w", "-t", "300", "stop")
        started = False
    finally:
        if started:
            procs.run(["runuser", "-u", "postgres", "--", str(bindir / "pg_ctl"), "-D", str(root),
                       "-m", "immediate", "-w", "stop"], check=False, cwd=sock)
        shutil.rmtree(sock, ignore_errors=True)
    return f"PostgreSQL {bindir.parent.name}"


def _gen_stream_pg(root: Path, p: dict, log) -> str:
    """pg.tar: the pg data set of the same scale (made first if needed) as one tar stream."""
    pg = prepare(Spec("pg", {"scale": p["scale"]}), root.parent, log)
    root.mkdir()
    log(f"data set {root.name}: tar of {pg.root.name}")
    with open(root / "pg.tar", "wb") as f:
        res = subprocess.run(["tar", "-C", str(pg.root.parent), "-cf", "-", pg.root.name],
                             stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"tar of {pg.root} exited {res.returncode}: {res.stderr[-500:]}")
    return pg.note


def _gen_stream_rand(root: Path, p: dict, log) -> str:
    """rand.bin: a hard link to the big set's file of the same size (no second copy)."""
    big = prepare(Spec("big", {"size": p["size"]}), root.parent, log)
    root.mkdir()
    os.link(big.root / "big.bin", root / "rand.bin")
    return ""


GENERATORS = {"big": _gen_big, "pg": _gen_pg, "small": _gen_small, "sparse": _gen_sparse,
              "stream-pg": _gen_stream_pg, "stream-rand": _gen_stream_rand,
              "million": _gen_million}


# ---- listing and verification -----------------------------------------------------------


def hash_tool() -> list[str]:
    """b3sum (multithreaded, from the b3sum package) or sha256sum."""
    return ["b3sum"] if shutil.which("b3sum") else ["sha256sum"]


def listing(root: Path, with_hashes: bool = True) -> tuple[list[str], dict]:
    """Sorted lines 'd PATH', 'l PATH TARGET', 'f PATH SIZE HASH', 'o PATH MODE' for the tree
    under root (root itself is '.'), and totals {bytes, disk, files}."""
    entries, files = [], []  # entries: (path, line)
    totals = {"bytes": 0, "disk": 0, "files": 0}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        entries.append((rel_dir, f"d {rel_dir}"))
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in filenames + links:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode):
                files.append((rel, st.st_size))
                totals["bytes"] += st.st_size
                totals["disk"] += st.st_blocks * 512
                totals["files"] += 1
            elif stat.S_ISLNK(st.st_mode):
                entries.append((rel, f"l {rel} {os.readlink(os.path.join(dirpath, name))}"))
            else:
                entries.append((rel, f"o {rel} {stat.filemode(st.st_mode)}"))
    hashes = _hashes(root, [rel for rel, _ in files]) if with_hashes else {}
    for rel, size in files:
        entries.append((rel, f"f {rel} {size} {hashes.get(rel, '-')}"))
    entries.sort()
    return [line for _, line in entries], totals


def _hashes(root: Path, rels: list[str]) -> dict[str, str]:
    out = {}
    tool = hash_tool()
    for i in range(0, len(rels), 1000):
        batch = rels[i:i + 1000]
        res = procs.run([*tool, "--", *batch], cwd=root)
        for rel, line in zip(batch, res.stdout.splitlines()):
            digest, _, name = line.partition("  ")
            if name != rel:  # escaped names (backslash, newline) are not expected here
                raise RuntimeError(f"unexpected {tool[0]} output for {rel!r}: {line!r}")
            out[rel] = digest
    return out


def verify(ds: Dataset, copy_root: Path) -> str:
    """'ok', 'ok, holes lost (X on disk)', or 'FAILED: reason' for the copy at copy_root."""
    if not copy_root.is_dir():
        return f"FAILED: {copy_root.name} missing at the destination"
    extra = sorted(set(os.listdir(copy_root.parent)) - {copy_root.name})
    got, totals = listing(copy_root)
    if got != ds.listing:
        want = set(ds.listing)
        have = set(got)
        missing, wrong = sorted(want - have), sorted(have - want)
        first = (f"first expected line not found: {missing[0]!r}" if missing
                 else f"unexpected: {wrong[0]!r}")
        return f"FAILED: {len(missing)} entries differ ({first})"
    if extra:
        return f"FAILED: extra entries at the destination: {extra[:3]}"
    if totals["disk"] > 2 * ds.disk + (16 << 20):
        return f"ok, holes lost ({fmt_size(totals['disk'])} on disk)"
    return "ok"


# ---- page cache --------------------------------------------------------------------------


def _data_ranges(fd: int, size: int):
    """(offset, length) of the data extents of an open file (all of it if SEEK_DATA fails)."""
    off = 0
    while off < size:
        try:
            start = os.lseek(fd, off, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError:  # ENXIO: no data after off
            return
        yield start, end - start
        off = end


def _regular_files(ds: Dataset):
    for line in ds.listing:
        if line.startswith("f "):
            rel, size = line[2:].rsplit(" ", 2)[:2]
            yield ds.root / rel, int(size)


def warm(ds: Dataset):
    """Reads the source's data once, so that it is in the page cache."""
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    for path, size in _regular_files(ds):
        fd = os.open(path, os.O_RDONLY)
        try:
            for start, length in _data_ranges(fd, size):
                pos, end = start, start + length
                while pos < end:
                    n = os.preadv(fd, [view[:min(len(buf), end - pos)]], pos)
                    if n <= 0:
                        break
                    pos += n
        finally:
            os.close(fd)


def evict(ds: Dataset):
    """Drops the source's (clean) pages from the page cache, file by file: unlike
    `drop_caches` it touches nothing else on a shared machine."""
    for path, _ in _regular_files(ds):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_fraction(ds: Dataset) -> float | None:
    """Share of the source's data pages in the page cache (mincore), or None if unknown."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    total = resident = 0
    for path, size in _regular_files(ds):
        fd = os.open(path, os.O_RDONLY)
        try:
            for start, length in _data_ranges(fd, size):
                first = start - start % _PAGE
                pages = (start + length - first + _PAGE - 1) // _PAGE
                addr = libc.mmap(None, pages * _PAGE, 1, 1, fd, first)  # PROT_READ, MAP_SHARED
                if addr in (None, ctypes.c_void_p(-1).value):
                    return None
                try:
                    vec = (ctypes.c_ubyte * pages)()
                    if libc.mincore(addr, pages * _PAGE, vec) != 0:
                        return None
                    resident += bytes(vec).count(1)  # bit 0: resident
                    total += pages
                finally:
                    libc.munmap(addr, pages * _PAGE)
        finally:
            os.close(fd)
    return resident / total if total else 1.0
