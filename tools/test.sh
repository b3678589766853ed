#!/usr/bin/env bash
# Installs what is missing, then runs the whole CPU test suite (C++ and
# Python). GPU tests (Bazel tag "gpu") run only with --gpu on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

filters="-gpu"
if [ "${1:-}" = "--gpu" ]; then filters=""; fi

bazel test //... --test_tag_filters="$filters" --build_tag_filters="$filters"
