#!/usr/bin/env python3
"""haul's benchmark: haul against scp, rsync, tar | ssh and tar | nc on a shaped veth link,
and (the stream family) haul's pipe mode against socat, nc, mbuffer and zstd | nc.

Sets up the test bed (shared/testbed/netlab: namespaces hsrc and hdst over a veth, optionally
rate-capped), generates or reuses the data sets, runs every method on every data set and link
(runs interleaved across methods), verifies every copy, and prints a markdown report.
See bench/README.md. Needs root; always tears the test bed and its sshd down.

    sudo python3 bench/run.py --quick           # a smoke run of a few minutes
    sudo python3 bench/run.py --out report.md   # the full benchmark (hours)
"""

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchlib import datasets, dstfs, methods, netbed, procs, report

REPO = Path(__file__).resolve().parent.parent
ALL_LINKS = ("unshaped", "10gbit", "1gbit", "100mbit")
# --quick runs every method on the unshaped link, and these on the shaped one (time budget).
QUICK_SHAPED_METHODS = ("haul", "haul-none", "rsync-z", "tar-nc", "iperf3",
                        "haul-pipe", "nc")
# `haul --compress auto` is what plain `haul` does across a network, and pipe mode with another
# codec is a variant: run only when asked.
NOT_BY_DEFAULT = ("haul-auto", "haul-pipe-auto", "haul-pipe-lz4", "haul-pipe-zstd")

# Sizes per mode: the defaults for a 2-core, 24 GB machine, and tiny ones for --quick.
SIZES = {
    "full": {"big_size": "4G", "pg_scale": 150, "small_count": 20000, "small_size": "100K",
             "sparse_size": "8G", "sparse_data": "256M", "million_count": 1_000_000},
    "quick": {"big_size": "64M", "pg_scale": 1, "small_count": 500, "small_size": "100K",
              "sparse_size": "256M", "sparse_data": "16M", "million_count": 10_000},
}


@dataclass
class Config:
    """The validated plan of a run (built from the command line by `build_config`)."""

    quick: bool
    links: list[str]
    plan: dict            # link -> (data set kinds, method ids)
    specs: dict           # kind -> datasets.Spec
    runs: int
    link_runs: dict       # link -> runs, where --link-runs overrides --runs
    ceiling: list[str]    # links whose raw ceiling iperf3 measures
    iperf_seconds: int
    data_dir: Path
    dst_fs: str           # dstfs.KINDS: where the copies land
    source: str           # "warm" (read into the page cache) or "cold" (evicted) before each run
    out: Path | None
    haul: Path
    netlab: Path
    command: str


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark haul against scp, rsync, tar|ssh and tar|nc over a veth test bed.",
        epilog="Methods: " + ", ".join([*methods.METHODS, "iperf3"]) + ". Data sets: "
               + ", ".join(datasets.KINDS) + ". Links: " + ", ".join(ALL_LINKS)
               + " (or any RATE such as 2500mbit).")
    p.add_argument("--quick", action="store_true",
                   help="tiny data sets, links unshaped (all methods) and 1gbit (four), 1 run: "
                        "a smoke run of about two minutes")
    p.add_argument("--datasets", help="comma-separated data sets (default: all but million); "
                                       "'stream' stands for the stream family "
                                       "(stream-pg,stream-rand)")
    p.add_argument("--links", help="comma-separated links (default: all four; quick: "
                                    "unshaped,1gbit)")
    p.add_argument("--methods", help="comma-separated methods, 'all' (default), iperf3 included")
    p.add_argument("--link-methods", action="append", default=[], metavar="LINK=M1,M2",
                   help="methods for one link only (repeatable), e.g. 100mbit=haul,tar-nc")
    p.add_argument("--link-datasets", action="append", default=[], metavar="LINK=D1,D2",
                   help="data sets for one link only (repeatable), e.g. 100mbit=pg,small")
    p.add_argument("--runs", type=int, help="runs per method, the median is shown "
                                            "(default 3; quick: 1)")
    p.add_argument("--link-runs", action="append", default=[], metavar="LINK=N",
                   help="runs per method for one link only (repeatable), e.g. 100mbit=1")
    p.add_argument("--data-dir", type=Path, default=Path("/work/bench-data"),
                   help="where data sets are cached and copies land (default /work/bench-data)")
    p.add_argument("--dst-fs", choices=dstfs.KINDS, default="fresh-ext4",
                   help="where copies land: fresh-ext4 (default) makes a new journaled ext4 on "
                        "a loop device for every timed run, so no run pays for the inodes the "
                        "previous one freed; dir: DATA_DIR/dst on the data dir's file system")
    p.add_argument("--source", choices=("warm", "cold"), default="warm",
                   help="the source's pages before each timed run: warm (default) reads it into "
                        "the page cache; cold evicts it (posix_fadvise DONTNEED per file), as "
                        "a data directory larger than memory is read")
    p.add_argument("--out", type=Path, help="also write the markdown report to this file")
    p.add_argument("--haul", type=Path, help="the haul binary (default: target/release/haul)")
    p.add_argument("--netlab", type=Path, default=REPO.parent / "shared/testbed/netlab",
                   help="the netlab script (default: ../shared/testbed/netlab)")
    p.add_argument("--iperf-seconds", type=int, help="iperf3 duration (default 5; quick: 1)")
    sizes = p.add_argument_group("data set sizes (defaults: the issue's; --quick: tiny)")
    sizes.add_argument("--big-size", help="big and stream-rand: file size (default 4G; "
                                           "quick 64M)")
    sizes.add_argument("--pg-scale", type=int,
                       help="pg and stream-pg: pgbench scale (default 150 = 3.4 GB with WAL; "
                            "quick 1)")
    sizes.add_argument("--small-count", type=int, help="small: file count (default 20000; "
                                                       "quick 500)")
    sizes.add_argument("--small-size", help="small: file size (default 100K)")
    sizes.add_argument("--sparse-size", help="sparse: apparent size (default 8G; quick 256M)")
    sizes.add_argument("--sparse-data", help="sparse: data in it (default 256M; quick 16M)")
    sizes.add_argument("--million-count", type=int,
                       help="million (only when named): file count (default 1000000; "
                            "quick 10000)")
    return p.parse_args(argv)


