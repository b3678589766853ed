#!/bin/bash
# bazel run //bench:run -- [run_benchmark.py flags]
# Runs bench/run_benchmark.py with Debian's python (torch, torchvision) on the
# binaries in this target's runfiles. Run directly from a checkout, it uses
# the checkout's bazel-bin instead.
set -euo pipefail
runfiles="${RUNFILES_DIR:-${BASH_SOURCE[0]}.runfiles}/stoker"
if [[ -f "${runfiles}/bench/run_benchmark.py" ]]; then
  exec /usr/bin/python3 "${runfiles}/bench/run_benchmark.py" \
    --bazel_bin="${runfiles}" "$@"
fi
exec /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/run_benchmark.py" "$@"
