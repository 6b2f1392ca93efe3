"""The transfer methods and one timed run of a method on a data set.

A method moves DATA_DIR/src/NAME (the directory itself, not its contents) from the source host
into an empty directory DST on the destination host, so every method leaves DST/NAME.

The timed region is what a user waits for: from starting the sender until the last byte is
durable on the destination disk. haul's exit status 0 already means that (it fsyncs); every
other method gets a `sync -f DST` (syncfs of the destination file system) inside the timed
region after its receiving side has exited, which includes remote decompression and untar.
Outside the timed region: starting receivers (haul recv, nc -l; sshd is already running),
emptying DST, reading the source into the page cache, and verifying the copy.

On the sparse data set, tar gets --sparse and rsync gets -S, as a user who knows the file is
sparse would do; scp has no such option. The row labels say so.

The stream family (data sets stream-pg and stream-rand: one file FILE each) moves one byte
stream instead of a tree: every stream method reads `cat FILE |` on the source and writes its
output with `> DST/NAME/FILE` on the destination (the same path a file copy lands on, so the
same verification applies), then `sync -f DST` inside the timed region. haul's file mode
(`haul send FILE`, which fsyncs) is the reference for haul's pipe mode (`haul send -`).

Not here: ssh tuning (the default cipher and no ControlMaster: what a user gets), and drop of
page cache (see datasets).
"""

import itertools
import os
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import datasets, dstfs, procs
from .netbed import DST_IP, SRC_IP, NetBed, Sshd

TIME = "/usr/bin/time"
TIME_FORMAT = "%M %e %U %S"  # peak RSS KiB, elapsed, user, system


@dataclass(frozen=True)
class Method:
    """One way to move a tree; `haul` methods are compared against the best of the others."""

    id: str
    haul_flags: tuple[str, ...] | None = None  # None: not haul
    needs: tuple[str, ...] = ()                # programs that must be installed
    ssh: bool = False
    stream: bool = False                       # the stream family (stream-* data sets only)

    @property
    def shell(self) -> bool:
        """Run as a receiver and a sender shell command (everything but haul's tree runs)."""
        return not self.is_haul or self.ssh or self.pipe

    @property
    def pipe(self) -> bool:
        """haul's pipe mode (`haul send -`), with its flags."""
        return self.id.startswith("haul-pipe")

    @property
    def is_haul(self) -> bool:
        return self.haul_flags is not None

    def label(self, sparse: bool) -> str:
        """The command as a user would recognise it (with the sparse flags when used)."""
        s = " -S" if sparse else ""
        return {
            "scp": "scp -r",
            "rsync": f"rsync -a{'S' if sparse else ''} (ssh)",
            "rsync-z": f"rsync -az{'S' if sparse else ''} (ssh)",
            "tar-ssh": f"tar{s} | ssh tar",
            "tar-nc": f"tar{s} | nc",
            "tar-pigz-nc": f"tar{s} | pigz -1 | nc",
            "tar-zstd-nc": f"tar{s} | zstd -1 -T0 | nc",
            "haul-ssh": "haul copy (ssh)",
            "haul-pipe": "haul send - (pipe mode)",
            "haul-pipe-auto": "haul send - --compress auto",
            "haul-pipe-lz4": "haul send - --compress lz4",
            "haul-pipe-zstd": "haul send - --compress zstd",
            "haul-file": "haul send FILE (file mode)",
            "socat": "socat -u (TCP)",
            "nc": "nc",
            "mbuffer": "mbuffer -O / -I",
            "zstd-nc": "zstd -1 -T0 | nc",
        }.get(self.id) or " ".join(("haul", *self.haul_flags))