def _list(text: str | None, allowed, default, what: str) -> list[str]:
    if text is None or text == "all":
        return list(default)
    items = [x.strip() for x in text.split(",") if x.strip()]
    if allowed is datasets.KINDS:  # 'stream': the stream family
        items = [k for x in items for k in (datasets.STREAM_KINDS if x == "stream" else (x,))]
    bad = [x for x in items if x not in allowed]
    if bad:
        raise SystemExit(f"run.py: unknown {what}: {', '.join(bad)} "
                         f"(known: {', '.join(allowed)})")
    return items


def _per_link(pairs: list[str], links: list[str], allowed, what: str) -> dict:
    out = {}
    for pair in pairs:
        link, sep, items = pair.partition("=")
        if not sep or link not in links:
            raise SystemExit(f"run.py: --link-{what} wants LINK=A,B with LINK among "
                             f"--links ({', '.join(links)}), got {pair!r}")
        out[link] = _list(items, allowed, allowed, what)
    return out


def build_config(a: argparse.Namespace, argv: list[str]) -> Config:
    """Checks the command line and turns it into a plan; exits with a message on errors."""
    mode = "quick" if a.quick else "full"
    links = _list(a.links, _AnyLink(), ("unshaped", "1gbit") if a.quick else ALL_LINKS,
                  "links")
    for link in links:
        try:
            netbed.rate_bits(link)
        except ValueError as e:
            raise SystemExit(f"run.py: {e}") from None
    kinds = _list(a.datasets, datasets.KINDS,
                  [k for k in datasets.KINDS if k not in datasets.ON_REQUEST], "data sets")
    method_names = [*methods.METHODS, "iperf3"]
    mids = _list(a.methods, method_names,
                 [m for m in method_names if m not in NOT_BY_DEFAULT], "methods")
    link_m = _per_link(a.link_methods, links, method_names, "methods")
    link_d = _per_link(a.link_datasets, links, datasets.KINDS, "datasets")
    plan, ceiling = {}, []
    for link in links:
        default = mids
        if a.quick and a.methods is None and link != "unshaped":
            default = [m for m in mids if m in QUICK_SHAPED_METHODS]
        lm = link_m.get(link, default)
        ms = [m for m in lm if m != "iperf3"]
        # A data set runs where a method of its family (tree or stream) is planned.
        plan[link] = ([k for k in kinds if k in link_d.get(link, kinds)
                       and any(methods.fits(methods.METHODS[m], k) for m in ms)], ms)
        if "iperf3" in lm:
            ceiling.append(link)
    s = {k: (v if getattr(a, k) is None else getattr(a, k)) for k, v in SIZES[mode].items()}
    try:
        specs = {
            "big": datasets.Spec("big", {"size": datasets.parse_size(str(s["big_size"]))}),
            "pg": datasets.Spec("pg", {"scale": int(s["pg_scale"])}),
            "small": datasets.Spec("small", {"count": int(s["small_count"]),
                                             "size": datasets.parse_size(str(s["small_size"]))}),
            "sparse": datasets.Spec("sparse", {
                "size": datasets.parse_size(str(s["sparse_size"])),
                "data": datasets.parse_size(str(s["sparse_data"]))}),
            "stream-pg": datasets.Spec("stream-pg", {"scale": int(s["pg_scale"])}),
            "stream-rand": datasets.Spec("stream-rand", {
                "size": datasets.parse_size(str(s["big_size"]))}),
            "million": datasets.Spec("million", {"count": int(s["million_count"])}),
        }
    except ValueError as e:
        raise SystemExit(f"run.py: {e}") from None
    if specs["sparse"].params["data"] > specs["sparse"].params["size"]:
        raise SystemExit("run.py: --sparse-data must not exceed --sparse-size")
    runs = a.runs if a.runs is not None else (1 if a.quick else 3)
    if runs < 1:
        raise SystemExit("run.py: --runs must be at least 1")
    link_runs = {}
    for pair in a.link_runs:
        link, _, n = pair.partition("=")
        if link not in links or not n.isdigit() or int(n) < 1:
            raise SystemExit(f"run.py: --link-runs wants LINK=N with LINK one of --links "
                             f"({', '.join(links)}) and N >= 1, got {pair!r}")
        link_runs[link] = int(n)
    haul = a.haul or REPO / "target/release/haul"
    if not os.access(haul, os.X_OK):
        raise SystemExit(f"run.py: no haul binary at {haul} (cargo build --release, or --haul)")
    if not a.netlab.exists():
        raise SystemExit(f"run.py: netlab not found at {a.netlab} (--netlab)")
    data_dir = a.data_dir.resolve()
    if data_dir == REPO or REPO in data_dir.parents:
        raise SystemExit("run.py: --data-dir must be outside the repository")
    return Config(
        quick=a.quick, links=links, plan=plan,
        specs={k: specs[k] for k in datasets.KINDS if any(k in plan[l][0] for l in links)},
        runs=runs, link_runs=link_runs, ceiling=ceiling,
        iperf_seconds=a.iperf_seconds or (1 if a.quick else 5), data_dir=data_dir,
        dst_fs=a.dst_fs, source=a.source, out=a.out, haul=Path(haul).resolve(), netlab=a.netlab.resolve(),
        command="python3 bench/run.py " + shlex.join(argv))


