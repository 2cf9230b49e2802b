#!/usr/bin/env bash
# The HTTP front under load, against gRPC in the same run, on the CPU backend:
#   1. `ptxserve bench` at concurrency 64 over gRPC and over the OpenAI HTTP API,
#      alternated (grpc, http, grpc, http), and the HTTP/gRPC token-throughput ratio;
#   2. 1,000 concurrent server-sent-event streams (one connection each), with the server's
#      thread count and resident memory while they run and at the end.
# Prints figures; asserts nothing about speed. Exits non-zero only if a request failed.
#
# usage: bench/http_load.sh [BUILD_DIR] [MODEL_DIR]   (defaults: build, ../shared/models/...)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MODEL=${2:-../shared/models/tinystories-656k}
BIN=$BUILD/server/ptxserve
HTTP_THREADS=2
TMP=$(mktemp -d)
trap 'kill -9 "$PID" 2>/dev/null || true; rm -rf "$TMP"' EXIT

# 1,000 streams must fit: the queue holds the ones the batch has no room for.
"$BIN" serve --model "$MODEL" --backend cpu --port 0 --http-port 0 --metrics-port -1 \
  --http-threads "$HTTP_THREADS" --max-batch-size 256 --max-queued 2048 >"$TMP/serve.log" 2>&1 &
PID=$!
for _ in $(seq 200); do grep -q 'ready:' "$TMP/serve.log" && break; sleep 0.1; done
GRPC=$(sed -n 's/.*listening on \([0-9.:]*\) (gRPC).*/\1/p' "$TMP/serve.log")
HTTP=$(sed -n 's|.*OpenAI API on http://\([0-9.:]*\)/v1.*|\1|p' "$TMP/serve.log")
echo "server pid $PID: gRPC $GRPC, HTTP $HTTP, --http-threads $HTTP_THREADS"

tokens_per_s() { sed -n 's/.*token throughput *\([0-9.]*\).*/\1/p' "$1"; }
status=0
declare -A total=([grpc]=0 [http]=0)
for round in 1 2; do
  for api in grpc http; do
    target=$GRPC
    [[ $api == http ]] && target=$HTTP
    "$BIN" bench --api "$api" --target "$target" --concurrency 64 --requests 768 \
      --prompt-len 32 --max-tokens 64 --timeout 60 >"$TMP/$api.txt" || status=1
    t=$(tokens_per_s "$TMP/$api.txt")
    total[$api]=$(python3 -c "print(${total[$api]} + $t)")
    echo "round $round $api: $t tokens/s, $(grep -o '[0-9]* ok, [0-9]* errors' "$TMP/$api.txt")"
  done
done
python3 -c "print(f'HTTP / gRPC token throughput at concurrency 64: {${total[http]} / ${total[grpc]}:.3f}')"

# 1,000 concurrent streams; sample the server while they run.
"$BIN" bench --api http --target "$HTTP" --concurrency 1000 --requests 1000 --prompt-len 16 \
  --max-tokens 64 --timeout 120 >"$TMP/many.txt" &
BENCH=$!
peak_threads=0
while kill -0 "$BENCH" 2>/dev/null; do
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$PID/status")
  ((threads > peak_threads)) && peak_threads=$threads
  sleep 0.2
done
wait "$BENCH" || status=1
grep -E 'requests|token throughput|TTFT|error' "$TMP/many.txt" | sed 's/^/1000 streams: /'
echo "server threads (peak while streaming): $peak_threads"
grep -E '^(VmHWM|VmRSS):' "/proc/$PID/status" | sed 's/^/server memory: /'
exit $status
