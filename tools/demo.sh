#!/usr/bin/env bash
# Installs what is missing, builds Stoker, writes the built-in sample data
# set and streams two epochs of it with stoker_fetch in local mode: the
# client starts its own stoker_server on this host (on every CPU: the demo
# has no training step to leave one for) and receives the batches through
# shared memory; nothing else to start.
# Extra arguments go to stoker_fetch; to stream from a cluster instead, give
# --servers=dns:///stoker.data.svc:50051 (or host:port,...) and
# --dataset=<its name>.
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

echo "demo: streaming 2 epochs of $data/sample-*.tar from a local server"
"$bin/client/stoker_fetch" --local_shards="$data/sample-*.tar" \
  --server_binary="$bin/server/stoker_server" --local_cores="$(nproc)" \
  --dataset=sample \
  --batch_size=64 --epochs=2 "$@"