class _AnyLink:
    """Lets _list accept any link name: rate_bits validates it."""

    def __contains__(self, item):
        return True


def _interrupt(signum, frame):
    """SIGTERM ends a run like Ctrl-C does: through the teardown in main's finally."""
    raise KeyboardInterrupt


@dataclass
class Outcome:
    """What a benchmark produced, also when it was cut short."""

    results: list = field(default_factory=list)
    ceilings: dict = field(default_factory=dict)  # link -> {streams: bytes/s}
    notes: list = field(default_factory=list)
    header: list = field(default_factory=list)
    interrupted: bool = False


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("run.py: must run as root (network namespaces, sshd, cgroups)", file=sys.stderr)
        return 2
    cfg = build_config(args, argv)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()

    def log(msg: str):
        el = int(time.monotonic() - started)
        print(f"[{el // 60:3d}:{el % 60:02d}] {msg}", file=sys.stderr, flush=True)

    bed = netbed.NetBed(cfg.netlab)
    busy = bed.existing()
    if busy:
        print(f"run.py: namespace(s) {', '.join(busy)} exist: another benchmark or test is using "
              f"the test bed (if stale: {cfg.netlab} down)", file=sys.stderr)
        return 1
    dst = dstfs.DstFs(cfg.dst_fs, cfg.data_dir / "dst")
    try:
        dst.check()
    except RuntimeError as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2
    out = Outcome()
    sets, plan = _prepare(cfg, out, log)
    stamp = datetime.datetime.now(datetime.timezone.utc)
    results_dir = cfg.data_dir / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    jsonl = results_dir / f"{stamp:%Y%m%d-%H%M%S}.jsonl"
    try:
        dst.setup()  # before the sshd starts: it must see every run's mount
    except (OSError, RuntimeError) as e:
        dst.teardown()
        print(f"run.py: cannot prepare the destination ({e}); --dst-fs dir does without "
              "mounts", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="haulbench-"))
    meter = procs.CpuMeter(str(os.getpid()))
    try:
        haul = work / "haul"
        shutil.copy2(cfg.haul, haul)  # a private copy: others may rebuild target/ meanwhile
        out.header = _header(cfg, stamp, haul, sets, dst)
        if not meter.per_side:
            out.notes.append("no cgroup could be created: CPU s is the total of the harness's "
                             "own child processes (marked *), without the sshd side of ssh "
                             "methods")
        _measure(cfg, plan, sets, bed, work, meter, haul, dst, out, jsonl, log)
    except KeyboardInterrupt:
        out.interrupted = True
        out.notes.append("INTERRUPTED: the tables are incomplete")
        log("interrupted: tearing down")
    finally:
        bed.down()
        meter.close()
        shutil.rmtree(work, ignore_errors=True)
        dst.teardown()

    out.notes += _method_notes()
    text = report.render(out.header, cfg.links, plan, sets, out.ceilings, out.results, out.notes)
    print(text)
    (results_dir / f"{stamp:%Y%m%d-%H%M%S}.md").write_text(text + "\n")
    if cfg.out:
        cfg.out.write_text(text + "\n")
    log(f"done in {(time.monotonic() - started) / 60:.1f} min; raw results: {jsonl}")
    failed = sum(not r.ok for r in out.results)
    # The closing line CI runners recognise: every timed run is a verified copy or a failure.
    print(f"bench: {len(out.results) - failed} passed, {failed} failed", file=sys.stderr)
    if out.interrupted:
        return 130
    return 1 if failed else 0


