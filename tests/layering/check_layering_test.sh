#!/usr/bin/env bash
# scripts/check-layering passes on this checkout; on a tree that breaks every rule it fails
# and reports exactly the forbidden includes (file, line, path), in either spelling, and
# none of the allowed ones. Usage: check_layering_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: check_layering_test.sh SOURCE_DIR}
check="$src/scripts/check-layering"

if ! out=$(bash "$check" "$src" 2>&1); then
  printf 'FAIL: this checkout breaks the layering rules:\n%s\n' "$out"
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
put() {
  mkdir -p "$tmp/$(dirname "$1")"
  printf '%s\n' "$2" >"$tmp/$1"
}
# One break per rule.
put engine/cuda/a.cc '#include "engine/cpu/ops.h"'
put engine/cpu/b.h '#  include <engine/cuda/driver.h>'
put server/c.cc '#include "engine/cuda/gpu_backend.h"'
put server/cli/d.cc '#include "engine/cpu/cpu_backend.h"'
put engine/e.cc '#include <grpcpp/grpcpp.h>'
put engine/model/f.h '#include <google/protobuf/message.h>'
put engine/g.h '#include "ptxserve/v1/decode.pb.h"'
put engine/tokenizer/h.cc '#include "prometheus/registry.h"'
put engine/i.cc '#include "server/metrics.h"'
put engine/j.cc '#include "engine/cuda/gpu_backend.h"'
put kernels/k.cc '#include "engine/backend.h"'
put kernels/emu/l.h '#include "server/server.h"'
# Allowed: the factory includes both backends, a backend includes engine/, comments, and
# tests/ and bench/ include anything.
put engine/backend_factory.cc $'#include "engine/cpu/cpu_backend.h"\n#include "engine/cuda/gpu_backend.h"'
put engine/cuda/m.cc $'#include "engine/backend.h"\n// #include "engine/cpu/ops.h"'
put tests/n.cc '#include "engine/cuda/gpu_backend.h"'
put bench/o.cc '#include "engine/cpu/cpu_backend.h"'

if out=$(bash "$check" "$tmp" 2>&1); then
  printf 'FAIL: check-layering passed a tree with forbidden includes:\n%s\n' "$out"
  exit 1
fi
got=$(grep -oE '^check-layering: [^ ]+ includes "[^"]*"' <<<"$out" | sed 's/^check-layering: //' | sort)
want=$(sort <<'LIST'
engine/cuda/a.cc:1 includes "engine/cpu/ops.h"
engine/cpu/b.h:1 includes "engine/cuda/driver.h"
server/c.cc:1 includes "engine/cuda/gpu_backend.h"
server/cli/d.cc:1 includes "engine/cpu/cpu_backend.h"
engine/e.cc:1 includes "grpcpp/grpcpp.h"
engine/model/f.h:1 includes "google/protobuf/message.h"
engine/g.h:1 includes "ptxserve/v1/decode.pb.h"
engine/tokenizer/h.cc:1 includes "prometheus/registry.h"
engine/i.cc:1 includes "server/metrics.h"
engine/j.cc:1 includes "engine/cuda/gpu_backend.h"
kernels/k.cc:1 includes "engine/backend.h"
kernels/emu/l.h:1 includes "server/server.h"
LIST
)
if [[ "$got" != "$want" ]]; then
  printf 'FAIL: reported includes differ (< reported, > expected):\n'
  diff <(echo "$got") <(echo "$want") || true
  printf 'output:\n%s\n' "$out"
  exit 1
fi
echo "check_layering_test: ok"