METHODS = {m.id: m for m in (
    Method("haul", ()),
    Method("haul-noenc", ("--no-encrypt",)),
    Method("haul-lz4", ("--compress", "lz4")),
    Method("haul-none", ("--compress", "none")),
    Method("haul-zstd", ("--compress", "zstd")),
    Method("haul-zstd3", ("--compress", "zstd:3")),
    Method("haul-auto", ("--compress", "auto")),
    # The one command across hosts: ssh starts the far end, data flows over direct TCP.
    Method("haul-ssh", (), needs=("ssh", "sshd"), ssh=True),
    Method("scp", needs=("scp", "ssh", "sshd"), ssh=True),
    Method("rsync", needs=("rsync", "ssh", "sshd"), ssh=True),
    Method("rsync-z", needs=("rsync", "ssh", "sshd"), ssh=True),
    Method("tar-ssh", needs=("tar", "ssh", "sshd"), ssh=True),
    Method("tar-nc", needs=("tar", "nc")),
    Method("tar-pigz-nc", needs=("tar", "pigz", "nc")),
    Method("tar-zstd-nc", needs=("tar", "zstd", "nc")),
    # The stream family: `cat FILE | SENDER` -> `RECEIVER > DST/NAME/FILE`, defaults.
    Method("haul-pipe", (), stream=True),
    Method("haul-pipe-auto", ("--compress", "auto"), stream=True),
    Method("haul-pipe-lz4", ("--compress", "lz4"), stream=True),
    Method("haul-pipe-zstd", ("--compress", "zstd"), stream=True),
    Method("haul-file", (), stream=True),
    Method("socat", needs=("socat",), stream=True),
    Method("nc", needs=("nc",), stream=True),
    Method("mbuffer", needs=("mbuffer",), stream=True),
    Method("zstd-nc", needs=("zstd", "nc"), stream=True),
)}
STREAM_METHODS = tuple(mid for mid, m in METHODS.items() if m.stream)


def fits(m: Method, kind: str) -> bool:
    """Whether m runs on data sets of this kind (stream methods on stream sets only)."""
    return m.stream == (kind in datasets.STREAM_KINDS)


def missing_programs(m: Method) -> list[str]:
    """Programs m needs that are not installed."""
    return [p for p in m.needs if not (shutil.which(p) or Path("/usr/sbin", p).exists())]


@dataclass
class RunResult:
    """One timed run; `status` is 'ok...', 'FAILED: ...' or 'TIMEOUT ...'."""

    link: str
    dataset: str
    method: str
    run: int
    seconds: float | None = None
    status: str = ""
    wire_fwd: int | None = None
    wire_rev: int | None = None
    cpu: dict = field(default_factory=dict)
    rss_kib: dict = field(default_factory=dict)
    resident: float | None = None
    cold: bool = False            # the source was evicted (not warmed) before the run
    detail: str = ""
    phases: dict = field(default_factory=dict)  # harness overhead per phase, seconds

    @property
    def ok(self) -> bool:
        return self.status.startswith("ok")


