#!/usr/bin/env bash
# Real processes, a server's life: the port is exclusive, SIGHUP is logged
# and ignored, SIGTERM drains, and a rolling restart of three servers under a
# running epoch (SIGTERM one at a time, restart on the same port) delivers
# every sample exactly once with the single-server checksum.
set -euo pipefail

. "${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}/tests/testing/processes.sh" lifecycle

# Starts a server on port $1 (0: a free one); sets $port and $pid.
start_server() {
  launch_server "$2" --port="$1" --threads=1 \
    --dataset="train=$tmp/shards/*.tar" --drain_grace=10s --dct_scaling=false
}

# Large images, decoded whole (--dct_scaling=false): batches take a while,
# so SIGTERM tends to find streams at work.
"$shards_bin" --out_dir="$tmp/shards" --num_shards=4 --samples_per_shard=15 \
  --min_side=1000 --max_side=1400 >/dev/null

# 1. The port is exclusive: a second server on a busy port fails to start
# (gRPC's default SO_REUSEPORT let it start and take half the clients).
start_server 0 "$tmp/first.log"; first_pid=$pid first_port=$port
if "$server_bin" --port="$first_port" --dataset="train=$tmp/shards/*.tar" \
    >"$tmp/second.log" 2>&1; then
  fail "a second server started on busy port $first_port"
fi
grep -q "cannot listen" "$tmp/second.log" \
  || fail "unclear error for a busy port: $(cat "$tmp/second.log")"
echo "ok: a busy port is a clear start-up error"

# 2. SIGHUP is logged and ignored (it used to kill the server silently).
kill -HUP "$first_pid"
for _ in $(seq 1 100); do
  grep -q "SIGHUP ignored" "$tmp/first.log" && break
  sleep 0.05
done
grep -q "SIGHUP ignored" "$tmp/first.log" || fail "SIGHUP not logged"
kill -0 "$first_pid" 2>/dev/null || fail "SIGHUP killed the server"
echo "ok: SIGHUP is logged and ignored"

# 3. SIGTERM with no stream: drains at once and exits 0.
kill -TERM "$first_pid"
wait "$first_pid" || fail "SIGTERM exit status $?"
grep -q "draining" "$tmp/first.log" || fail "SIGTERM did not drain"
echo "ok: SIGTERM drains and exits 0"

# 4. Rolling restart under a running epoch.
common=(--dataset=train --batch_size=4 --epochs=1 --checksum
        --transform='RandomResizedCrop(224)|RandomHorizontalFlip()'
        --stall_timeout_s=5 --prefetch=8 --batches_per_request=4)
start_server 0 "$tmp/ref.log"; ref_pid=$pid
"$fetch_bin" --servers="127.0.0.1:$port" "${common[@]}" >"$tmp/ref.out" \
  || fail "reference fetch failed"
reference=$(grep '^checksum=' "$tmp/ref.out")
kill -TERM "$ref_pid"; wait "$ref_pid" || true

ports=(); spids=()
for i in 0 1 2; do
  start_server 0 "$tmp/s$i-0.log"; ports+=("$port"); spids+=("$pid")
done
servers="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
"$fetch_bin" --servers="$servers" "${common[@]}" --step_ms=600 \
  --keys_out="$tmp/keys" >"$tmp/rolling.out" 2>"$tmp/rolling.err" &
fetch=$!
drained=0
start=$(date +%s.%N)
for i in 0 1 2; do
  # One more batch (4 keys) delivered since the last restart: the epoch
  # is under way (wait_for_lines fails if it ended first).
  wait_for_lines "$tmp/keys" $(((i + 1) * 4)) "$fetch"
  kill -TERM "${spids[$i]}"
  wait "${spids[$i]}" || fail "server $i exited with $? on SIGTERM"
  n=$(sed -n 's/.*draining: \([0-9]*\) streams.*/\1/p' "$tmp/s$i-0.log")
  drained=$((drained + ${n:-0}))
  start_server "${ports[$i]}" "$tmp/s$i-1.log"
  echo "server $i restarted after $(echo "$(date +%s.%N) - $start" | bc) s"
done
wait "$fetch" || fail "fetch failed during the rolling restart: $(cat "$tmp/rolling.err")"
got=$(grep '^checksum=' "$tmp/rolling.out")
[ "$got" = "$reference" ] || fail "rolling restart: $got != single-server $reference"
dups=$(awk '{ print $2 }' "$tmp/keys" | sort | uniq -d | wc -l)
count=$(awk '{ print $2 }' "$tmp/keys" | sort -u | wc -l)
[ "$dups" -eq 0 ] && [ "$count" -eq 60 ] \
  || fail "rolling restart: $count unique keys, $dups repeated"
echo "ok: rolling restart of 3 servers ($drained streams drained): $got, every key once"
echo "1 passed, 0 failed"
