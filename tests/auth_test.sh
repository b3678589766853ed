#!/usr/bin/env bash
# Per-job bearer tokens (stoker_server --auth_tokens_file): no token or an
# unknown one is UNAUTHENTICATED, a dataset the token does not cover is
# PERMISSION_DENIED whether or not it exists, the right token reads (from
# --token_file or STOKER_TOKEN), tokens never reach the log, and a bad
# tokens file is a start-up error.
set -euo pipefail

. "${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}/tests/testing/processes.sh" auth

"$shards_bin" --out_dir="$tmp/train" --num_shards=1 --samples_per_shard=8 \
  >/dev/null
"$shards_bin" --out_dir="$tmp/other" --num_shards=1 --samples_per_shard=8 \
  >/dev/null
token_a="a1b2c3d4e5f60718293a4b5c6d7e8f90"
token_b="ffeeddccbbaa99887766554433221100"
token_c="0123456789abcdef0123456789abcdef"
cat >"$tmp/tokens" <<TOKENS
# token                          job     datasets
$token_a resnet  train
$token_b bert    other,secret
$token_c admin   *
TOKENS
launch_server "$tmp/server.log" --port=0 --threads=1 \
  "--dataset=train=$tmp/train/*.tar" "--dataset=other=$tmp/other/*.tar" \
  --auth_tokens_file="$tmp/tokens"
server="127.0.0.1:$port"
flags=(--batch_size=4 --epochs=1 --unavailable_deadline_s=2)

# expect NAME DATASET STATUS MESSAGE [FLAGS...]: stoker_fetch fails with
# STATUS and MESSAGE.
expect() {
  local name="$1" dataset="$2" code="$3" message="$4"
  shift 4
  local status=0
  "$fetch_bin" --servers="$server" --dataset="$dataset" "${flags[@]}" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" || status=$?
  [ "$status" -ne 0 ] || fail "$name: read $dataset"
  grep -qF "$code" "$tmp/$name.err" || fail "$name: $(cat "$tmp/$name.err")"
  grep -qF "$message" "$tmp/$name.err" || fail "$name: $(cat "$tmp/$name.err")"
  echo "ok: $name -> $(tail -n 1 "$tmp/$name.err")"
}
printf '%s\n' "$token_a" >"$tmp/a.token"
printf '%s\n' "$token_b" >"$tmp/b.token"
printf '%s\n' "nottherighttoken000000000000000" >"$tmp/bad.token"

expect no_token train UNAUTHENTICATED "no bearer token"
expect unknown_token train UNAUTHENTICATED "unknown bearer token" \
  --token_file="$tmp/bad.token"
expect wrong_dataset train PERMISSION_DENIED \
  "job 'bert' may not read dataset 'train'" --token_file="$tmp/b.token"
expect absent_dataset hidden PERMISSION_DENIED \
  "job 'resnet' may not read dataset 'hidden'" --token_file="$tmp/a.token"
# A dataset the token covers but the server lacks is NOT_FOUND as before,
# without the list of the server's datasets.
expect covered_absent secret NOT_FOUND "unknown dataset 'secret'" \
  --token_file="$tmp/b.token"
if grep -q "this server has" "$tmp/covered_absent.err"; then
  fail "NOT_FOUND listed the server's datasets to a limited job"
fi

"$fetch_bin" --servers="$server" --dataset=train "${flags[@]}" \
  --token_file="$tmp/a.token" | grep -q "images=8 " \
  || fail "the right token did not read train"
STOKER_TOKEN="$token_c" "$fetch_bin" --servers="$server" --dataset=other \
  "${flags[@]}" | grep -q "images=8 " \
  || fail "STOKER_TOKEN with a '*' token did not read other"
echo "ok: right tokens read (--token_file and STOKER_TOKEN)"

