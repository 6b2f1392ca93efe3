"""The markdown report: a summary per link, then one table per data set and link.

Each table row is one method: the median of its runs (the run with the median wall time, so
that all columns of a row come from one real run), its logical MB/s (apparent bytes of the
data set / wall time, MB = 10^6 bytes), the bytes it put on the wire src->dst, the CPU it used
on each side, haul's peak RSS, and its time divided by the best time of a non-haul method.
A failed verification, failed exit status or timeout in any run is shown in bold capitals and
keeps the row out of the comparison.
"""

import statistics
from collections import defaultdict

from .datasets import STREAM_KINDS, Dataset, fmt_size
from .methods import METHODS, STREAM_METHODS, RunResult


def md(text: str) -> str:
    """Escapes a table cell."""
    return text.replace("|", "\\|")


def aggregate(runs: list[RunResult]) -> tuple[RunResult | None, str, int]:
    """(the median-time run, the combined status, how many runs failed)."""
    failed = [r for r in runs if not r.ok]
    timed = [r for r in runs if r.seconds is not None]
    rep = None
    if timed:
        median = statistics.median_low([r.seconds for r in timed])
        rep = next(r for r in timed if r.seconds == median)
    if failed:
        return rep, f"**{failed[0].status}**" + (f" ({len(failed)}/{len(runs)} runs)"
                                                  if len(runs) > 1 else ""), len(failed)
    return rep, (rep.status if rep else "no run"), 0


def _cpu(r: RunResult) -> str:
    if "src" in r.cpu:
        return f"{r.cpu['src']:.1f}+{r.cpu['dst']:.1f}"
    if "total" in r.cpu:
        return f"{r.cpu['total']:.1f}*"
    return ""


def _rss(r: RunResult) -> str:
    if not r.rss_kib:
        return ""
    parts = [f"{v / 1024:.0f}" if v else "?" for v in (r.rss_kib.get("send"),
                                                      r.rss_kib.get("recv"))]
    return "/".join(parts)


def _mb(n: int | None) -> str:
    return "" if n is None else f"{n / 1e6:,.0f}"


