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
# Runs the three ROUNDS times, the order rotated each round (cp fpart haul, fpart haul cp,
# haul cp fpart), dropping the page cache before every run and removing the copy after it
# (not timed). Prints one line per run: what ran, wall seconds, and the 1-minute load
# average just before it. Needs root (drop_caches, mount), fpart and parallel (Debian
# packages of those names). The destination (bench/dstfs.sh): DST_FS=fresh-ext4 (the
# default) copies into a journaled ext4 made for each run on WORKDIR/million-copy.img (its
# inode tables alone take ~0.5 GiB per million files); DST_FS=dir into
# WORKDIR/million-copy-dst, on WORKDIR's file system. Build the usual tree with
# `python3 bench/run.py --datasets million`.
set -eu
src=$(realpath "$1") work=$2 rounds=$3 haul=$4
. "$(dirname "$0")/dstfs.sh"
dstfs_init "$src" "$work" million-copy
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
    dstfs_fresh
    rm -rf "$dst" "$parts"; sync; echo 3 > /proc/sys/vm/drop_caches
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    "$@"
    sync
    t1=$(date +%s.%N)
    echo "$what $(echo "$t1 - $t0" | bc) s (load $load, dst $dstfs_kind)"
    rm -rf "$parts"
    dstfs_release
}
one() {
    case $1 in
    cp) run cp cp -a "$src" "$dst" ;;
    fpart) run fpart fpart_copy ;;
    haul) run haul "$haul" copy -q "$src" "$dst" ;;
    esac
}
i=0
while [ "$i" -lt "$rounds" ]; do
    case $((i % 3)) in
    0) order="cp fpart haul" ;;
    1) order="fpart haul cp" ;;
    2) order="haul cp fpart" ;;
    esac
    for m in $order; do one "$m"; done
    i=$((i + 1))
done