for t in "$token_a" "$token_b" "$token_c" nottherighttoken; do
  if grep -qF "$t" "$tmp/server.log" "$tmp"/*.err; then
    fail "a token reached a log"
  fi
done
echo "ok: no token in any log"
kill "$pid"

# Per-job stream limit: while one job holds its only stream, its second
# fetch is refused (and retries, as for any busy server) and another job is
# served; in the end every fetch gets its whole epoch.
# The slow job asks for one 50 MB batch (64 crops of 512x512) per stream
# and takes one every 300 ms; frozen (SIGSTOP) while a stream of it is open,
# it holds that stream (the batch is more than gRPC's flow-control windows
# and the socket buffers hold) until it is thawed.
"$shards_bin" --out_dir="$tmp/big" --num_shards=1 --samples_per_shard=1280 \
  --min_side=64 --max_side=96 >/dev/null
launch_server "$tmp/limit.log" --port=0 --threads=2 \
  "--dataset=train=$tmp/big/*.tar" --auth_tokens_file="$tmp/tokens" \
  --max_streams_per_job=1 --log_level=debug
server="127.0.0.1:$port"
big=(--dataset=train --batch_size=64 --epochs=1 --streams_per_server=1
     --prefetch=1 --batches_per_request=20 --stall_timeout_s=60
     --unavailable_deadline_s=60)
"$fetch_bin" --servers="$server" "${big[@]}" --token_file="$tmp/a.token" \
  --transform='RandomResizedCrop(512)' --step_ms=300 \
  >"$tmp/slow.out" 2>&1 &
slow=$!
pids+=("$slow")  # killed on exit, stopped or not
# Streams the server started and has not finished (its debug lines).
open_streams() {
  local started finished
  started=$(grep -c "stream from .*: dataset train" "$tmp/limit.log" || true)
  finished=$(grep -c "stream from .* done:" "$tmp/limit.log" || true)
  echo $((started - finished))
}
frozen=""
for _ in $(seq 1 400); do
  kill -STOP "$slow"
  if [ "$(open_streams)" -eq 1 ]; then
    frozen=yes
    break
  fi
  kill -CONT "$slow"
  kill -0 "$slow" 2>/dev/null || fail "the slow job ended: $(cat "$tmp/slow.out")"
  sleep 0.05
done
[ -n "$frozen" ] || fail "the slow job never had a stream open: $(cat "$tmp/limit.log")"
"$fetch_bin" --servers="$server" "${big[@]}" --token_file="$tmp/a.token" \
  >"$tmp/second.out" 2>&1 &
second=$!
refused=""
for _ in $(seq 1 1200); do
  if grep -qF "job 'resnet' has 1 streams open" "$tmp/limit.log"; then
    refused=yes
    break
  fi
  sleep 0.05
done
[ -n "$refused" ] || fail "the job's second stream was not refused: $(cat "$tmp/limit.log")"
kill -0 "$slow" 2>/dev/null || fail "the slow job ended before the check"
STOKER_TOKEN="$token_c" "$fetch_bin" --servers="$server" "${big[@]}" \
  | grep -q "images=1280 " \
  || fail "another job was not served while resnet was at its limit"
kill -0 "$slow" 2>/dev/null \
  || fail "the slow job ended before the other job was served"
kill -CONT "$slow"
wait "$slow" || fail "the slow job failed: $(cat "$tmp/slow.out")"
wait "$second" || fail "the second fetch failed: $(cat "$tmp/second.out")"
grep -q "images=1280 " "$tmp/slow.out" || fail "the slow job lost samples"
grep -q "images=1280 " "$tmp/second.out" || fail "the second fetch lost samples"
echo "ok: a job at its stream limit waits while another job is served"
kill "$pid"

# A bad tokens file stops the server before it listens.
printf 'short resnet train\n' >"$tmp/short"
server_refuses "line 1: the token must be at least 16 characters" --port=0 \
  "--dataset=train=$tmp/train/*.tar" --auth_tokens_file="$tmp/short"
if grep -qF "short resnet" "$tmp/refused.out" "$tmp/refused.err"; then
  fail "the bad line was logged"
fi
server_refuses "--max_streams_per_job must be >= 0 and needs --auth_tokens_file" \
  --port=0 "--dataset=train=$tmp/train/*.tar" --max_streams_per_job=2
server_refuses "--max_memory_share_per_job must be in (0, 1]" \
  --port=0 "--dataset=train=$tmp/train/*.tar" --max_memory_share_per_job=0.5
server_refuses "--max_memory_share_per_job must be in (0, 1]" --port=0 \
  "--dataset=train=$tmp/train/*.tar" --auth_tokens_file="$tmp/tokens" \
  --max_memory_share_per_job=1.5
# With tokens and a share, the server starts and serves.
launch_server "$tmp/share.log" --port=0 "--dataset=train=$tmp/train/*.tar" \
  --auth_tokens_file="$tmp/tokens" --max_memory_share_per_job=0.25
"$fetch_bin" --servers="127.0.0.1:$port" --dataset=train "${flags[@]}" \
  --token_file="$tmp/a.token" | grep -q "images=8 " \
  || fail "a server with a per-job memory share did not serve"
kill "$pid"
echo "PASS"
