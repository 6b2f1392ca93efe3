"""Child processes and what they cost: process groups, timeouts, CPU time per side.

Every process the harness starts gets its own session (process group), so that stopping it
also stops whatever it started (a pipeline, an ssh, a decompressor) and nothing else.

CPU time is read per side of the link ("src" and "dst") from a cpuacct cgroup (v1) or a
cgroup v2 directory that the harness creates; processes join their side's group before they
exec. sshd runs in the "dst" group, so the server half of scp/rsync/ssh is counted too. Where
no cgroup can be created (some containers), CPU is taken from getrusage(RUSAGE_CHILDREN),
which sees only the harness's own descendants: the sshd side of ssh methods is then missing,
and the report says so.

Deliberately not here: page-cache control (dropping caches is not reliable on a shared
machine; `datasets.warm` reads the source instead).
"""

import os
import resource
import signal
import subprocess
import time
from pathlib import Path

SIDES = ("src", "dst")


class CpuMeter:
    """CPU seconds used by each side, plus the whole machine's busy time (to show noise)."""

    def __init__(self, tag: str):
        self.groups: dict[str, Path] = {}
        self._v2 = False
        for base, v2 in ((Path("/sys/fs/cgroup/cpuacct"), False), (Path("/sys/fs/cgroup"), True)):
            if v2 and not (base / "cgroup.controllers").exists():
                continue
            if not v2 and not (base / "cpuacct.usage").exists():
                continue
            try:
                for side in SIDES:
                    path = base / f"haulbench-{tag}-{side}"
                    path.mkdir(exist_ok=True)
                    self.groups[side] = path
                self._v2 = v2
                break
            except OSError:
                self.close()
                self.groups = {}

    @property
    def per_side(self) -> bool:
        """True when CPU is measured per side (cgroups); False for the rusage fallback."""
        return bool(self.groups)

    def preexec(self, side: str | None):
        """A preexec_fn that moves the child into `side`'s group (None: no accounting)."""
        path = self.groups.get(side) if side else None
        if path is None:
            return None
        procs = str(path / "cgroup.procs")

        def join():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        return join

    def snapshot(self) -> dict:
        """Counters to subtract: per-side CPU, our children's rusage, and machine busy time."""
        snap = {"machine": _machine_busy_seconds(), "t": time.monotonic()}
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        snap["children"] = ru.ru_utime + ru.ru_stime
        for side, path in self.groups.items():
            snap[side] = self._usage(path)
        return snap

    def delta(self, before: dict, after: dict) -> dict:
        """CPU seconds per side ('src', 'dst'; or 'total' only) and others' load in the interval."""
        out = {}
        if self.groups:
            for side in SIDES:
                out[side] = after[side] - before[side]
            ours = out["src"] + out["dst"]
        else:
            out["total"] = after["children"] - before["children"]
            ours = out["total"]
        wall = max(after["t"] - before["t"], 1e-6)
        busy = after["machine"] - before["machine"]
        # Load from processes that are not ours, in cores (0..nproc); may read a bit
        # negative from accounting granularity on short runs.
        out["background_cores"] = max(busy - ours, 0.0) / wall if busy is not None else None
        return out

    def close(self):
        """Removes the groups (they are empty once our children have exited)."""
        for path in self.groups.values():
            for _ in range(20):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)

    def _usage(self, path: Path) -> float:
        if self._v2:
            for line in (path / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
            return 0.0
        return int((path / "cpuacct.usage").read_text()) / 1e9


def _machine_busy_seconds() -> float | None:
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    busy = sum(fields[:8]) - idle  # user..steal; guest time is already inside user
    return busy / os.sysconf("SC_CLK_TCK")


def spawn(argv, meter: CpuMeter | None = None, side: str | None = None, *, env=None,
          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    """Starts argv in a new session (its own process group), in `side`'s CPU group."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        start_new_session=True,
        preexec_fn=meter.preexec(side) if meter else None,
    )


def stop(proc: subprocess.Popen | None, grace: float = 3.0):
    """Ends proc's process group (SIGTERM, then SIGKILL); a no-op when it has exited."""
    if proc is None:
        return
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
    else:
        # The leader exited, but a member of its group may linger (e.g. a decompressor).
        _signal_group(proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen, sig):
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait(proc: subprocess.Popen, deadline: float) -> int | None:
    """Waits until proc exits or the monotonic `deadline` passes; None on timeout."""
    try:
        return proc.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        return None


def run(argv, *, check=True, timeout=None, **kw) -> subprocess.CompletedProcess:
    """subprocess.run with text output captured; raises with stderr on failure when check."""
    res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} exited {res.returncode}: "
                           f"{res.stderr.strip()[-2000:]}")
    return res
