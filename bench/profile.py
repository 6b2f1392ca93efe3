#!/usr/bin/env python3
"""Where haul's CPU goes, per stage and per side: a sampled profile of one transfer.

Runs `haul recv` and `haul send` over loopback under `perf record -g` (both processes, all
threads, kernel included), then puts every sample in one stage by walking its call chain from
the leaf up and taking the first frame that names a stage:

    read      reading source files (pread, page cache copy-out)
    hash      BLAKE3 (block hashes, both sides)
    compress  zstd / lz4, both directions
    encrypt   TLS record protection (AES-GCM / ChaCha20 in ring, rustls framing)
    socket    send/recv on sockets, TCP/IP and the loopback device
    write     writing destination files (pwrite, page cache copy-in)
    fsync     fsync / sync_file_range writeback
    metadata  opening, creating, linking, renaming, chmod/chown/utimes, stat, mkdir
    wait      futex / poll / scheduler (threads handing work over)
    other     everything else (allocation, haul's own bookkeeping, ...)

It prints, per side, CPU seconds per stage (samples x period) and the share. Use it for the
question "which stage is the bottleneck" (issue 4); it measures CPU, not wall time, so a side
using ~1 core per core of the machine is CPU-bound and its biggest stage is the one to cut.

    sudo python3 bench/profile.py SRC [--haul target/release/haul] [-- SEND FLAGS...]
    sudo python3 bench/profile.py --copy SRC [-- COPY FLAGS...]   # a local `haul copy`

With `--copy` one process runs both sides; its threads are told apart by name (`haul-recv-*`,
`haul-finish-*`, `haul-receiver`, `haul-dispatch` are the receiver, the rest the sender).

Needs root (or perf_event_paranoid <= 1) and `perf`. Copies land in a temp dir, removed after.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FREQ = 999  # samples per second per CPU

# Leaf-first: the first frame of a call chain that matches decides the stage.
STAGES = [
    ("hash", re.compile(r"blake3", re.I)),
    ("compress", re.compile(r"zstd|ZSTD|lz4|LZ4|HUF_|FSE_")),
    ("encrypt", re.compile(r"aes|gcm|ghash|chacha|poly1305|ring_core|rustls::record_layer")),
    ("fsync", re.compile(r"do_fsync|ext4_sync_file|sync_file_range|__x64_sys_fdatasync")),
    ("write", re.compile(r"ext4_buffered_write_iter|generic_perform_write|ext4_file_write_iter")),
    ("read", re.compile(r"filemap_read|ext4_file_read_iter")),
    ("metadata", re.compile(r"do_sys_openat2|do_renameat2|do_linkat|do_unlinkat|do_mkdirat|"
                            r"chmod_common|chown_common|do_utimes|vfs_statx|vfs_fstat|"
                            r"__x64_sys_close|__fput|do_fallocate|do_truncate|do_sys_ftruncate|"
                            r"copy_file_range")),
    ("socket", re.compile(r"tcp_sendmsg|tcp_recvmsg|unix_stream_sendmsg|unix_stream_recvmsg|"
                          r"net_rx_action|__napi_poll|loopback_xmit|tcp_v4_rcv|__sys_sendto|"
                          r"__sys_recvfrom|sock_write_iter|sock_read_iter|tcp_write_xmit")),
    ("wait", re.compile(r"futex|do_epoll|do_sys_poll|__schedule|schedule_timeout")),
]


def classify(frames: list[str]) -> str:
    for sym in frames:
        for stage, pattern in STAGES:
            if pattern.search(sym):
                return stage
    return "other"


RECV_THREADS = re.compile(r"^haul-(recv-|finish-|receiver|dispatch)")


def parse(script: str, sides: dict[int, str]):
    """perf script output (-F comm,pid,tid,period,ip,sym, call chains) -> (side -> stage ->
    CPU ns, side -> (stage, leaf symbol) -> CPU ns); the cpu-clock period is nanoseconds."""
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    leaves: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    header = re.compile(r"^\s*(\S.*?)\s+(\d+)/(\d+)\s+(\d+)\s*$")
    pid, period, frames = None, 0, []

    comm = ""

    def flush():
        if pid is not None and pid in sides:
            side = sides[pid]
            if side == "copy":
                side = "recv" if RECV_THREADS.match(comm) else "send"
            stage = classify(frames)
            out[side][stage] += period
            leaves[side][(stage, frames[0] if frames else "?")] += period

    for line in script.splitlines():
        m = header.match(line)
        if m:
            flush()
            comm, pid, period, frames = m.group(1), int(m.group(2)), int(m.group(4)), []
        elif line.strip():
            parts = line.strip().split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else parts[0])
    flush()
    return out, leaves


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path, help="file or directory to send")
    p.add_argument("--haul", type=Path, default=REPO / "target/release/haul")
    p.add_argument("--top", type=int, default=6, help="hottest functions shown per side")
    p.add_argument("--copy", action="store_true", help="profile a local `haul copy` instead")
    p.epilog = "Extra `haul send` (or `copy`) flags go after `--`."
    # Split at `--` here: argparse gives a `nargs="*"` positional nothing once options
    # follow the first positional, and then refuses the flags after `--`.
    flags = argv[argv.index("--") + 1:] if "--" in argv else []
    a = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    a.flags = flags
    if not shutil.which("perf"):
        print("profile.py: perf is not installed (apt-get install linux-perf)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="haul-profile-") as tmp:
        t = Path(tmp)
        dest, data = t / "dest", t / "perf.data"
        script = (f"'{a.haul}' recv -q --listen 127.0.0.1 --ticket-file '{t}/ticket' '{dest}' & "
                  f"echo $! > '{t}/recv.pid'; "
                  f"while [ ! -s '{t}/ticket' ]; do sleep 0.01; done; "
                  f"'{a.haul}' send -q {' '.join(map(str, a.flags))} '{a.src}' "
                  f"--to \"$(head -1 '{t}/ticket')\" & echo $! > '{t}/send.pid'; wait")
        if a.copy:
            script = (f"'{a.haul}' copy -q {' '.join(map(str, a.flags))} '{a.src}' '{dest}' & "
                      f"echo $! > '{t}/copy.pid'; wait")
        t0 = time.monotonic()
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-g", "-F", str(FREQ),
                        "-o", str(data), "--",
                        "sh", "-c", script], check=True, stdout=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        names = ("copy",) if a.copy else ("send", "recv")
        sides = {int((t / f"{s}.pid").read_text()): s for s in names}
        text = subprocess.run(["perf", "script", "-i", str(data), "-F",
                               "comm,pid,tid,period,ip,sym"], check=True, capture_output=True,
                              text=True).stdout
    stages, leaves = parse(text, sides)
    print(f"{a.src}: {wall:.2f} s wall (under perf), flags: {' '.join(a.flags) or 'defaults'}")
    names = [s for s, _ in STAGES] + ["other"]
    for side in ("send", "recv"):
        c = stages.get(side, collections.Counter())
        total = sum(c.values()) or 1
        print(f"  {side}: {total / 1e9:.1f} CPU s: " + ", ".join(
            f"{n} {c[n] / 1e9:.1f} s ({100 * c[n] / total:.0f}%)"
            for n in names if c[n] * 100 >= total * 0.5))
        top = leaves.get(side, collections.Counter()).most_common(a.top)
        if top:
            print("    hottest functions: " + "; ".join(
                f"{sym[:60]} [{stage}] {100 * ns / total:.0f}%" for (stage, sym), ns in top))
    counts = {side: sum(stages.get(side, {}).values()) for side in ("send", "recv")}
    both = sum(counts.values()) or 1
    print("  share of all sampled CPU: " + ", ".join(
        f"{side} {100 * n / both:.0f}%" for side, n in counts.items())
          + f"; machine: {os.cpu_count()} cores x {wall:.1f} s = {os.cpu_count() * wall:.1f} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
