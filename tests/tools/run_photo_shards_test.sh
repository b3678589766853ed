#!/usr/bin/env bash
set -euo pipefail
exec /usr/bin/python3 -B \
  "${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}/tests/tools/photo_shards_test.py"
