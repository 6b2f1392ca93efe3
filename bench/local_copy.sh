#!/bin/sh
# Local copy against cp: bench/local_copy.sh SRC WORKDIR ROUNDS HAUL...
#
# Alternates `cp -r SRC DST` + `sync` and `HAUL copy -q SRC DST` + `sync` for each HAUL
# binary given (haul's exit already means durable; the sync is there so every run is
# timed to the same end), ROUNDS times, dropping the page cache before every run and
# removing the copy after it. Prints one line per run: what ran, wall seconds, and the
# 1-minute load average just before it. Needs root (drop_caches, mount).
#
# DST_FS=fresh-ext4 (the default): every run copies into a file system made for it: a sparse
# image WORKDIR/local-copy.img of twice SRC's size (at least 1 GiB), mkfs.ext4 with its
# default journal, on a loop device with direct I/O, mounted on WORKDIR/local-copy-mnt;
# unmounted and deleted after the run (untimed). So no run pays for the inodes the previous
# one freed (ext4 without a journal skips and rereads recently freed inodes), and the
# destination has a journal, as a user's has. DST_FS=dir: WORKDIR/local-copy-dst on
# WORKDIR's file system (which must then be the one to measure, not a tmpfs).
set -eu
src=$1 work=$2 rounds=$3
shift 3
fs=${DST_FS:-fresh-ext4}
case $fs in
fresh-ext4 | dir) ;;
*) echo "local_copy.sh: DST_FS must be fresh-ext4 or dir, not $fs" >&2; exit 2 ;;
esac
mkdir -p "$work"
img=$work/local-copy.img mnt=$work/local-copy-mnt
dst=$work/local-copy-dst
if [ "$fs" = fresh-ext4 ]; then
    dst=$mnt/copy
    bytes=$(du -s --apparent-size --block-size=1 "$src" | cut -f1)
    files=$(find "$src" | wc -l)
    size=$((bytes * 2 / 1048576 + 1))
    [ "$size" -ge 1024 ] || size=1024
    inodes=$((files * 2 + 10000))
    nflag=""
    [ "$inodes" -le $((size * 64)) ] || nflag="-N $inodes" # mkfs default: 1 inode per 16 KiB
    free=$(df --output=avail -B1 "$work" | tail -1)
    if [ "$free" -lt $((bytes + bytes / 10 + 2147483648)) ]; then
        echo "local_copy.sh: not enough space in $work for a copy of $src and 2 GiB" >&2
        exit 1
    fi
fi
fresh() {
    [ "$fs" = fresh-ext4 ] || { rm -rf "$dst"; return; }
    mkdir -p "$mnt"
    truncate -s "${size}M" "$img"
    # shellcheck disable=SC2086 # nflag is empty or two words
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 $nflag "$img"
    loop=$(losetup --find --show --direct-io=on "$img")
    mount "$loop" "$mnt"
    losetup -d "$loop" # on a mounted device: goes at the unmount
}
release() {
    [ "$fs" = fresh-ext4 ] || { rm -rf "$dst"; return; }
    if mountpoint -q "$mnt"; then umount "$mnt" || umount -l "$mnt"; fi
    rm -f "$img"
}
trap release EXIT
trap 'exit 130' INT TERM
run() {
    fresh
    rm -rf "$dst"; sync; echo 3 > /proc/sys/vm/drop_caches
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    "$@"
    sync
    t1=$(date +%s.%N)
    echo "$1 $(echo "$t1 - $t0" | bc) s (load $load, dst $fs)"
    release
}
i=0
while [ "$i" -lt "$rounds" ]; do
    run cp -r "$src" "$dst"
    for haul in "$@"; do
        run "$haul" copy -q "$src" "$dst"
    done
    i=$((i + 1))
done
