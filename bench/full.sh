#!/usr/bin/env bash
# The full benchmark behind README's "Performance" section: every data set at its full size,
# on the four links, split into one run.py invocation per part so that each part writes its
# own report (and a cut-off run keeps the parts already done). About 110 minutes on the
# 2-core development machine. Needs root; see bench/README.md for the packages.
#
#   sudo bash bench/full.sh [DATA_DIR]       # reports: DATA_DIR/full-*.md (default /work/bench-data)
#
# What is reduced against `run.py` with no options (every method x link x set x 3 runs,
# many hours), and why:
# - 1gbit: every method on the PostgreSQL set (the issue's headline comparison); on the
#   other sets the strongest peer of each kind only (rsync -az, tar | ssh, tar | nc,
#   tar | zstd | nc).
# - unshaped: every method but scp, tar | pigz and haul zstd:3 three times; those three once
#   (each is several times slower than its best peer, or a haul level nobody needs by default).
# - 100mbit: only the compressible pg set and the sparse set (incompressible data just runs
#   at the link rate), one run each: the link, not the machine, sets the times.
# - 10gbit: the big, pg and small sets, one run each, haul against the tar | nc pipes.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/work/bench-data}
failed=0
run() {
  local name=$1
  shift
  python3 bench/run.py --data-dir "$out" --out "$out/full-$name.md" "$@" >"$out/full-$name.log" 2>&1 ||
    { echo "full.sh: part $name failed (see $out/full-$name.log)" >&2; failed=1; }
}
mkdir -p "$out"
run pg1g --links 1gbit --datasets pg --runs 3
run 1g --links 1gbit --datasets big,small,sparse --runs 3 \
  --methods haul,haul-none,rsync-z,tar-ssh,tar-nc,tar-zstd-nc,iperf3
run unshaped --links unshaped --runs 3 \
  --methods haul,haul-noenc,haul-none,haul-lz4,haul-ssh,rsync,rsync-z,tar-ssh,tar-nc,tar-zstd-nc,iperf3
run 100m --links 100mbit --datasets pg,sparse --runs 1 --methods haul,rsync-z,tar-nc,tar-zstd-nc,iperf3
run 10g --links 10gbit --datasets big,pg,small --runs 1 --methods haul,haul-noenc,tar-nc,tar-zstd-nc,iperf3
run rest --links unshaped --runs 1 --methods haul,haul-zstd3,scp,tar-pigz-nc
echo "full.sh: reports in $out/full-*.md"
exit "$failed"
