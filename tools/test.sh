#!/usr/bin/env bash
# Installs what is missing, then runs the whole CPU test suite: C++ unit and
# end-to-end tests, process tests and the Python tests. GPU tests (Bazel tag
# "gpu") run too with --gpu, on a machine with a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1

filters="-gpu"
if [ "${1:-}" = "--gpu" ]; then filters=""; fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
bazel test //... --test_tag_filters="$filters" --build_tag_filters="$filters" \
  2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# One closing line for people and CI: test targets (each a whole test
# binary or script) passed and failed.
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY)' "$log")
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi  # build error
echo "targets: $passed passed, $failed failed"
exit "$status"
