#!/usr/bin/env bash
# Local and loopback measurements (issue 2): haul copy and haul send/recv over loopback vs cp -r and tar|nc,
# for one 4 GiB random file and 20,000 x 100 KB files; median of 3; peak RSS.
# Every method ends when the data is durable (cp and tar|nc are followed by sync).
# Usage: DATA=/dir/with/big4g-and-small HAUL=target/release/haul RUNS=3 [SETS="big4g small"] bench/core_measure.sh
# (big4g: one 4 GiB random file; small: a directory of 20,000 x 100 KB files; outputs go to $DATA/out.)
set -euo pipefail
H=${HAUL:-/work/main/target/release/haul}
D=${DATA:-/work/data}
OUT=$D/out
runs=${RUNS:-3}
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
t() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1; local e=$(date +%s.%N); echo "$e - $s" | bc; }
rss() { /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1; }
clean() { rm -rf "$OUT"; sync; }
for set in ${SETS:-big4g small}; do
  src=$D/$set; cat "$src" >/dev/null 2>&1 || find "$src" -type f -exec cat {} + >/dev/null
  for m in haul-copy cp haul-net tarnc; do
    times=()
    for i in $(seq $runs); do
      clean
      case $m in
        haul-copy) x=$(t $H copy -q "$src" "$OUT/") ;;
        cp) x=$(t sh -c "mkdir -p $OUT && cp -r $src $OUT/ && sync") ;;
        haul-net)
          s=$(date +%s.%N)
          $H recv -q --listen 127.0.0.1 "$OUT" > $D/ticket &
          while [ ! -s $D/ticket ]; do sleep 0.01; done
          $H send -q "$src" --to "$(head -1 $D/ticket)"; wait
          e=$(date +%s.%N); x=$(echo "$e - $s" | bc); rm -f $D/ticket ;;
        tarnc)
          s=$(date +%s.%N); mkdir -p $OUT
          (cd $OUT && nc -l -N 127.0.0.1 9999 | tar x && sync) &
          sleep 0.2; (cd $(dirname $src) && tar c $(basename $src) | nc -N 127.0.0.1 9999); wait
          e=$(date +%s.%N); x=$(echo "$e - $s" | bc) ;;
      esac
      times+=("$x")
    done
    m_s=$(printf '%s\n' "${times[@]}" | med)
    bytes=$(du -sb "$src" | cut -f1)
    echo "$set $m median ${m_s}s runs ${times[*]} rate $(echo "$bytes / $m_s / 1000000" | bc) MB/s"
  done
  clean
  echo "$set haul copy peak RSS KiB: $(rss $H copy -q "$src" "$OUT/")"; clean
done
