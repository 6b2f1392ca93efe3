#!/bin/sh
# A tree of many small files copied locally three ways: bench/million_copy.sh SRC WORKDIR ROUNDS HAUL
#
#   cp      `cp -a SRC DST` + `sync`
#   fpart   `fpart -L -f 20000` lists SRC in crawl order into partitions of 20,000 files,
#           then GNU `parallel -j JOBS` runs `cp -a --parents` on each partition (JOBS: twice
#           the cores, as haul's streams), + `sync`: the "fpart + parallel + cp" recipe
#   haul    `HAUL copy -q SRC DST` + `sync` (haul's exit already means durable; the sync is
#           there so every run is timed to the same end)
#
# Alternates the three ROUNDS times, dropping the page cache before every run and removing
# the copy after it (the removal is not timed). Prints one line per run: what ran, wall
# seconds, and the 1-minute load average just before it. Needs root (drop_caches), fpart
# and parallel (Debian packages of those names); WORKDIR must be on the file system to
# measure. Build the usual tree with `python3 bench/run.py --datasets million`.
set -eu
src=$(realpath "$1") work=$2 rounds=$3 haul=$4
dst=$work/million-copy-dst
parts=$work/million-copy-parts
jobs=$(($(nproc) * 2))
fpart_copy() {
    rm -rf "$parts" && mkdir -p "$parts" "$dst"
    (cd "$src" && fpart -L -f 20000 -0 -o "$parts/part" . >/dev/null)
    ls "$parts"/part.* | parallel -j "$jobs" \
        "cd '$src' && xargs -0 -a {} cp -a --parents -t '$dst'"
}
run() {
    what=$1
    shift
    rm -rf "$dst" "$parts"; sync; echo 3 > /proc/sys/vm/drop_caches
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    "$@"
    sync
    t1=$(date +%s.%N)
    echo "$what $(echo "$t1 - $t0" | bc) s (load $load)"
    rm -rf "$dst" "$parts"
}
i=0
while [ "$i" -lt "$rounds" ]; do
    run cp cp -a "$src" "$dst"
    run fpart fpart_copy
    run haul "$haul" copy -q "$src" "$dst"
    i=$((i + 1))
done
