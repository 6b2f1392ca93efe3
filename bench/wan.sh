#!/usr/bin/env bash
# One cell of the WAN matrix on wanlab (../shared/testbed/wanlab, WANLAB.md): a 1 Gbit/s
# bottleneck with a one-BDP buffer, RTT and loss as given, both namespaces' default
# congestion control cubic and stock socket buffers (as on a typical server). Each round
# runs every peer once, order rotated, on the same lab:
#   haul        haul's defaults (file mode, a 1 GiB random file)
#   haul-cubic  the same with --cc cubic (what haul did before it chose its own)
#   haul-16     the same with --streams 16 (not in the default list: name it in PEERS)
#   tar-nc      tar -c FILE | nc  →  nc -l | tar -x   (one plain TCP stream)
#   iperf3      iperf3 -P 16 -C bbr (the path's ceiling with these socket settings)
# Rate = IP bytes the emulator delivered a→b (its stats) over the run, until the copy
# completed or WINDOW seconds passed, whichever came first; "done" says which.
#
#   bash bench/wan.sh HAUL RTT LOSS [WINDOW] [ROUNDS] [PEERS]
#   e.g. bash bench/wan.sh target/release/haul 50ms 0.1% 40 2
# Needs root, iperf3, nc (netcat-openbsd), gcc (wanlab builds its helper). Not a test.
set -euo pipefail
HAUL=$(realpath "$1"); RTT=$2; LOSS=$3; WINDOW=${4:-40}; ROUNDS=${5:-2}
PEERS=(${6:-haul haul-cubic tar-nc iperf3})
LAB=hbench
WANLAB=$(dirname "$0")/../../shared/testbed/wanlab
W=/dev/shm/haul-wan; B=198.19.0.2
mkdir -p "$W"
[ -s "$W/big" ] || head -c $((1 << 30)) /dev/urandom >"$W/big"
bash "$WANLAB" down $LAB >/dev/null 2>&1 || true
bash "$WANLAB" up $LAB --rtt "$RTT" --loss "$LOSS" --rate 1gbit --cc cubic --allow-host-cc >/dev/null
trap 'bash "$WANLAB" down $LAB >/dev/null 2>&1 || true' EXIT
until [ -s /run/wanlab/$LAB/stats ]; do sleep 0.2; done
inA() { ip netns exec $LAB-a "$@"; }
inB() { ip netns exec $LAB-b "$@"; }
delivered() { awk '$1=="ab"{for(i=2;i<=NF;i++) if($i ~ /^out_bytes=/){sub("out_bytes=","",$i); print $i}}' /run/wanlab/$LAB/stats; }

# run PEER: prints "seconds done|cut"
run() {
  local peer=$1 t0 t1 rc=0
  rm -rf "$W"/dst* "$W/ticket"; mkdir -p "$W/dst"
  case $peer in
    haul|haul-cubic|haul-16)
      inB "$HAUL" recv -q --listen $B:0 --ticket-file "$W/ticket" "$W/dst" >>"$W/log" 2>&1 &
      local r=$!
      while [ ! -s "$W/ticket" ]; do sleep 0.05; done
      local cc=(); [ $peer = haul-cubic ] && cc=(--cc cubic)
      [ $peer = haul-16 ] && cc=(--streams 16)
      t0=$(date +%s.%N)
      inA timeout "$WINDOW" "$HAUL" send -q "${cc[@]}" "$W/big" --ticket-file "$W/ticket" >>"$W/log" 2>&1 || rc=$?
      t1=$(date +%s.%N)
      # A receiver whose sender was cut waits for it to come back: end it.
      [ $rc -eq 0 ] || kill $r 2>/dev/null || true
      wait $r 2>/dev/null || true ;;
    tar-nc)
      inB sh -c "nc -l $B 5001 | tar -x -C '$W/dst'" >>"$W/log" 2>&1 &
      local r=$!
      sleep 0.3
      t0=$(date +%s.%N)
      inA timeout "$WINDOW" sh -c "tar -c -C '$W' big | nc -N $B 5001" >>"$W/log" 2>&1 || rc=$?
      t1=$(date +%s.%N)
      [ $rc -eq 0 ] || inB pkill -f "nc -l $B 5001" || true
      wait $r 2>/dev/null || true ;;
    iperf3)
      inB iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
      local r=$!
      sleep 0.3
      t0=$(date +%s.%N)
      inA iperf3 -c $B -p 5201 -P 16 -C bbr -t "$WINDOW" >/dev/null 2>&1 || rc=$?
      t1=$(date +%s.%N)
      wait $r 2>/dev/null || true ;;
  esac
  local state=done; [ $rc -eq 124 ] && state=cut; [ $peer = iperf3 ] && state=window
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && state="exit$rc"
  echo "$(echo "$t1 - $t0" | bc) $state"
}

echo "# wan cell: rtt $RTT loss $LOSS rate 1gbit, cc cubic, stock buffers; window ${WINDOW}s; $(date -u +%F)"
for round in $(seq 1 "$ROUNDS"); do
  n=${#PEERS[@]}
  for i in $(seq 0 $((n - 1))); do
    peer=${PEERS[$(((i + round - 1) % n))]}
    before=$(delivered)
    read -r secs state < <(run "$peer")
    sleep 1.2  # the stats file is rewritten every second
    bytes=$(( $(delivered) - before ))
    echo "$round $peer $(echo "scale=1; $bytes * 8 / $secs / 1000000" | bc) Mbit/s ${secs}s $state"
  done
done
