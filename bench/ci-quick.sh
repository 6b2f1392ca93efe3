#!/usr/bin/env bash
# CI smoke run of the benchmark harness, so that it cannot rot: installs the tools it drives,
# builds haul, and runs `bench/run.py --quick` (tiny data sets, about two minutes plus the
# install). Exits non-zero when the harness breaks or any copy fails verification.
#
# Uses the debug build by default: after `cargo test` it is already built, and a release
# build would cost CI several minutes; the numbers are not the point here (the report says
# "debug build"). HAUL_PROFILE=release uses and builds the release binary instead.
# BENCH_DATA_DIR: where the quick data sets are cached (default: $TMPDIR/haul-bench-quick).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) != 0 ]]; then
  echo "ci-quick.sh: needs root (network namespaces, sshd)" >&2
  exit 2
fi

export DEBIAN_FRONTEND=noninteractive
if command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq iproute2 openssh-server openssh-client rsync pigz zstd \
    netcat-openbsd iperf3 postgresql time b3sum tar python3 socat mbuffer \
    e2fsprogs mount >/dev/null
fi

profile=${HAUL_PROFILE:-debug}
if [[ $profile == release ]]; then
  cargo build --release --quiet --bin haul
else
  cargo build --quiet --bin haul
fi
target_dir=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

# Copies land on a fresh ext4 per run (mkfs.ext4, a loop device); a machine without loop
# devices (some containers) gets a plain directory instead, and says so.
dst_fs=fresh-ext4
if ! losetup --find >/dev/null 2>&1; then
  echo "ci-quick.sh: no free loop device; copies go to a plain directory (--dst-fs dir)" >&2
  dst_fs=dir
fi

exec python3 bench/run.py --quick --haul "$target_dir/$profile/haul" --dst-fs "$dst_fs" \
  --data-dir "${BENCH_DATA_DIR:-${TMPDIR:-/tmp}/haul-bench-quick}" "$@"
