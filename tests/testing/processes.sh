# Shared by the process tests (tests/*_test.sh), which source it with the
# name of their scratch directory:  . "$(...)/tests/testing/processes.sh" NAME
# Sets root, server_bin, fetch_bin, shards_bin and tmp (emptied); kills every
# server in $pids on exit; defines fail, read_port, launch_server,
# wait_for_lines and server_refuses.

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

# read_port PORT_FILE [NAME]: the NAME= line (default port) of a
# --port_file that stoker_server wrote, or nothing.
read_port() {
  sed -n "s/^${2:-port}=\([0-9]*\)\$/\1/p" "$1" 2>/dev/null
}

# launch_server LOG ARGS...: starts stoker_server ARGS --port_file=LOG.ports
# with its output in LOG and waits for the port file (written once every
# port listens) or for the server to exit, at most 60 s; sets $pid (also
# appended to $pids) and $port.
launch_server() {
  local log="$1"
  shift
  : >"$log"
  rm -f "$log.ports"
  "$server_bin" "$@" --port_file="$log.ports" >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  port=""
  for _ in $(seq 1 1200); do
    if [ -f "$log.ports" ]; then
      port="$(read_port "$log.ports")"
      [ -n "$port" ] && return 0
      break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  cat "$log" >&2
  fail "server did not start: $*"
}

# wait_for_lines FILE N PID [SECONDS]: waits until FILE has at least N lines
# (e.g. stoker_fetch's --keys_out, written as batches arrive), while PID
# runs, at most SECONDS (default 60). Fails otherwise.
wait_for_lines() {
  local file="$1" want="$2" watched="$3" limit="${4:-60}"
  local i
  for i in $(seq 1 $((limit * 20))); do
    if [ -f "$file" ] && [ "$(wc -l <"$file")" -ge "$want" ]; then
      return 0
    fi
    kill -0 "$watched" 2>/dev/null || fail "process $watched ended before $file had $want lines"
    sleep 0.05
  done
  fail "$file did not reach $want lines in ${limit} s"
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
