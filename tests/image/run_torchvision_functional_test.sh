#!/usr/bin/env bash
# tests/image/torchvision_functional_test.py with Debian's interpreter (the
# one with torch, torchvision and PIL), against the functional_tool binary.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}"
exec /usr/bin/python3 -B "$root/tests/image/torchvision_functional_test.py" \
  "$root/tests/image/functional_tool"