def table(ds: Dataset, link: str, method_ids: list[str], results: list[RunResult]) -> list[str]:
    """One table: every method's median run on ds over link."""
    by_method = defaultdict(list)
    for r in results:
        by_method[r.method].append(r)
    rows = {}
    for mid in method_ids:
        if by_method.get(mid):
            rows[mid] = aggregate(by_method[mid])
    good = {mid: rep.seconds for mid, (rep, _, nfail) in rows.items()
            if rep is not None and nfail == 0}
    others = [s for mid, s in good.items() if not METHODS[mid].is_haul]
    best_other = min(others) if others else None
    fastest = min(good.values()) if good else None
    out = ["| method | time (s) | MB/s | wire MB | CPU s src+dst | haul peak RSS MiB send/recv "
           "| time ÷ best other | others' load (cores) | verified |",
           "|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    sparse = ds.spec.kind == "sparse"
    for mid, (rep, status, nfail) in rows.items():
        label = md(METHODS[mid].label(sparse))
        if rep is None:
            out.append(f"| {label} | | | | | | | | {md(status)} |")
            continue
        secs = f"{rep.seconds:.2f}"
        if nfail == 0 and rep.seconds == fastest:
            secs = f"**{secs}**"
        ratio = ""
        if best_other and nfail == 0:
            ratio = f"{rep.seconds / best_other:.2f}"
        load = rep.cpu.get("background_cores")
        if rep.resident is not None and not rep.cold and rep.resident < 0.99:
            status += f" (only {rep.resident:.0%} of the source was in page cache)"
        if rep.resident is not None and rep.cold and rep.resident > 0.01:
            status += f" ({rep.resident:.0%} of the source was still in page cache)"
        out.append(
            f"| {label} | {secs} | {ds.bytes / 1e6 / rep.seconds:,.0f} | {_mb(rep.wire_fwd)} "
            f"| {_cpu(rep)} | {_rss(rep)} | {ratio} "
            f"| {'' if load is None else f'{load:.1f}'} | {md(status)} |")
    return out


def summary(link: str, kinds: list[str], method_ids: list[str], sets: dict[str, Dataset],
            results: list[RunResult]) -> list[str]:
    """Per link: wall seconds of every method on every data set; the fastest in bold."""
    cells = {}
    for kind in kinds:
        for mid in method_ids:
            runs = [r for r in results if r.link == link and r.dataset == kind and r.method == mid]
            if runs:
                cells[kind, mid] = aggregate(runs)
    out = ["| method | " + " | ".join(kinds) + " |", "|---|" + "--:|" * len(kinds)]
    fastest = {}
    for kind in kinds:
        times = [rep.seconds for (k, _), (rep, _, nfail) in cells.items()
                 if k == kind and rep is not None and nfail == 0]
        fastest[kind] = min(times) if times else None
    for mid in method_ids:
        row = []
        for kind in kinds:
            rep, _, nfail = cells.get((kind, mid), (None, "", 0))
            if (kind, mid) not in cells:
                row.append("")
            elif nfail or rep is None:
                row.append("**FAIL**")
            elif rep.seconds == fastest[kind]:
                row.append(f"**{rep.seconds:.1f}**")
            else:
                row.append(f"{rep.seconds:.1f}")
        if any(row):
            out.append(f"| {md(METHODS[mid].label(False))} | " + " | ".join(row) + " |")
    return out


def streams(links: list[str], plan: dict, sets: dict[str, Dataset],
            results: list[RunResult]) -> list[str]:
    """The stream family in one table: MB/s of every method per data set and link (median
    run), haul's pipe mode ÷ its file mode and ÷ the best single-stream tool (throughput
    ratios: 1.00 = as fast, above 1 = faster)."""
    singles = [m for m in STREAM_METHODS if not METHODS[m].is_haul]
    cols = [m for m in STREAM_METHODS if any(r.method == m for r in results)]
    out = ["| link | data set | " + " | ".join(md(METHODS[m].label(False)) for m in cols)
           + " | pipe ÷ file | pipe ÷ best single-stream |",
           "|---|---|" + "--:|" * (len(cols) + 2)]
    for link in links:
        kinds, mids = plan[link]
        for kind in kinds:
            if kind not in STREAM_KINDS or kind not in sets:
                continue
            mbs, row = {}, []
            for mid in cols:
                runs = [r for r in results if r.link == link and r.dataset == kind
                        and r.method == mid]
                if not runs:
                    row.append("")
                    continue
                rep, _, nfail = aggregate(runs)
                if nfail or rep is None:
                    row.append("**FAIL**")
                    continue
                mbs[mid] = sets[kind].bytes / 1e6 / rep.seconds
                row.append(f"{mbs[mid]:,.0f}")
            if not mbs:
                continue
            fastest = max(mbs.values())
            row = [f"**{c}**" if mid in mbs and mbs[mid] == fastest else c
                   for mid, c in zip(cols, row)]
            pipe = mbs.get("haul-pipe")
            file_ratio = f"{pipe / mbs['haul-file']:.2f}" if pipe and "haul-file" in mbs else ""
            best = max((m for m in singles if m in mbs), key=mbs.get, default=None)
            single_ratio = (f"{pipe / mbs[best]:.2f} ({md(METHODS[best].label(False))})"
                            if pipe and best else "")
            out.append(f"| {link} | {kind} | " + " | ".join(row)
                       + f" | {file_ratio} | {single_ratio} |")
    return out if len(out) > 2 else []


def render(header: list[str], links: list[str], plan: dict, sets: dict[str, Dataset],
           ceilings: dict, results: list[RunResult], notes: list[str]) -> str:
    """The whole report. plan: link -> (data set kinds, method ids)."""
    out = list(header)
    out += ["", "Summary: wall time in seconds until the last byte is durable at the destination "
            "(median run; fastest per data set in bold).", ""]
    for link in links:
        kinds, mids = plan[link]
        kinds = [k for k in kinds if k in sets]
        n = max((r.run for r in results if r.link == link), default=0)
        runs = f"median of {n} runs" if n > 1 else "1 run"
        out += [f"**Link {link}** — {_ceiling(ceilings.get(link))}; {runs} per method", ""]
        out += summary(link, kinds, mids, sets, results) + [""]
    stream_rows = streams(links, plan, sets, results)
    if stream_rows:
        out += ["Streams (haul pipe mode): MB/s per method, median run, until the stream is "
                "durable in a file at the destination (fastest in bold); pipe ÷ file and pipe "
                "÷ best single-stream are throughput ratios (above 1: pipe mode is faster).", ""]
        out += stream_rows + [""]
    out += ["Details per data set and link. CPU s: CPU seconds used on the sending + receiving "
            "host (all processes of the method, sshd included). Others' load: CPU used by "
            "processes that are not part of the benchmark during the run, in cores (the "
            "machine is shared). time ÷ best other: below 1 is faster than the best non-haul "
            "method.", ""]
    for link in links:
        kinds, mids = plan[link]
        for kind in kinds:
            if kind not in sets:
                continue
            ds = sets[kind]
            rs = [r for r in results if r.link == link and r.dataset == kind]
            if not rs:
                continue
            resident = [r.resident for r in rs if r.resident is not None]
            if not resident:
                cache = "page cache residency unknown"
            elif all(r.cold for r in rs):
                cache = (f"source evicted from the page cache before every run (most left: "
                         f"{max(resident):.0%})")
            elif min(resident) >= 0.99:
                cache = "source in page cache before every run"
            else:
                cache = (f"source in page cache before each run except where 'verified' "
                         f"says otherwise (least: {min(resident):.0%})")
            out += [f"#### {kind}: {ds.spec.title} — link {link}", "",
                    f"{fmt_size(ds.bytes)} in {ds.files:,} file{'s' if ds.files != 1 else ''}, "
                    f"{fmt_size(ds.disk)} on disk"
                    f"{'; ' + ds.note if ds.note else ''}; {cache}.", ""]
            out += table(ds, link, mids, rs) + [""]
    if notes:
        out += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(out)


def _ceiling(c: dict | None) -> str:
    if not c:
        return "iperf3 not run"
    parts = [f"{n} stream{'s' if n > 1 else ''}: {bps / 1e6:,.0f} MB/s"
             for n, bps in sorted(c.items()) if bps]
    return "raw TCP ceiling (iperf3) " + (", ".join(parts) if parts else "failed")
