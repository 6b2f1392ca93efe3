#!/usr/bin/env bash
# The full benchmark behind bench/RESULTS.md (and the performance summary in README.md): every
# data set at its full size, on the four links, split into one run.py invocation per part so
# that each part writes its own report (and a cut-off run keeps the parts already done). About
# 150 minutes on the 2-core development machine. Needs root; see bench/README.md for the
# packages (socat and mbuffer for the stream part).
#
#   sudo bash bench/full.sh [DATA_DIR]       # default DATA_DIR: /work/bench-data
#
# Writes each part's report to DATA_DIR/full-PART.md (its output to DATA_DIR/full-PART.log),
# then DATA_DIR/RESULTS.md: one header (date, commit, machine) and the seven reports in order.
# Copy that into bench/RESULTS.md to refresh it. Exits 1 when any part failed (RESULTS.md
# still holds the parts that finished and names the ones that did not).
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
# - streams: the stream family (haul pipe mode, haul file mode, socat, nc, mbuffer,
#   zstd | nc on a tar of the pg set and 4 GiB of random bytes), unshaped and 1gbit.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/work/bench-data}
failed=0
parts=()
started=$out/.full-started
run() {
  local name=$1
  shift
  parts+=("$name")
  python3 bench/run.py --data-dir "$out" --out "$out/full-$name.md" "$@" >"$out/full-$name.log" 2>&1 ||
    { echo "full.sh: part $name failed (see $out/full-$name.log)" >&2; failed=1; }
}

# DATA_DIR/RESULTS.md: a header saying where and on what the run was made, then every part's
# report as run.py wrote it (each has its own header with the exact command).
assemble() {
  local commit dirty cpu mem
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=$(git status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null || true)
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  mem=$(awk '/^MemTotal:/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
  {
    echo "# haul benchmark results"
    echo
    echo "- **When:** full run finished $(date -u '+%Y-%m-%d %H:%M') UTC (\`bash bench/full.sh $out\`)."
    echo "- **Machine:** $(nproc) CPUs (${cpu:-$(uname -m)}), $mem RAM, $(uname -sr)."
    echo "- **Commit:** \`$commit\`${dirty:+ with uncommitted changes in src/ or Cargo files}."
    for name in "${parts[@]}"; do
      echo
      echo "## Part $name"
      echo
      if [[ -s $out/full-$name.md && $out/full-$name.md -nt $started ]]; then
        cat "$out/full-$name.md"
      else
        echo "No report from this run: the part failed (see \`$out/full-$name.log\`)."
      fi
    done
  } >"$out/RESULTS.md"
}

mkdir -p "$out"
touch "$started"
run pg1g --links 1gbit --datasets pg --runs 3
run 1g --links 1gbit --datasets big,small,sparse --runs 3 \
  --methods haul,haul-none,rsync-z,tar-ssh,tar-nc,tar-zstd-nc,iperf3
run unshaped --links unshaped --runs 3 \
  --methods haul,haul-noenc,haul-none,haul-lz4,haul-ssh,rsync,rsync-z,tar-ssh,tar-nc,tar-zstd-nc,iperf3
run 100m --links 100mbit --datasets pg,sparse --runs 1 --methods haul,rsync-z,tar-nc,tar-zstd-nc,iperf3
run 10g --links 10gbit --datasets big,pg,small --runs 1 --methods haul,haul-noenc,tar-nc,tar-zstd-nc,iperf3
run rest --links unshaped --runs 1 --methods haul,haul-zstd3,scp,tar-pigz-nc
run streams --links unshaped,1gbit --datasets stream --runs 3
assemble
echo "full.sh: reports in $out/full-*.md, all of them in $out/RESULTS.md (copy to bench/RESULTS.md)"
exit "$failed"
