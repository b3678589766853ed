#!/usr/bin/env bash
# stoker_server --plugin: a plugin that cannot be used (missing file, no
# entry point, another ABI version, an op name taken) is a clear start-up
# error with exit status 2; good plugins (the flag repeated) load, are
# logged with their ops, and the server serves.
set -euo pipefail

. "${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}/tests/testing/processes.sh" server_plugin

random_mask="$root/plugins/random_mask/random_mask.so"
test_plugins="$root/tests/plugins"

"$shards_bin" --out_dir="$tmp/shards" --num_shards=1 --samples_per_shard=4 \
  >/dev/null
dataset="--dataset=train=$tmp/shards/*.tar"

# refused MESSAGE PLUGIN_FLAGS...: the server exits 2 before serving and
# says MESSAGE.
refused() { server_refuses "$1" --port=0 "$dataset" "${@:2}"; }

refused "stoker_server: --plugin: cannot load plugin '/nonexistent.so': No such file or directory" \
  --plugin=/nonexistent.so
refused "not a Stoker plugin: it exports no stoker_plugin_init" \
  --plugin="$test_plugins/no_entry.so"
refused "plugin '$test_plugins/abi_999.so' was built for Stoker plugin ABI 999, this server speaks 1" \
  --plugin="$test_plugins/abi_999.so"
refused "cannot load plugin '$test_plugins/collision.so': op 'RandomCrop' has the name of a built-in op" \
  --plugin="$test_plugins/collision.so"
# A bad plugin after a good one still stops the start.
refused "op 'RandomMask' is already provided by plugin random_mask ($random_mask)" \
  --plugin="$random_mask" --plugin "$random_mask"

# Good plugins, the flag given twice (both spellings): both load.
launch_server "$tmp/good.log" --port=0 "$dataset" --plugin="$random_mask" \
  --plugin "$test_plugins/test_ops.so"
grep -qF "plugin random_mask from $random_mask: ops RandomMask" "$tmp/good.log" \
  || fail "random_mask not logged: $(cat "$tmp/good.log")"
grep -qF "plugin test_ops from $test_plugins/test_ops.so: ops FailingOp, AddConst, MaskToRed" \
  "$tmp/good.log" || fail "test_ops not logged: $(cat "$tmp/good.log")"
kill -TERM "$pid"
wait "$pid" || fail "server with plugins exited with $? on SIGTERM"
echo "ok: good plugins load and the server serves"