def _prepare(cfg: Config, out: Outcome, log) -> tuple[dict, dict]:
    """Makes or finds the data sets and drops what cannot run: (data sets, plan per link)."""
    sets: dict[str, datasets.Dataset] = {}
    for kind, spec in cfg.specs.items():
        try:
            sets[kind] = datasets.prepare(spec, cfg.data_dir / "src", log)
        except datasets.Skip as e:
            out.notes.append(f"data set {kind} skipped: {e}")
            log(f"data set {kind}: SKIPPED: {e}")
    missing = {mid: methods.missing_programs(methods.METHODS[mid]) for mid in methods.METHODS}
    for mid, progs in missing.items():
        if progs and any(mid in cfg.plan[link][1] for link in cfg.links):
            out.notes.append(f"{mid} skipped: {', '.join(progs)} not installed")
            log(f"method {mid}: SKIPPED ({', '.join(progs)} not installed)")
    plan = {link: ([k for k in ks if k in sets], [m for m in ms if not missing[m]])
            for link, (ks, ms) in cfg.plan.items()}
    total = sum(sum(methods.fits(methods.METHODS[m], k) for m in ms)
                * cfg.link_runs.get(link, cfg.runs) for link, (ks, ms) in plan.items() for k in ks)
    log(f"{total} timed runs planned over {', '.join(cfg.links)}")
    return sets, plan


def _measure(cfg: Config, plan: dict, sets: dict, bed: netbed.NetBed, work: Path,
             meter: procs.CpuMeter, haul: Path, dst: dstfs.DstFs, out: Outcome, jsonl: Path,
             log):
    """Every link, data set, run and method, in that nesting; results go to out and jsonl."""
    sshd = None
    try:
        for link in cfg.links:
            kinds, mids = plan[link]
            bed.up(link)
            log(f"link {link}: up")
            if link in cfg.ceiling:
                out.ceilings[link] = {n: bed.iperf(cfg.iperf_seconds, n) for n in (1, 4)}
                log(f"link {link}: iperf3 " + ", ".join(
                    f"{n}x {v / 1e6:,.0f} MB/s" if v else f"{n}x failed"
                    for n, v in out.ceilings[link].items()))
            if sshd is None and any(methods.METHODS[m].ssh for m in mids):
                sshd = netbed.Sshd(bed, work, meter)
                sshd.start()
            runner = methods.Runner(bed, sshd, meter, haul, work, dst, cold=cfg.source == "cold")
            for kind in kinds:
                ds = sets[kind]
                for i in range(cfg.link_runs.get(link, cfg.runs)):
                    # Each round starts one method later, so that no method is always the
                    # one that follows the same neighbour (or the data set's first run).
                    fit = [m for m in mids if methods.fits(methods.METHODS[m], kind)]
                    k = i % len(fit)
                    for mid in fit[k:] + fit[:k]:
                        r = _one(runner, methods.METHODS[mid], ds, link, i + 1)
                        out.results.append(r)
                        with open(jsonl, "a") as f:
                            f.write(json.dumps(dataclasses.asdict(r)) + "\n")
                        speed = (f"{r.seconds:7.2f} s {ds.bytes / 1e6 / r.seconds:8,.0f} MB/s"
                                 if r.seconds else "")
                        label = methods.METHODS[mid].label(kind == "sparse")
                        log(f"{link:>8} {kind:6} {label:28} run {i + 1}: {speed} {r.status}")
    finally:
        if sshd is not None:
            sshd.stop()


