#!/usr/bin/env bash
# Runs tests/python/$1 with /usr/bin/python3 (the interpreter that has torch;
# the first python3 on PATH may not) against the stoker package built by
# //client/python:stoker, with the server and CLI binaries from the runfiles.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}"
export PYTHONPATH="$root/client/python:$root/tests/python:$root/tests/testing"
export STOKER_SERVER_BIN="$root/server/stoker_server"
export STOKER_FETCH_BIN="$root/client/stoker_fetch"
export STOKER_SHARDS_BIN="$root/tools/make_sample_shards"
export STOKER_INDEX_BIN="$root/server/stoker_index"
export STOKER_PACK_BIN="$root/server/stoker_pack"
export STOKER_DIAGNOSE_BIN="$root/client/python/stoker_diagnose"
exec /usr/bin/python3 -B "$root/tests/python/$1"
