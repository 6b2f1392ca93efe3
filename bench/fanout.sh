#!/usr/bin/env bash
# Chain fan-out against the alternatives, on rate-capped links (tests/support/netlan: one
# source host and 3 receiver hosts on one virtual switch, each on its own link):
#   single       one haul send to one receiver (the reference)
#   fanout       one haul send --to T1 --to T2 --to T3 (T1 feeds T2, T2 feeds T3)
#   sequential   three haul sends, one after the other
#   parallel     three haul sends at once, sharing the source's link
#   stream-single, stream-fanout   the same as single and fanout for one stream
#                (`haul send -` < the file, into `haul recv --stream FILE`)
# Time: from the send's start until every receiver has exited (all durable). The source
# stays in the page cache (read once before the runs; caches are not dropped).
# Usage (root): bench/fanout.sh [SIZE_MIB=1024] [RATE=1gbit] [RUNS=3] [MODES]; MODES is a
# space-separated list (default: single fanout sequential parallel); needs a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-1024} rate=${2:-1gbit} runs=${3:-3} modes=${4:-single fanout sequential parallel}
haul=$PWD/target/release/haul
[[ -x $haul ]] || { echo "cargo build --release first" >&2; exit 1; }
name=hbfan sub=198.19.43
lan() { bash tests/support/netlan "$@" >/dev/null; }
work=$(mktemp -d /var/tmp/haul-fanout.XXXXXX)
trap 'lan down $name 4; rm -rf "$work"' EXIT
lan up $name $sub 4 "$rate"
mkdir -p "$work/src"
head -c $((size << 20)) /dev/urandom > "$work/src/data"
sync

recv() { # I: receiver on host I+1 into dst I, ticket in t I; its pid joins pids
  rm -rf "$work/dst$1" "$work/t$1"
  ip netns exec $name-$(($1 + 1)) "$haul" recv -q "$work/dst$1" --listen "$sub.$(($1 + 1)):0" \
    --ticket-file "$work/t$1" >/dev/null &
  pids+=($!)
}
recv_stream() { # I: as recv, one stream into dst I/data
  rm -rf "$work/dst$1" "$work/t$1"; mkdir -p "$work/dst$1"
  ip netns exec $name-$(($1 + 1)) "$haul" recv -q --stream "$work/dst$1/data" \
    --listen "$sub.$(($1 + 1)):0" --ticket-file "$work/t$1" >/dev/null &
  pids+=($!)
}
wait_tickets() { for t in "$@"; do until [[ -s $work/t$t ]]; do sleep 0.05; done; done; }
send() { ip netns exec $name-1 "$haul" send -q "$work/src/data" "$@"; }
send_stream() { ip netns exec $name-1 "$haul" send -q - "$@" < "$work/src/data"; }
check() { for i in "$@"; do cmp -s "$work/src/data" "$work/dst$i/data" || { echo "dst$i differs" >&2; exit 1; }; done; }

run() { # MODE: prints seconds
  local t0 t1
  pids=()

  case $1 in
    single)
      recv 1; wait_tickets 1
      t0=$(date +%s.%N); send --ticket-file "$work/t1"; wait "${pids[@]}"; t1=$(date +%s.%N); check 1 ;;
    fanout)
      for i in 1 2 3; do recv $i; done; wait_tickets 1 2 3
      t0=$(date +%s.%N)
      send --ticket-file "$work/t1" --ticket-file "$work/t2" --ticket-file "$work/t3"
      wait "${pids[@]}"; t1=$(date +%s.%N); check 1 2 3 ;;
    sequential)
      for i in 1 2 3; do recv $i; done; wait_tickets 1 2 3
      t0=$(date +%s.%N)
      for i in 1 2 3; do send --ticket-file "$work/t$i"; done
      wait "${pids[@]}"; t1=$(date +%s.%N); check 1 2 3 ;;
    parallel)
      for i in 1 2 3; do recv $i; done; wait_tickets 1 2 3
      t0=$(date +%s.%N)
      for i in 1 2 3; do send --ticket-file "$work/t$i" & pids+=($!); done
      wait "${pids[@]}"; t1=$(date +%s.%N); check 1 2 3 ;;
    stream-single)
      recv_stream 1; wait_tickets 1
      t0=$(date +%s.%N); send_stream --ticket-file "$work/t1"; wait "${pids[@]}"; t1=$(date +%s.%N); check 1 ;;
    stream-fanout)
      for i in 1 2 3; do recv_stream $i; done; wait_tickets 1 2 3
      t0=$(date +%s.%N)
      send_stream --ticket-file "$work/t1" --ticket-file "$work/t2" --ticket-file "$work/t3"
      wait "${pids[@]}"; t1=$(date +%s.%N); check 1 2 3 ;;
  esac
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }'
}

echo "size ${size} MiB, links $rate, $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$runs"); do
  for m in $modes; do
    run $m > "$work/secs"
    echo "run $r $m $(cat "$work/secs") s (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
