#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer on the STABLE toolchain (libfuzzer-sys plus the
# stable SanitizerCoverage codegen flags cargo-fuzz would pass; no cargo-fuzz, no nightly,
# no sanitizer) and runs each for a bounded time, seeded with fuzz/corpus/<target>.
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 10 s, every target)
#
# New inputs go to fuzz/target/corpus/<target> (kept between runs, not committed); a
# crash is saved under fuzz/artifacts/<target>/ and makes the script exit 1.
# Extra libFuzzer flags can be passed in FUZZ_ARGS (e.g. FUZZ_ARGS=-jobs=2).
set -euo pipefail
cd "$(dirname "$0")"

secs=${1:-10}
shift || true
all=(frame control ticket path journal receive shard pipe record)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

host=$(rustc -vV | sed -n 's/^host: //p')
tdir=${CARGO_TARGET_DIR:-target}
# --target keeps these flags off build scripts and proc macros.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares"
bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
cargo build --locked --release --target "$host" "${bins[@]}"

# Per target: the longest input worth trying (the receiver takes whole streams).
max_len() {
  case $1 in
    receive|pipe) echo 65536 ;;
    frame) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

# Seconds one input may take before it counts as a hang: a receive input may hold up to
# 50 Finish rounds, each waiting up to the target's 0.1 s receive timeout.
timeout_for() {
  case $1 in
    receive|pipe) echo 60 ;;
    *) echo 10 ;;
  esac
}

export TMPDIR=$PWD/target/tmp
failed=()
for t in "${targets[@]}"; do
  work=target/corpus/$t
  mkdir -p "$work" "artifacts/$t" "$TMPDIR"
  : > "target/$t.log"
  echo "== fuzz $t for ${secs}s"
  # -timeout: one input taking longer than this is a finding (a hang).
  # shellcheck disable=SC2086
  if ! "$tdir/$host/release/$t" "$work" "corpus/$t" \
      -max_total_time="$secs" -max_len="$(max_len "$t")" \
      -timeout="$(timeout_for "$t")" -rss_limit_mb=2048 -artifact_prefix="artifacts/$t/" \
      -print_final_stats=1 ${FUZZ_ARGS:-} >> "target/$t.log" 2>&1; then
    failed+=("$t")
    tail -n 60 "target/$t.log"
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "target/$t.log" | tail -n 1)
  rm -rf "${TMPDIR:?}/haul-fuzz-$t-"*
  last=$(grep -E '^#[0-9]+' "target/$t.log" | tail -n 1 || true)
  echo "   $t: ${runs:-0} inputs run; last status: ${last:-none}"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]} (inputs under fuzz/artifacts/)" >&2
  exit 1
fi
