#!/usr/bin/env bash
# Installs what is missing, builds Stoker, writes the built-in sample data
# set, starts a server and streams two epochs from it with stoker_fetch,
# printing throughput. Extra arguments go to stoker_fetch.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

bazel build //server:stoker_server //client:stoker_fetch //tools:make_sample_shards
bin="$(bazel info bazel-bin 2>/dev/null)"

data="${STOKER_DEMO_DIR:-${TMPDIR:-/tmp}/stoker-demo}"
if [ ! -f "$data/sample-000007.tar" ]; then
  echo "demo: writing sample shards to $data"
  "$bin/tools/make_sample_shards" --out_dir="$data" --num_shards=8 \
    --samples_per_shard=128 >/dev/null
fi

log="$(mktemp)"
ports="$(mktemp -u)"
"$bin/server/stoker_server" --port=0 --dataset="sample=$data/sample-*.tar" \
  --port_file="$ports" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -f "$log" "$ports"' EXIT

# The server writes its port file once it listens (at most 60 s).
port=""
for _ in $(seq 1 600); do
  if [ -f "$ports" ]; then
    port="$(sed -n 's/^port=\([0-9]*\)$/\1/p' "$ports")"
    break
  fi
  if ! kill -0 $server 2>/dev/null; then cat "$log" >&2; exit 1; fi
  sleep 0.1
done
[ -n "$port" ] || { cat "$log" >&2; echo "demo: server did not start" >&2; exit 1; }
echo "demo: stoker_server on port $port, streaming 2 epochs"

"$bin/client/stoker_fetch" --servers="localhost:$port" --dataset=sample \
  --batch_size=64 --epochs=2 "$@"
