#!/usr/bin/env bash
# Prefix caching under load on the CPU backend: two servers over the same model, one with
# --prefix-caching=true and one with false, and `ptxserve bench` alternated between them
# (on, off, on, off, ...) so that both see the same machine load:
#   1. the shared-prefix workload: 1,024 common tokens + 32 of each request's own,
#      concurrency 16; TTFT p50 and token throughput, and their off/on ratios;
#   2. the multi-turn workload: 4 turns of 64 new tokens and 32 answered, concurrency 16;
#      the share of prompt tokens found cached.
# Each round uses another --seed (another shared prefix), so the first requests of every
# round find nothing cached. Prints figures; asserts nothing about speed. Exits non-zero
# only if a request failed.
#
# usage: bench/prefix_cache_load.sh [BUILD_DIR] [MODEL_DIR] [ROUNDS]
#   defaults: build, the synthetic `tiny` preset (context 2,048) made into a temporary
#   directory, 3 rounds
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MODEL=${2:-}
ROUNDS=${3:-3}
BIN=$BUILD/server/ptxserve
TMP=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$TMP"' EXIT
if [[ -z $MODEL ]]; then
  MODEL=$TMP/tiny
  "$BIN" make-model --out "$MODEL" --preset tiny --seed 1 >/dev/null 2>&1
fi

declare -A TARGET
for mode in on off; do
  caching=true
  [[ $mode == off ]] && caching=false
  "$BIN" serve --model "$MODEL" --backend cpu --port 0 --http-port -1 --metrics-port -1 \
    --log-requests=false --prefix-caching=$caching >"$TMP/serve-$mode.log" 2>&1 &
  PIDS+=($!)
done
for mode in on off; do
  for _ in $(seq 300); do grep -q 'ready:' "$TMP/serve-$mode.log" && break; sleep 0.1; done
  TARGET[$mode]=$(sed -n 's/.*listening on \([0-9.:]*\) (gRPC).*/\1/p' "$TMP/serve-$mode.log")
done
echo "model $MODEL; caching on at ${TARGET[on]}, off at ${TARGET[off]}"

status=0
# run WORKLOAD ROUND MODE ARGS...: one bench, its JSON in $TMP/WORKLOAD-ROUND-MODE.json.
run() {
  local workload=$1 round=$2 mode=$3
  shift 3
  "$BIN" bench --target "${TARGET[$mode]}" --seed "$round" --temperature 0 --timeout 300 \
    --json "$TMP/$workload-$round-$mode.json" "$@" >"$TMP/$workload-$round-$mode.txt" || status=1
  python3 - "$TMP/$workload-$round-$mode.json" "$workload round $round caching $mode" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<32} TTFT p50 {j['ttft']['p50_ms']:8.1f} ms  "
      f"{j['token_throughput']:8.1f} tokens/s  cached {100 * j['prefix_cache_hit_rate']:5.1f} %  "
      f"{j['ok']}/{j['requests']} ok")
PY
}
for round in $(seq "$ROUNDS"); do
  for mode in on off; do
    run shared "$round" "$mode" --concurrency 16 --requests 64 --shared-prefix-len 1024 \
      --prompt-len 32 --max-tokens 32
  done
done
for round in $(seq "$ROUNDS"); do
  for mode in on off; do
    run chat "$round" "$mode" --concurrency 16 --requests 32 --turns 4 --prompt-len 64 \
      --max-tokens 32
  done
done
python3 - "$TMP" "$ROUNDS" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def med(workload, mode, key):
    vals = []
    for r in range(1, rounds + 1):
        j = json.load(open(f"{tmp}/{workload}-{r}-{mode}.json"))
        vals.append(j["ttft"]["p50_ms"] if key == "ttft" else j[key])
    return statistics.median(vals)
for w in ("shared", "chat"):
    ttft = med(w, "off", "ttft") / med(w, "on", "ttft")
    tput = med(w, "on", "token_throughput") / med(w, "off", "token_throughput")
    print(f"{w}: medians over {rounds} rounds: TTFT p50 {ttft:.1f}x lower, "
          f"token throughput {tput:.2f}x higher with caching; "
          f"{100 * med(w, 'on', 'prefix_cache_hit_rate'):.1f} % of prompt tokens cached")
PY
exit $status
