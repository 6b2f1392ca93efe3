#!/bin/sh
# Local copy against cp: bench/local_copy.sh SRC WORKDIR ROUNDS HAUL...
#
# Alternates `cp -r SRC DST` + `sync` and `HAUL copy -q SRC DST` + `sync` for each HAUL
# binary given (haul's exit already means durable; the sync is there so every run is
# timed to the same end), ROUNDS times, dropping the page cache before every run and
# removing the copy after it. Prints one line per run: what ran, wall seconds, and the
# 1-minute load average just before it. Needs root (drop_caches); WORKDIR must be on the
# file system to measure (not a tmpfs).
set -eu
src=$1 work=$2 rounds=$3
shift 3
dst=$work/local-copy-dst
run() {
    rm -rf "$dst"; sync; echo 3 > /proc/sys/vm/drop_caches
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    "$@"
    sync
    t1=$(date +%s.%N)
    echo "$1 $(echo "$t1 - $t0" | bc) s (load $load)"
    rm -rf "$dst"
}
i=0
while [ "$i" -lt "$rounds" ]; do
    run cp -r "$src" "$dst"
    for haul in "$@"; do
        run "$haul" copy -q "$src" "$dst"
    done
    i=$((i + 1))
done
