#!/usr/bin/env python3
"""Peak memory per side against the number of files: `haul recv` and `haul send` over
loopback, each under `/usr/bin/time -v`, on the `million` data set (COUNT files of 1-8 KiB,
PER_DIR per directory (default 1,000), generated on demand into DATA_DIR/src and reused; see
benchlib.datasets).

    python3 bench/memory.py [--haul target/release/haul] [--counts 100000,1000000]
                            [--per-dir 1000] [-- FLAGS]

Prints, per count: wall time, and per side the peak RSS ("Maximum resident set size") and
CPU seconds. FLAGS go to `haul send` (e.g. --no-encrypt). The copy lands in a temp dir under
DATA_DIR, removed after each run. Memory that stays flat from 100,000 to 1,000,000 files is
what says a transfer's memory does not grow with the number of files.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import datasets  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str], log: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen(["/usr/bin/time", "-v", "-o", str(log), *argv], **kw)


def usage(log: Path) -> dict:
    text = log.read_text()
    def num(label: str) -> float:
        m = re.search(rf"{label}: ([0-9.]+)", text)
        return float(m.group(1)) if m else float("nan")
    return {"rss_mib": num(r"Maximum resident set size \(kbytes\)") / 1024,
            "cpu_s": num(r"User time \(seconds\)") + num(r"System time \(seconds\)"),
            "status": num("Exit status")}


def run_one(haul: str, src: Path, work: Path, flags: list[str]) -> dict:
    dest, ticket = work / "out" / "dst", work / "ticket"
    dest.parent.mkdir()
    rlog, slog = work / "recv.time", work / "send.time"
    recv = timed([haul, "recv", str(dest), "--ticket-file", str(ticket), "-q"], rlog,
                 stdout=subprocess.DEVNULL)
    try:
        for _ in range(300):
            if ticket.exists() and ticket.stat().st_size > 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("haul recv printed no ticket in 30 s")
        t0 = time.monotonic()
        send = timed([haul, "send", str(src) + "/", "--ticket-file", str(ticket), "-q",
                      *flags], slog)
        send.wait()
        recv.wait(timeout=3600)
        wall = time.monotonic() - t0
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    return {"wall_s": wall, "send": usage(slog), "recv": usage(rlog)}


def shape_check(ds: datasets.Dataset, copy: Path) -> str:
    """'ok' when the copy holds the same paths and sizes (haul verified every byte itself;
    hashing a million files again would take longer than the transfer)."""
    got = datasets.listing(copy, with_hashes=False)[0]
    if datasets._shape(got) != datasets._shape(ds.listing):
        return "FAILED: the copy's paths or sizes differ from the source"
    return "ok"


def main(argv: list[str]) -> int:
    flags = []
    if "--" in argv:
        i = argv.index("--")
        argv, flags = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--haul", default=str(REPO / "target/release/haul"))
    p.add_argument("--counts", default="100000,1000000",
                   help="comma-separated file counts (default 100000,1000000)")
    p.add_argument("--per-dir", type=int, default=1000,
                   help="files per directory (default 1000; 2 makes a directory per 2 files)")
    p.add_argument("--data-dir", type=Path, default=Path("/work/bench-data"))
    a = p.parse_args(argv)
    counts = [int(c) for c in a.counts.split(",")]
    print("| files | wall s | send peak RSS MiB | send CPU s | recv peak RSS MiB | recv CPU s |")
    print("|---:|---:|---:|---:|---:|---:|")
    failed = False
    for n in counts:
        # The default shape names no per_dir, so sets made before it are reused.
        params = {"count": n} if a.per_dir == 1000 else {"count": n, "per_dir": a.per_dir}
        ds = datasets.prepare(datasets.Spec("million", params), a.data_dir / "src",
                              lambda m: print(m, file=sys.stderr, flush=True))
        work = Path(tempfile.mkdtemp(prefix="haul-memory-", dir=a.data_dir))
        try:
            r = run_one(a.haul, ds.root, work, flags)
            ok = r["send"]["status"] == 0 and r["recv"]["status"] == 0
            verdict = shape_check(ds, work / "out" / "dst") if ok else "haul failed"
            ok = verdict.startswith("ok")
            if not ok:
                print(f"{n:,} files: {verdict}", file=sys.stderr)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        failed |= not ok
        s, d = r["send"], r["recv"]
        print(f"| {n:,} | {r['wall_s']:.1f} | {s['rss_mib']:.1f} | {s['cpu_s']:.1f} | "
              f"{d['rss_mib']:.1f} | {d['cpu_s']:.1f} |{'' if ok else ' FAILED'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
