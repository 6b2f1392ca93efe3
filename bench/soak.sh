#!/usr/bin/env bash
# soak.sh: haul under faults between two real processes, for the liveness rule (docs/design.md
# *Liveness*): random `ss -K` cuts of any or all connections (1-5 a run, any moment, also
# during a reconnect), SIGSTOP/SIGCONT of any end (the sender, a receiver, a chain's middle
# hop) for longer than --timeout, and link outages (wanlab `--loss 100%` for 5-60 s). Modes:
# pipe (send - | recv -), file (send FILE to recv DIR), and both as a chain of two receivers
# (--to T1 --to T2). Not covered: push/pull over ssh (haul copy host:...).
#
# Every run must end, within BOUND seconds, with the output identical and exit 0 on every
# side, or with a clean failure (a non-zero exit and a `haul: error` line) on the sides that
# failed. A hang, a wrong byte, an exit 0 with other bytes, or a panic is a FAIL.
#
# usage: sudo bash bench/soak.sh [RUNS] [SIZE_MIB] [HAUL]     (defaults: 20, 200, target/release/haul)
# env: SOAK_MODES="pipe file chain-pipe chain-file", SOAK_RTT=10ms, SOAK_RATE=400mbit,
#      SOAK_TIMEOUT=10 (recv --timeout), SOAK_SEND_ARGS="--timeout 10" (files only), SOAK_BOUND=300,
#      SOAK_SEED=$RANDOM
# Prints one line a run and a summary per mode; exit 1 when any run FAILed.
set -uo pipefail
RUNS=${1:-20}
MIB=${2:-200}
HAUL=$(realpath "${3:-target/release/haul}")
MODES=(${SOAK_MODES:-pipe file chain-pipe chain-file})
RTT=${SOAK_RTT:-10ms}
RATE=${SOAK_RATE:-400mbit}
TO=${SOAK_TIMEOUT:-10}
BOUND=${SOAK_BOUND:-300}
SEND_ARGS=${SOAK_SEND_ARGS---timeout $TO}
RANDOM=${SOAK_SEED:-$$}
WANLAB=$(dirname "$0")/../../shared/testbed/wanlab
[ -x "$WANLAB" ] || WANLAB=/work/shared/testbed/wanlab
LAB=soak$$
A=$LAB-a B=$LAB-b IPB=198.19.0.2
W=$(mktemp -d /tmp/haul-soak.XXXXXX)
trap '"$WANLAB" down $LAB >/dev/null 2>&1; rm -rf "$W"' EXIT

[ -x "$HAUL" ] || { echo "soak: no haul binary at $HAUL (cargo build --release)" >&2; exit 2; }
"$WANLAB" up $LAB --rtt "$RTT" --rate "$RATE" --sockbuf 32m >/dev/null || exit 2
head -c $((MIB << 20)) /dev/urandom >"$W/src"
want=$(sha256sum <"$W/src" | cut -d' ' -f1)

# Starts `haul recv` in B into $1 (a directory, or - for a stream), ticket in $2; its pid
# joins pids (started here, not in a subshell, so that it can be waited for).
recv() {
  local out=$1 ticket=$2 log=$3
  if [ "$out" = - ]; then
    ip netns exec $B "$HAUL" recv - -q $RELAY --timeout "$TO" --listen $IPB:0 --ticket-file "$ticket" \
      >"$log.out" 2>"$log.err" &
  else
    ip netns exec $B "$HAUL" recv "$out" -q $RELAY --timeout "$TO" --listen $IPB:0 --ticket-file "$ticket" \
      >/dev/null 2>"$log.err" &
  fi
  pids+=($!)
}

alive() { # any of the pids $@ still running
  local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1
}