def _one(runner: methods.Runner, m: methods.Method, ds: datasets.Dataset, link: str,
         index: int) -> methods.RunResult:
    """One timed run; an error of the harness itself becomes a failed row, not a crash."""
    try:
        return runner.run(m, ds, link, netbed.rate_bits(link), index)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        return methods.RunResult(link, ds.spec.kind, m.id, index,
                                 status=f"FAILED: harness error: {e}")


def _header(cfg: Config, stamp, haul: Path, sets: dict, dst: dstfs.DstFs) -> list[str]:
    mem = next((int(l.split()[1]) for l in Path("/proc/meminfo").read_text().splitlines()
                if l.startswith("MemTotal:")), 0)
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text()
                .splitlines() if l.startswith("model name")), platform.machine())
    df = procs.run(["df", "-h", "--output=source,fstype,size", str(cfg.data_dir)],
                   check=False).stdout.splitlines()[-1].split()
    version = procs.run([str(haul), "--version"], check=False).stdout.strip()
    git = procs.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=False)
    dirty = procs.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "src",
                       "Cargo.toml", "Cargo.lock"], check=False).stdout.strip()
    profile = "release build" if "/release/" in str(cfg.haul) else (
        "**debug build: not representative**" if "/debug/" in str(cfg.haul) else str(cfg.haul))
    return [
        f"### haul benchmark, {stamp:%Y-%m-%d %H:%M} UTC{' (--quick)' if cfg.quick else ''}",
        "",
        f"- Machine: {os.cpu_count()} cores ({cpu}), {mem / 2**20:.0f} GiB RAM, kernel "
        f"{platform.release()}; data on {' '.join(df)} "
        f"(source and destination on the same disk). Shared machine: other jobs were running.",
        f"- Destination (`--dst-fs {cfg.dst_fs}`): {dst.describe()}.",
        f"- Source (`--source {cfg.source}`): "
        + ("read into the page cache before every run." if cfg.source == "warm" else
           "evicted from the page cache before every run (every method reads it from disk)."),
        f"- haul: {version}, {profile}, git {git.stdout.strip() or '?'}"
        f"{' + uncommitted changes in src/' if dirty else ''}.",
        f"- Command: `{cfg.command}` ({cfg.runs} run{'s' if cfg.runs > 1 else ''} per "
        f"method{'' if not cfg.link_runs else ' unless the link says otherwise'}, interleaved, "
        "each round starting one method later).",
        "- Data sets: " + "; ".join(f"{k}: {d.spec.title}" for k, d in sets.items()) + ".",
    ]


def _method_notes() -> list[str]:
    return [
        "The time runs until the last byte is durable at the destination: haul fsyncs every "
        "file (its exit 0 says so); every other method ends with `sync -f DST` inside the timed "
        "region, after remote decompression and untar.",
        "ssh methods use OpenSSH's defaults (cipher chacha20-poly1305 on OpenSSH 9) and a new "
        "connection per run; haul runs with its defaults (streams: twice the cores).",
        "On the sparse set tar gets --sparse and rsync -S; scp has no such option. "
        "\"holes lost\" marks a copy that is correct but written dense.",
        "MB = 10^6 bytes. MB/s: apparent size of the data set / wall time (the sparse set "
        "counts its holes). Wire MB: link-layer bytes from source to destination on the veth.",
        "Stream family: every stream method reads `cat FILE |` on the source and writes "
        "`> DST/NAME/FILE` on the destination, then `sync -f DST` (timed); haul's file mode "
        "(`haul send FILE`, fsync) is the reference. Each copy is verified (size and hash of "
        "the file written). Tools run with their defaults (haul: TLS, adaptive codec "
        "(auto), 2 x cores streams, --buffer 64M; mbuffer: 4 MiB blocks, 2% of RAM).",
    ]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
