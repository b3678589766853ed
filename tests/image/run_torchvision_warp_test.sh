#!/usr/bin/env bash
# Runs torchvision_warp_test.py with /usr/bin/python3 (Debian's torch,
# torchvision and PIL; the first python3 on PATH may lack them) against the
# warp_tool from the runfiles.
set -euo pipefail
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-stoker}"
exec /usr/bin/python3 -B "$root/tests/image/torchvision_warp_test.py" \
  "$root/tests/image/warp_tool"