fault() { # one random fault: a cut or an outage, or a SIGSTOP of one of the pids $@ (either end)
  local r=$((RANDOM % 4))
  case $r in
    0) ip netns exec $B ss -HK -t state established >/dev/null; echo -n "cut-all " ;;
    1) local n; n=$(ip netns exec $B ss -Ht state established | wc -l)
       if [ "$n" -gt 0 ]; then
         local pick=$((RANDOM % n + 1)) line port
         line=$(ip netns exec $B ss -Htn state established | sed -n "${pick}p")
         port=$(awk '{print $3}' <<<"$line" | sed 's/.*://')
         ip netns exec $B ss -HK -t state established "( sport = :$port )" >/dev/null 2>&1
       fi; echo -n "cut-one " ;;
    2) local p=${@:$((RANDOM % $# + 1)):1} d=$((TO + 2 + RANDOM % 5))
       kill -STOP "$p" 2>/dev/null; sleep "$d"; kill -CONT "$p" 2>/dev/null; echo -n "stop${d}s " ;;
    3) local d=$((5 + RANDOM % 56))
       "$WANLAB" set $LAB --loss 100% >/dev/null; sleep "$d"; "$WANLAB" set $LAB --loss 0 >/dev/null
       echo -n "outage${d}s " ;;
  esac
}

declare -A ok fail clean split
for mode in "${MODES[@]}"; do ok[$mode]=0; fail[$mode]=0; clean[$mode]=0; split[$mode]=0; done
for run in $(seq 1 "$RUNS"); do
  mode=${MODES[$(((run - 1) % ${#MODES[@]}))]}
  d="$W/run$run"; mkdir -p "$d"
  # A chain's receivers pass it on only when told to (recv --relay).
  hops=1 RELAY=; [[ $mode == chain-* ]] && hops=2 RELAY=--relay
  pids=() tickets=()
  for h in $(seq 1 $hops); do
    if [[ $mode == *pipe ]]; then tgt=-; else tgt="$d/dst$h"; fi
    recv "$tgt" "$d/ticket$h" "$d/recv$h"; tickets+=(--ticket-file "$d/ticket$h")
  done
  for h in $(seq 1 $hops); do
    for _ in $(seq 100); do [ -s "$d/ticket$h" ] && break; sleep 0.1; done
  done
  if [[ $mode == *pipe ]]; then
    # A stream's sender has its own bound (30 s of a silent receiver) and refuses --timeout.
    ip netns exec $A "$HAUL" send - -q "${tickets[@]}" <"$W/src" 2>"$d/send.err" &
  else
    ip netns exec $A "$HAUL" send "$W/src" -q $SEND_ARGS "${tickets[@]}" 2>"$d/send.err" &
  fi
  spid=$!
  echo -n "run $run $mode: "
  start=$(date +%s)
  nfaults=$((1 + RANDOM % 5))
  for _ in $(seq "$nfaults"); do
    sleep "$((RANDOM % 2)).$((RANDOM % 10))$((RANDOM % 10))"
    kill -0 $spid 2>/dev/null || break
    fault $spid "${pids[@]}"
  done
  hung=
  while alive $spid "${pids[@]}"; do
    if (($(date +%s) - start > BOUND)); then hung=1; kill -9 $spid "${pids[@]}" 2>/dev/null; break; fi
    sleep 0.5
  done
  wait $spid; src=$?
  rcs=(); for p in "${pids[@]}"; do wait "$p"; rcs+=($?); done
  verdict=ok
  for h in $(seq 1 $hops); do
    if [[ $mode == *pipe ]]; then got=$(sha256sum <"$d/recv$h.out" | cut -d' ' -f1)
    else got=$( [ -f "$d/dst$h/src" ] && sha256sum <"$d/dst$h/src" | cut -d' ' -f1); fi
    rc=${rcs[$((h - 1))]}
    if [ "$rc" -eq 0 ] && [ "$got" != "$want" ]; then verdict=FAIL-wrong-bytes; fi
    if [ "$rc" -ne 0 ] && ! grep -q 'haul: ' "$d/recv$h.err"; then verdict=FAIL-unclear; fi
    if [ "$rc" -ge 101 ]; then verdict=FAIL-panic; fi
  done
  [ "$src" -ne 0 ] && ! grep -q 'haul: ' "$d/send.err" && verdict=FAIL-unclear
  [ "$src" -ge 101 ] && verdict=FAIL-panic
  [ -n "$hung" ] && verdict=FAIL-hung
  all0=1; any0=; for rc in "$src" "${rcs[@]}"; do [ "$rc" -eq 0 ] && any0=1 || all0=; done
  if [[ $verdict == FAIL* ]]; then fail[$mode]=$((${fail[$mode]} + 1))
  elif [ -n "$all0" ]; then ok[$mode]=$((${ok[$mode]} + 1))
  elif [ -n "$any0" ]; then verdict=split; split[$mode]=$((${split[$mode]} + 1))
  else verdict=clean-failure; clean[$mode]=$((${clean[$mode]} + 1)); fi
  echo "-> send=$src recv=${rcs[*]} $verdict in $(($(date +%s) - start)) s"
  if [[ $verdict != ok ]]; then tail -n 2 "$d"/*.err | sed 's/^/    /'; fi
  "$WANLAB" set $LAB --loss 0 >/dev/null
  rm -rf "$d"
done
failed=0
for mode in "${MODES[@]}"; do
  echo "$mode: ${ok[$mode]} whole, ${clean[$mode]} clean failures, ${split[$mode]} split (some sides 0), ${fail[$mode]} FAILED"
  failed=$((failed + ${fail[$mode]}))
done
[ "$failed" -eq 0 ]
