#!/usr/bin/env bash
# Real processes: stoker_server on shards packed by GNU tar, stoker_fetch
# over two epochs (every key exactly once per epoch), then three servers with
# two SIGKILLed (then SIGSTOPped) mid-epoch (same checksum as a single
# server, every key once), then resume from a cursor, then local mode
# (stoker_fetch starting its own server).
set -euo pipefail

. "${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}/tests/testing/processes.sh" processes

# Starts a server on a free port; sets $port and appends the pid.
start_server() {
  launch_server "$2" --port=0 --threads=1 --dataset="train=$1"
}

# 1. Shards written by GNU tar from plain files.
"$shards_bin" --out_dir="$tmp/gen" --num_shards=2 --samples_per_shard=40 \
  --min_side=64 --max_side=200 >/dev/null
mkdir -p "$tmp/files" "$tmp/gnu"
for f in "$tmp"/gen/*.tar; do tar -xf "$f" -C "$tmp/files"; done
(cd "$tmp/files" && ls | sort > "$tmp/names" && \
  head -n 80 "$tmp/names" | tar -cf "$tmp/gnu/train-0.tar" -T - && \
  tail -n +81 "$tmp/names" | tar -cf "$tmp/gnu/train-1.tar" -T -)
expected_keys=$(sed 's/\.[a-z]*$//' "$tmp/names" | sort -u)
nkeys=$(echo "$expected_keys" | wc -l)
[ "$nkeys" -eq 80 ] || fail "expected 80 keys, got $nkeys"

start_server "$tmp/gnu/*.tar" "$tmp/server0.log"
single="127.0.0.1:$port"
"$fetch_bin" --servers="$single" --dataset=train --batch_size=16 --epochs=2 \
  --transform='RandomResizedCrop(64)|RandomHorizontalFlip()' \
  --keys_out="$tmp/keys" >"$tmp/fetch.out" || fail "fetch failed: $(cat "$tmp/fetch.out")"
tail -n 1 "$tmp/fetch.out" | grep -q '^images=160 batches=10 bytes=' \
  || fail "unexpected summary: $(tail -n 1 "$tmp/fetch.out")"
for epoch in 0 1; do
  got=$(awk -v e=$epoch '$1 == e { print $2 }' "$tmp/keys" | sort)
  [ "$got" = "$expected_keys" ] || fail "epoch $epoch did not deliver every key once"
done
echo "ok: GNU tar shards, two epochs, every key once per epoch"

# 2. Three servers, two of them killed with SIGKILL mid-epoch, then (fresh
# ones) frozen with SIGSTOP mid-epoch. --step_ms makes the epoch last about
# a second.
common=(--dataset=train --batch_size=8 --epochs=1 --checksum
        --transform='RandomResizedCrop(64)|RandomHorizontalFlip()'
        --stall_timeout_s=1 --prefetch=2 --batches_per_request=1)
"$fetch_bin" --servers="$single" "${common[@]}" >"$tmp/ref.out" \
  || fail "reference fetch failed"
reference=$(grep '^checksum=' "$tmp/ref.out")

start_server "$tmp/gnu/*.tar" "$tmp/a.log"; a="127.0.0.1:$port"

# Runs fetch against a and two fresh servers, applies signal $1 to both
# fresh ones while the epoch is under way, and checks checksum and keys.
# A client notices a dead or frozen server only when it gives it work, and
# servers are idle between batches: if the victims happened to get no work
# after the signal, the epoch is still checked but proves nothing about
# failover, so it is run again with fresh servers (each run misses with
# probability about (2/6)^6, so five in a row never do in practice).
disrupt() {
  local signal="$1" name="$2" attempt
  for attempt in 1 2 3 4 5; do
    start_server "$tmp/gnu/*.tar" "$tmp/$name-b$attempt.log"
    local b="127.0.0.1:$port" pid_b=${pids[-1]}
    start_server "$tmp/gnu/*.tar" "$tmp/$name-c$attempt.log"
    local c="127.0.0.1:$port" pid_c=${pids[-1]}
    "$fetch_bin" --servers="$a,$b,$c" "${common[@]}" --step_ms=100 \
      --keys_out="$tmp/keys_$name" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    local fetch=$!
    sleep 0.4
    kill -0 "$fetch" 2>/dev/null || fail "$name: fetch finished before the signal"
    kill "-$signal" "$pid_b" "$pid_c"
    wait "$fetch" || fail "$name: fetch failed: $(cat "$tmp/$name.err")"
    [ "$signal" = STOP ] && kill -CONT "$pid_b" "$pid_c"
    local got dups count
    got=$(grep '^checksum=' "$tmp/$name.out")
    [ "$got" = "$reference" ] || fail "$name: checksum $got != single-server $reference"
    dups=$(awk '{ print $2 }' "$tmp/keys_$name" | sort | uniq -d | wc -l)
    count=$(awk '{ print $2 }' "$tmp/keys_$name" | sort -u | wc -l)
    [ "$dups" -eq 0 ] && [ "$count" -eq 80 ] || fail "$name: $count unique keys, $dups repeated"
    if grep -q 'stream_failures=[1-9]' "$tmp/$name.out"; then
      echo "ok: $name of two of three servers mid-epoch: $got, every key once (run $attempt)"
      return 0
    fi
  done
  fail "$name: no failure was seen in 5 runs"
}
disrupt KILL sigkill
cp "$tmp/keys_sigkill" "$tmp/keys3"
disrupt STOP sigstop
start_server "$tmp/gnu/*.tar" "$tmp/c.log"; c="127.0.0.1:$port"

# 3. Stop after 3 batches, resume from the printed cursor.
"$fetch_bin" --servers="$a,$c" "${common[@]}" --stop_after_batches=3 \
  --keys_out="$tmp/part1" >"$tmp/part1.out" || fail "partial fetch failed"
cursor=$(tail -n 1 "$tmp/part1.out" | sed -n 's/^cursor=//p')
[ -n "$cursor" ] || fail "no cursor printed"
"$fetch_bin" --servers="$a,$c" "${common[@]}" --resume_from="$cursor" \
  --keys_out="$tmp/part2" >"$tmp/part2.out" || fail "resume failed"
cat "$tmp/part1" "$tmp/part2" | awk '{ print $2 }' > "$tmp/resumed"
awk '{ print $2 }' "$tmp/keys3" > "$tmp/uninterrupted"
cmp -s "$tmp/resumed" "$tmp/uninterrupted" || fail "resumed key order differs"
echo "ok: resume from $cursor continues with exactly the remaining samples"

# 4. Local mode: stoker_fetch starts its own server (found next to it in the
# runfiles, ../server/stoker_server) and gets the reference epoch, through
# shared memory; nothing of it is left afterwards.
"$fetch_bin" --local_shards="$tmp/gnu/*.tar" --local_cores=1 "${common[@]}" \
  --server_binary="$server_bin" >"$tmp/local.out" 2>"$tmp/local.err" \
  || fail "local fetch failed: $(cat "$tmp/local.err")"
grep -q "^$reference\$" "$tmp/local.out" \
  || fail "local mode checksum differs: $(grep checksum "$tmp/local.out")"
grep -q 'shared_memory_batches=10$' "$tmp/local.out" \
  || fail "local batches did not use shared memory: $(grep stages "$tmp/local.out")"
# (stoker_fetch reaps its server before it exits; only it has --control_fd.)
for cmdline in /proc/[0-9]*/cmdline; do
  c="$(tr '\0' ' ' <"$cmdline" 2>/dev/null || true)"
  if [[ "$c" == *"--control_fd"* && "$c" == *"=train=$tmp/gnu/"* ]]; then
    fail "a local server outlived stoker_fetch: $c"
  fi
