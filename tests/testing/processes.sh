# Shared by the process tests (tests/*_test.sh), which source it with the
# name of their scratch directory:  . "$(...)/tests/testing/processes.sh" NAME
# Sets root, server_bin, fetch_bin, shards_bin and tmp (emptied); kills every
# server in $pids on exit; defines fail, launch_server and server_refuses.

root="${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}"
server_bin="$root/server/stoker_server"
fetch_bin="$root/client/stoker_fetch"
shards_bin="$root/tools/make_sample_shards"
tmp="${TEST_TMPDIR}/$1"
rm -rf "$tmp"; mkdir -p "$tmp"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# launch_server LOG ARGS...: starts stoker_server ARGS with its output in LOG
# and waits for it to listen; sets $pid (also appended to $pids) and $port.
launch_server() {
  local log="$1"
  shift
  : >"$log"
  "$server_bin" "$@" >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  port=""
  for _ in $(seq 1 400); do
    port="$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$log")"
    [ -n "$port" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  cat "$log" >&2
  fail "server did not start: $*"
}

# server_refuses MESSAGE ARGS...: stoker_server ARGS exits with status 2
# before listening and says MESSAGE (on stderr or in its log).
server_refuses() {
  local message="$1"
  shift
  local status=0
  "$server_bin" "$@" >"$tmp/refused.out" 2>"$tmp/refused.err" || status=$?
  [ "$status" -eq 2 ] \
    || fail "exit status $status (want 2) for $*: $(cat "$tmp/refused.err")"
  grep -qF -- "$message" "$tmp/refused.err" "$tmp/refused.out" \
    || fail "no '$message' for $*: $(cat "$tmp/refused.err" "$tmp/refused.out")"
  if grep -q "listening on port" "$tmp/refused.out" "$tmp/refused.err"; then
    fail "the server listened despite $*"
  fi
  echo "ok: refused $*"
}
