#!/usr/bin/env bash
# The noisy-neighbour figure, on one server (CPU backend): the tokens/s of one unrelated
# stream (a) beside 8 streams of ordinary requests and (b) beside 8 streams whose requests
# carry the most stopping criteria allowed, none of which ever matches (`ptxserve bench
# --stop-load`: 64 stop strings of 512 bytes, 256 stop ids). Rounds alternate a and b;
# prints every figure, the medians and b/a. Asserts nothing about speed; exits non-zero
# only if a measured request failed or the stop load matched.
#
# usage: bench/noisy_neighbour.sh [BUILD_DIR] [MODEL_DIR] [ROUNDS]
#        (defaults: build, ../shared/models/tinystories-656k, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MODEL=${2:-../shared/models/tinystories-656k}
ROUNDS=${3:-5}
BIN=$BUILD/server/ptxserve
TMP=$(mktemp -d)
PID=
BG=
trap 'for p in $BG $PID; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$TMP"' EXIT

"$BIN" serve --model "$MODEL" --backend cpu --port 0 --http-port -1 --metrics-port -1 \
  >"$TMP/serve.log" 2>&1 &
PID=$!
for _ in $(seq 200); do grep -q 'ready:' "$TMP/serve.log" && break; sleep 0.1; done
TARGET=$(sed -n 's/.*listening on \([0-9.:]*\) (gRPC).*/\1/p' "$TMP/serve.log")
echo "server pid $PID: gRPC $TARGET, model $MODEL"

tokens_per_s() { sed -n 's/.*token throughput *\([0-9.]*\).*/\1/p' "$1"; }
# The measured stream: one request at a time, 8 of them.
measured() {
  "$BIN" bench --target "$TARGET" --concurrency 1 --requests 8 --prompt-len 32 \
    --max-tokens 256 --seed 1000 --timeout 60 >"$TMP/measured.txt"
}

status=0
measured || status=1  # warm-up, not counted
declare -A figures=([a]="" [b]="")
for round in $(seq "$ROUNDS"); do
  for load in a b; do
    flags=()
    [[ $load == b ]] && flags=(--stop-load)
    # The neighbours: 8 streams that outlast the measured one and are stopped after it.
    "$BIN" bench --target "$TARGET" --concurrency 8 --requests 1000000 --prompt-len 32 \
      --max-tokens 256 --seed "$round" "${flags[@]}" >/dev/null 2>&1 &
    BG=$!
    sleep 1
    measured || status=1
    kill "$BG"
    wait "$BG" 2>/dev/null || true
    BG=
    t=$(tokens_per_s "$TMP/measured.txt")
    figures[$load]+=" $t"
    name="ordinary requests"
    [[ $load == b ]] && name="requests at the stopping limits"
    echo "round $round: beside 8 streams of $name: $t tokens/s"
  done
done

# The stop load must never match (else its requests would end early and be lighter).
"$BIN" bench --target "$TARGET" --concurrency 8 --requests 64 --prompt-len 32 --max-tokens 256 \
  --seed 99 --stop-load --timeout 60 >"$TMP/check.txt" || status=1
stopped=$(sed -n 's/.*stop load *\([0-9]*\) stopped early.*/\1/p' "$TMP/check.txt")
echo "stop load check: $stopped of 64 requests stopped early"
[[ $stopped == 0 ]] || status=1

python3 - "${figures[a]}" "${figures[b]}" <<'EOF'
import statistics, sys
a = statistics.median(float(x) for x in sys.argv[1].split())
b = statistics.median(float(x) for x in sys.argv[2].split())
print(f"median tokens/s of the measured stream: (a) beside ordinary requests {a:.0f}, "
      f"(b) beside requests at the stopping limits {b:.0f}; b/a = {b / a:.3f}")
EOF
exit $status