done
echo "ok: local mode gives the same epoch through shared memory and stops its server"

# A server on this host reached over its Unix socket (e.g. a sidecar's) with
# --shared_memory: the same epoch, through shared memory; a stale socket file
# is replaced, and the file goes with the server.
# (Socket paths are short: a folder of its own in /tmp, removed on exit.)
sockdir="$(mktemp -d /tmp/stoker-sock.XXXXXX)"
trap 'cleanup; rm -rf "$sockdir"' EXIT
sock="$sockdir/s"
python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" \
  "$sock"  # bound and closed: a stale socket file
launch_server "$tmp/unix.log" --port=0 --threads=1 \
  --dataset="train=$tmp/gnu/*.tar" --unix_socket="$sock" --shared_memory
unix_pid=$pid
"$fetch_bin" --servers="unix:$sock" "${common[@]}" >"$tmp/unix.out" \
  || fail "fetch over the Unix socket failed"
grep -q "^$reference\$" "$tmp/unix.out" || fail "Unix socket checksum differs"
grep -q 'shared_memory_batches=10$' "$tmp/unix.out" \
  || fail "no shared memory over the Unix socket: $(grep stages "$tmp/unix.out")"
if "$server_bin" --port=0 --dataset="train=$tmp/gnu/*.tar" \
    --unix_socket="$sock" >"$tmp/unix2.err" 2>&1; then
  fail "a second server took a Unix socket in use"
fi
grep -q "already listens" "$tmp/unix2.err" \
  || fail "unclear error: $(cat "$tmp/unix2.err")"
kill -TERM "$unix_pid"
wait "$unix_pid" || true
[ ! -e "$sock" ] || fail "the Unix socket file outlived its server"
echo "ok: a server's Unix socket with --shared_memory gives the same epoch"

# 5. Bad flags: clear error, exit 2.
if "$fetch_bin" --servers="nohost" --dataset=train 2>"$tmp/bad.err"; then
  fail "bad --servers accepted"
fi
if "$fetch_bin" --local_shards="$tmp/none-*.tar" --dataset=train \
    --server_binary="$server_bin" 2>"$tmp/bad3.err"; then
  fail "local shards matching nothing accepted"
fi
grep -q "no .tar shards match" "$tmp/bad3.err" \
  || fail "unclear error: $(cat "$tmp/bad3.err")"
grep -q "host:port" "$tmp/bad.err" || fail "unclear error: $(cat "$tmp/bad.err")"
if "$server_bin" --dataset=nonsense 2>"$tmp/bad2.err"; then
  fail "bad --dataset accepted"
fi
grep -q "NAME=GLOB" "$tmp/bad2.err" || fail "unclear error: $(cat "$tmp/bad2.err")"
if "$server_bin" --port=0 --dataset="train=$tmp/gnu/*.tar" --control_fd=77 \
    2>"$tmp/bad4.err"; then
  fail "a closed --control_fd accepted"
fi
grep -q "not an open file descriptor" "$tmp/bad4.err" \
  || fail "unclear error: $(cat "$tmp/bad4.err")"
echo "ok: bad flags get clear errors"
help=$("$server_bin" --help 2>&1 || true)  # absl's --help exits 1
grep -q -- "--dataset (NAME=GLOB" <<<"$help" \
  || fail "stoker_server --help does not list its flags: $help"
help=$("$fetch_bin" --help 2>&1 || true)
grep -q -- "--servers (" <<<"$help" \
  || fail "stoker_fetch --help does not list its flags: $help"
echo "ok: --help lists the flags"
echo "1 passed, 0 failed"
