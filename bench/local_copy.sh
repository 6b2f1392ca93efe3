#!/bin/sh
# Local copy against cp: bench/local_copy.sh SRC WORKDIR ROUNDS HAUL...
#
# Alternates `cp -r SRC DST` + `sync` and `HAUL copy -q SRC DST` + `sync` for each HAUL
# binary given (haul's exit already means durable; the sync is there so every run is
# timed to the same end), ROUNDS times, dropping the page cache before every run and
# removing the copy after it. Prints one line per run: what ran, wall seconds, and the
# 1-minute load average just before it. Needs root (drop_caches, mount).
#
# The destination (bench/dstfs.sh): DST_FS=fresh-ext4 (the default) copies into a journaled
# ext4 made for each run on WORKDIR/local-copy.img; DST_FS=dir into WORKDIR/local-copy-dst.
set -eu
src=$1 work=$2 rounds=$3
shift 3
. "$(dirname "$0")/dstfs.sh"
dstfs_init "$src" "$work" local-copy
run() {
    dstfs_fresh
    rm -rf "$dst"; sync; echo 3 > /proc/sys/vm/drop_caches
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    "$@"
    sync
    t1=$(date +%s.%N)
    echo "$1 $(echo "$t1 - $t0" | bc) s (load $load, dst $dstfs_kind)"
    dstfs_release
}
i=0
while [ "$i" -lt "$rounds" ]; do
    run cp -r "$src" "$dst"
    for haul in "$@"; do
        run "$haul" copy -q "$src" "$dst"
    done
    i=$((i + 1))
done
