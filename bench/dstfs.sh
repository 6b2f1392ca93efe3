# Sourced by bench/local_copy.sh and bench/million_copy.sh: where a local copy lands.
#
# DST_FS=fresh-ext4 (the default): every run copies into a file system made for it: a sparse
# image WORK/NAME.img of twice SRC's size (at least 1 GiB; more inodes than mkfs's default
# when SRC has many files), mkfs.ext4 with its default journal and the inode tables written
# at once, on a loop device with direct I/O, mounted on WORK/NAME-mnt; unmounted and deleted
# after the run (untimed). So no run pays for the inodes the previous one freed (ext4 without
# a journal skips and rereads recently freed inodes: bench/benchlib/dstfs.py says more), and
# the destination has a journal, as a user's has. DST_FS=dir: WORK/NAME-dst on WORK's file
# system (which must then be the one to measure, not a tmpfs), emptied before and after.
#
# dstfs_init SRC WORK NAME sets $dst (where the copy goes) and checks free space;
# dstfs_fresh before a run, dstfs_release after it (also on exit).

dstfs_init() {
    dstfs_kind=${DST_FS:-fresh-ext4}
    case $dstfs_kind in
    fresh-ext4 | dir) ;;
    *) echo "$0: DST_FS must be fresh-ext4 or dir, not $dstfs_kind" >&2; exit 2 ;;
    esac
    mkdir -p "$2"
    dstfs_img=$2/$3.img dstfs_mnt=$2/$3-mnt
    dst=$2/$3-dst
    [ "$dstfs_kind" = fresh-ext4 ] || return 0
    dst=$dstfs_mnt/copy
    dstfs_bytes=$(du -s --apparent-size --block-size=1 "$1" | cut -f1)
    dstfs_files=$(find "$1" | wc -l)
    dstfs_size=$((dstfs_bytes * 2 / 1048576 + 1))
    [ "$dstfs_size" -ge 1024 ] || dstfs_size=1024
    dstfs_inodes=$((dstfs_files * 2 + 10000))
    dstfs_nflag=""
    # mkfs's default: one inode per 16 KiB
    [ "$dstfs_inodes" -le $((dstfs_size * 64)) ] || dstfs_nflag="-N $dstfs_inodes"
    free=$(df --output=avail -B1 "$2" | tail -1)
    # the copy's blocks, its inode tables (256 B per inode), 2 GiB to spare
    need=$((dstfs_bytes + dstfs_bytes / 10 + dstfs_inodes * 256 + 2147483648))
    if [ "$free" -lt "$need" ]; then
        echo "$0: not enough space in $2 for a copy of $1 and 2 GiB" >&2
        exit 1
    fi
    trap dstfs_release EXIT
    trap 'exit 130' INT TERM
}

dstfs_fresh() {
    [ "$dstfs_kind" = fresh-ext4 ] || { rm -rf "$dst"; return 0; }
    mkdir -p "$dstfs_mnt"
    truncate -s "${dstfs_size}M" "$dstfs_img"
    # shellcheck disable=SC2086 # dstfs_nflag is empty or two words
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 $dstfs_nflag "$dstfs_img"
    loop=$(losetup --find --show --direct-io=on "$dstfs_img")
    mount "$loop" "$dstfs_mnt"
    losetup -d "$loop" # on a mounted device: goes at the unmount
}

dstfs_release() {
    [ "$dstfs_kind" = fresh-ext4 ] || { rm -rf "$dst"; return 0; }
    if mountpoint -q "$dstfs_mnt"; then umount "$dstfs_mnt" || umount -l "$dstfs_mnt"; fi
    rm -f "$dstfs_img"
}