class Runner:
    """Runs one method on one data set across the test bed, timed, measured and verified."""

    def __init__(self, bed: NetBed, sshd: Sshd | None, meter: procs.CpuMeter, haul: Path,
                 work: Path, dst: dstfs.DstFs, cold: bool = False):
        self.bed, self.sshd, self.meter, self.haul = bed, sshd, meter, haul
        self.cold = cold
        self.work, self.dstfs = work, dst
        self.dst = dst.dst
        self._ports = itertools.cycle(range(20000, 20500))

    def run(self, m: Method, ds: datasets.Dataset, link: str, rate_bits: int | None,
            index: int) -> RunResult:
        """Makes DST empty (a fresh file system by default), warms (or evicts) the source,
        runs m timed, verifies the copy, removes it (and its file system)."""
        res = RunResult(link, ds.spec.kind, m.id, index, cold=self.cold)
        t = time.monotonic()

        def phase(name):
            nonlocal t
            now = time.monotonic()
            res.phases[name] = round(now - t, 3)
            t = now

        try:
            self.dst = self.dstfs.fresh(ds)
        except (OSError, RuntimeError):
            self.dstfs.release()
            raise
        phase("fs")
        if self.cold:
            os.sync()  # dirty pages cannot be dropped; the earlier runs' writeback goes first
            for _ in range(2):  # again when something read the source meanwhile
                datasets.evict(ds)
                res.resident = datasets.resident_fraction(ds)
                if res.resident is None or res.resident <= 0.01:
                    break
            phase("evict")
        else:
            for _ in range(2):  # a second read when reclaim took pages back at once
                datasets.warm(ds)
                res.resident = datasets.resident_fraction(ds)
                if res.resident is None or res.resident >= 0.99:
                    break
            phase("warm")
        os.sync()  # leftover writeback from earlier runs must not land in this one
        phase("sync")
        # A guard, not a measure: 4x the time at a pessimistic 100 MB/s (or the link rate).
        floor = min(rate_bits / 8, 100e6) if rate_bits else 100e6
        timeout = 120 + 4 * ds.bytes / floor
        try:
            if m.id == "haul-file":
                # The file itself into DST/NAME: the path the stream methods write to.
                self._haul(m, ds, res, timeout, ds.stream_file, self.dst / ds.root.name)
            elif not m.shell:
                self._haul(m, ds, res, timeout, ds.root, self.dst)
            else:
                self._peer(m, ds, res, timeout)
            phase("run")
            if not res.status:
                res.status = datasets.verify(ds, self.dst / ds.root.name)
            phase("verify")
        finally:
            self.dstfs.release()
            phase("clean")
        return res

    # ---- haul ----

    def _haul(self, m: Method, ds: datasets.Dataset, res: RunResult, timeout: float,
              src: Path, dst: Path):
        """haul recv DST, then haul send SRC (a tree or, for haul-file, one file)."""
        w = self.work
        ticket = w / "ticket"
        ticket.unlink(missing_ok=True)
        logs = {side: open(w / f"haul-{side}.err", "w+") for side in ("send", "recv")}
        recv = send = None
        try:
            recv = procs.spawn(self.bed.on_dst([
                TIME, "-f", TIME_FORMAT, "-o", w / "recv.time", self.haul, "recv", dst,
                "--listen", DST_IP, "--ticket-file", ticket]),
                self.meter, "dst", stderr=logs["recv"])
            deadline = time.monotonic() + 30
            while not ticket.exists() and recv.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if not ticket.exists():
                res.status = f"FAILED: haul recv gave no ticket: {_tail(logs['recv'])}"
                return
            env = dict(os.environ, HAUL_TICKET=ticket.read_text().strip())
            before, t0 = self._snapshot(), time.monotonic()
            send = procs.spawn(self.bed.on_src([
                TIME, "-f", TIME_FORMAT, "-o", w / "send.time", self.haul, "send",
                *m.haul_flags, src]), self.meter, "src", env=env, stderr=logs["send"])
            rc_send = procs.wait(send, t0 + timeout)
            rc_recv = procs.wait(recv, time.monotonic() + (60 if rc_send == 0 else 5))
            t1, after = time.monotonic(), self._snapshot()
            self._measured(res, before, after, t1 - t0)
            res.rss_kib = {side: _peak_rss(w / f"{side}.time") for side in ("send", "recv")}
            res.detail = " / ".join(filter(None, (_tail(logs["send"]), _tail(logs["recv"]))))
            if rc_send is None:
                res.status = f"TIMEOUT after {timeout:.0f} s"
            elif rc_send != 0 or rc_recv != 0:
                why = _tail(logs["send"]) or _tail(logs["recv"])
                res.status = (f"FAILED: haul send exit {rc_send}, recv exit {rc_recv}: "
                              f"{why.removeprefix('haul: error: ')[:120]}")
        finally:
            procs.stop(send)
            procs.stop(recv)
            for f in logs.values():
                f.close()

    # ---- the others ----

    def _peer(self, m: Method, ds: datasets.Dataset, res: RunResult, timeout: float):
        port = next(self._ports)
        recv_cmd, send_cmd = self._commands(m, ds, port)
        logs = {side: open(self.work / f"{m.id}-{side}.err", "w+") for side in ("send", "recv")}
        recv = send = None
        env = None
        ticket = self.work / "ticket"
        ticket.unlink(missing_ok=True)
        if m.stream:
            (self.dst / ds.root.name).mkdir()  # where `> DST/NAME/FILE` writes
        try:
            if recv_cmd:
                recv = procs.spawn(self.bed.on_dst(["bash", "-o", "pipefail", "-c", recv_cmd]),
                                   self.meter, "dst", stderr=logs["recv"])
                if m.pipe:
                    deadline = time.monotonic() + 30
                    while (not ticket.exists() and recv.poll() is None
                           and time.monotonic() < deadline):
                        time.sleep(0.02)
                    if not ticket.exists():
                        res.status = f"FAILED: haul recv gave no ticket: {_tail(logs['recv'])}"
                        return
                    env = dict(os.environ, HAUL_TICKET=ticket.read_text().strip())
                elif not self.bed.wait_listening(port, proc=recv):
                    res.status = f"FAILED: receiver did not listen: {_tail(logs['recv'])}"
                    return
            before, t0 = self._snapshot(), time.monotonic()
            send = procs.spawn(self.bed.on_src(["bash", "-o", "pipefail", "-c", send_cmd]),
                               self.meter, "src", env=env, stderr=logs["send"])
            rc_send = procs.wait(send, t0 + timeout)
            rc_recv = 0
            if recv is not None:
                rc_recv = procs.wait(recv, time.monotonic() + (60 if rc_send == 0 else 5))
            rc_sync = None
            if rc_send == 0 and rc_recv == 0:
                sync = procs.spawn(self.bed.on_dst(["sync", "-f", self.dst]), self.meter, "dst")
                rc_sync = procs.wait(sync, time.monotonic() + 600)
            t1, after = time.monotonic(), self._snapshot()
            self._measured(res, before, after, t1 - t0)
            if m.pipe:
                res.rss_kib = {side: _peak_rss(self.work / f"{side}.time")
                               for side in ("send", "recv")}
                res.detail = " / ".join(filter(None, (_tail(logs["send"]),
                                                      _tail(logs["recv"]))))
            if rc_send is None:
                res.status = f"TIMEOUT after {timeout:.0f} s"
            elif rc_send != 0 or rc_recv != 0 or rc_sync != 0:
                why = _tail(logs["send"]) or _tail(logs["recv"])
                res.status = (f"FAILED: sender exit {rc_send}, receiver exit {rc_recv}, "
                              f"sync exit {rc_sync}: {why[:120]}")
        finally:
            procs.stop(send)
            procs.stop(recv)
            for f in logs.values():
                f.close()

    def _commands(self, m: Method, ds: datasets.Dataset, port: int) -> tuple[str | None, str]:
        """(receiver shell command or None, sender shell command)."""
        q = shlex.quote
        sparse = ds.spec.kind == "sparse"
        parent, name, dst = q(str(ds.root.parent)), q(ds.root.name), q(str(self.dst))
        tar_c = f"tar -C {parent} -c{'S' if sparse else ''}f - {name}"
        tar_x = f"tar -C {dst} -xf -"
        nc_send, nc_recv = f"nc -N {DST_IP} {port}", f"nc -l -d {DST_IP} {port}"
        remote = f"root@{DST_IP}"
        if m.ssh:
            ssh = " ".join(map(q, self.sshd.options()))
            scp = " ".join(map(q, self.sshd.options("-P")))
        flags = "a" + ("z" if m.id == "rsync-z" else "") + ("S" if sparse else "")
        match m.id:
            case "scp":
                return None, f"scp -r -q {scp} {q(str(ds.root))} {remote}:{dst}/"
            case "rsync" | "rsync-z":
                return None, f"rsync -{flags} -e {q('ssh ' + ssh)} {q(str(ds.root))} {remote}:{dst}/"
            case "haul-ssh":
                h = q(str(self.haul))
                return None, (f"{h} copy -q -e {q('ssh ' + ssh)} --remote-haul {h} "
                              f"{q(str(ds.root))} {remote}:{dst}/")
            case "tar-ssh":
                return None, f"{tar_c} | ssh {ssh} {remote} {q(tar_x)}"
            case "tar-nc":
                return f"{nc_recv} | {tar_x}", f"{tar_c} | {nc_send}"
            case "tar-pigz-nc":
                return f"{nc_recv} | pigz -d | {tar_x}", f"{tar_c} | pigz -1 | {nc_send}"
            case "tar-zstd-nc":
                return (f"{nc_recv} | zstd -q -d | {tar_x}",
                        f"{tar_c} | zstd -q -1 -T0 | {nc_send}")
        if m.stream:
            return self._stream_commands(m, ds, port)
        raise ValueError(f"unknown method {m.id}")

    def _stream_commands(self, m: Method, ds: datasets.Dataset,
                         port: int) -> tuple[str, str]:
        """Stream family: `cat FILE | sender`, `receiver > DST/NAME/FILE`; tools' defaults."""
        q = shlex.quote
        src = f"cat {q(str(ds.stream_file))}"
        out = f"> {q(str(self.dst / ds.root.name / ds.stream_file.name))}"
        nc_send, nc_recv = f"nc -N {DST_IP} {port}", f"nc -l -d {DST_IP} {port}"
        match m.id:
            case _ if m.pipe:
                h, w = q(str(self.haul)), self.work
                timed = f"{TIME} -f {q(TIME_FORMAT)} -o"
                flags = "".join(f" {q(f)}" for f in m.haul_flags)
                return (f"{timed} {q(str(w / 'recv.time'))} {h} recv - --listen {DST_IP} "
                        f"--ticket-file {q(str(w / 'ticket'))} {out}",
                        f"{src} | {timed} {q(str(w / 'send.time'))} {h} send -{flags}")
            case "socat":
                return (f"socat -u TCP-LISTEN:{port},bind={DST_IP},reuseaddr STDOUT {out}",
                        f"{src} | socat -u STDIN TCP:{DST_IP}:{port}")
            case "nc":
                return f"{nc_recv} {out}", f"{src} | {nc_send}"
            case "mbuffer":
                return (f"mbuffer -q -4 -I {SRC_IP}:{port} {out}",
                        f"{src} | mbuffer -q -4 -O {DST_IP}:{port}")
            case "zstd-nc":
                return (f"{nc_recv} | zstd -q -d {out}",
                        f"{src} | zstd -q -1 -T0 | {nc_send}")
        raise ValueError(f"unknown stream method {m.id}")

    # ---- measurement ----

    def _snapshot(self) -> dict:
        return {"wire": self.bed.counters(), "cpu": self.meter.snapshot()}

    def _measured(self, res: RunResult, before: dict, after: dict, seconds: float):
        res.seconds = seconds
        res.wire_fwd = after["wire"][0] - before["wire"][0]
        res.wire_rev = after["wire"][1] - before["wire"][1]
        res.cpu = self.meter.delta(before["cpu"], after["cpu"])


def _peak_rss(path: Path) -> int | None:
    try:
        last = path.read_text().strip().splitlines()[-1]
        return int(last.split()[0])
    except (OSError, IndexError, ValueError):
        return None


def _tail(f) -> str:
    """The last non-empty line a process wrote to its (still open) log file."""
    try:
        f.flush()
        f.seek(0)
        lines = [line.strip() for line in f.read().splitlines() if line.strip()]
    except (OSError, ValueError):
        return ""
    return lines[-1][:300] if lines else ""
