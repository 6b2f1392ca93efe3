#!/usr/bin/env bash
# The adaptive codec following a link that gets throttled mid-transfer (issue 12): the pg
# data set over the netlab veth, unshaped at the start; after DELAY seconds the link is
# capped at RATE. haul's default (auto) against fixed codecs, order rotated per round.
# Prints seconds, wire bytes and, for auto, the units sent at each level; each copy is
# checked against the data set's manifest (bench/run.py writes it) after the timing.
# Usage: bench/throttle.sh [ROUNDS] [DELAY] [RATE]   (defaults 1, 4, 100mbit)
# Needs root, the pg data set of bench/run.py in $DATA (default /work/bench-data/src/pg-s150)
# and a release build (target/release/haul, or $HAUL).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1} delay=${2:-4} rate=${3:-100mbit}
data=${DATA:-/work/bench-data/src/pg-s150}
haul=$(realpath "${HAUL:-target/release/haul}")
export NETLAB_A=${NETLAB_A:-tsrc} NETLAB_B=${NETLAB_B:-tdst}
netlab=${NETLAB:-../shared/testbed/netlab}
work=$(mktemp -d /tmp/haul-throttle.XXXXXX)
dst=${DST:-$(dirname "$data")/../dst-throttle}
trap 'bash "$netlab" down >/dev/null 2>&1; rm -rf "$work" "$dst"' EXIT
[ -d "$data" ] || { echo "no data set at $data (run bench/run.py --datasets pg once)" >&2; exit 2; }
methods=(auto lz4 zstd:1 zstd:3)
for round in $(seq "$rounds"); do
  n=${#methods[@]}
  for i in $(seq 0 $((n - 1))); do
    m=${methods[$(( (i + round - 1) % n ))]}
    bash "$netlab" up >/dev/null
    rm -rf "$dst"; mkdir -p "$dst"; rm -f "$work/ticket"
    sync; echo 3 >/proc/sys/vm/drop_caches
    ip netns exec "$NETLAB_B" "$haul" recv "$dst" --listen 198.18.0.2 --ticket-file "$work/ticket" -q >/dev/null &
    rp=$!
    for _ in $(seq 100); do [ -s "$work/ticket" ] && break; sleep 0.1; done
    start=$(date +%s.%N)
    ip netns exec "$NETLAB_A" "$haul" send "$data" --ticket-file "$work/ticket" --json -q --compress "$m" >"$work/json" &
    sp=$!
    sleep "$delay"
    bash "$netlab" up --rate "$rate" >/dev/null
    wait "$sp"; wait "$rp"
    end=$(date +%s.%N)
    python3 - "$m" "$start" "$end" "$work/json" "$dst/$(basename "$data")" "$data.manifest" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, "bench")
from benchlib.datasets import listing
m, start, end, path, copy, manifest = sys.argv[1:7]
j = json.load(open(path))
mix = j.get("codec_units")
mix = " ".join(f"{k}={v}" for k, v in mix.items()) if mix else ""
check = "ok"
if Path(manifest).exists():
    if listing(Path(copy))[0] != Path(manifest).read_text().splitlines():
        check = "FAILED: the copy differs from the manifest"
else:
    check = "not checked (no manifest)"
took = float(end) - float(start)
print(f"{m:8} {took:7.2f} s  {j['bytes_wire'] / 1e6:8.1f} MB on the wire  {mix}  {check}")
PY
  done
done
