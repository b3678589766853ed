#!/usr/bin/env bash
# Installs what is missing, then runs the whole CPU test suite: C++ unit and
# end-to-end tests, process tests and the Python tests, and builds the tree
# with clang's thread-safety analysis as errors (--config=clang, in an output
# base of its own so both caches stay warm). GPU tests (Bazel tag "gpu") run
# too with --gpu, on a machine with a GPU.
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

# Every package but the bazel-* convenience links (which `//...` would walk
# from a second output base).
packages=(//bench/... //client/... //common/... //proto/... //server/...
          //tests/... //tools/...)
clang_base="${STOKER_CLANG_OUTPUT_BASE:-$HOME/.cache/stoker-clang}"
echo "clang thread-safety build (output base $clang_base)"
bazel --output_base="$clang_base" build --config=clang --symlink_prefix=/ \
  --build_tag_filters="$filters" "${packages[@]}"
clang_status=$?
bazel --output_base="$clang_base" shutdown
if [ "$clang_status" -ne 0 ]; then
  echo "clang thread-safety build: FAILED"
  status=1
else
  echo "clang thread-safety build: passed"
fi

# One closing line for people and CI: test targets (each a whole test
# binary or script) passed and failed.
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY)' "$log")
# A build error, or the clang build's.
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "targets: $passed passed, $failed failed"
exit "$status"
