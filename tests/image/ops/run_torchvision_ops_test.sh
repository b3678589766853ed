#!/usr/bin/env bash
# tests/image/ops/torchvision_ops_test.py with Debian's interpreter, which
# has torchvision 0.14, Pillow and numpy.
set -euo pipefail
exec /usr/bin/python3 -B \
  "${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}/tests/image/ops/torchvision_ops_test.py"
