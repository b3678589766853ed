#!/usr/bin/env bash
# Installs what is missing, then runs the whole CPU test suite: C++ unit and
# end-to-end tests, process tests and the Python tests, and builds the tree
# with clang's thread-safety analysis as errors (--config=clang, in an output
# base of its own so both caches stay warm). Then it builds the libFuzzer
# targets of tests/fuzz with ASan and UBSan (--config=fuzz, same output base)
# and runs each for STOKER_FUZZ_SECONDS seconds (default 60; 0 skips them).
# Last, it builds the documentation site with `mkdocs build --strict` and
# type-checks the Python package with `mypy --strict`.
# GPU tests (Bazel tag "gpu") run too with --gpu, on a machine with a GPU.
# The image test (tag "image") runs where buildah or docker is installed
# (tools/setup.sh installs buildah).
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1

filters="-gpu"
if [ "${1:-}" = "--gpu" ]; then filters=""; fi
# The image test (tag "image") needs buildah or a running docker engine.
test_filters="$filters"
if ! command -v buildah >/dev/null && ! docker info >/dev/null 2>&1; then
  echo "no buildah or docker: skipping the image test (tag image)"
  test_filters="${filters:+$filters,}-image"
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
bazel test //... --test_tag_filters="$test_filters" --build_tag_filters="$filters" \
  2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# Every package but the bazel-* convenience links (which `//...` would walk
# from a second output base).
packages=(//bench/... //client/... //common/... //image/... //plugins/...
          //proto/... //server/...
          //tests/... //tools/...)
clang_base="${STOKER_CLANG_OUTPUT_BASE:-$HOME/.cache/stoker-clang}"
echo "clang thread-safety build (output base $clang_base)"
bazel --output_base="$clang_base" build --config=clang --symlink_prefix=/ \
  --build_tag_filters="$filters" "${packages[@]}"
clang_status=$?
if [ "$clang_status" -ne 0 ]; then
  echo "clang thread-safety build: FAILED"
  status=1
else
  echo "clang thread-safety build: passed"
fi

# Fuzzing, bounded: each fuzzer runs alone (one process, one input at a time)
# on a scratch copy of its seed corpus, so the checkout stays clean. A crash,
# leak, sanitizer report, failed property check, timeout or memory blow-up
# fails the suite; its scratch directory (log and reproducer) is kept.
fuzz_seconds="${STOKER_FUZZ_SECONDS:-60}"
fuzzers=(shard_reader shard_index_file image transform_spec data_service video)
if [ "$fuzz_seconds" -gt 0 ]; then
  fuzz_targets=()
  for f in "${fuzzers[@]}"; do fuzz_targets+=("//tests/fuzz:${f}_fuzzer"); done
  echo "fuzzing: building ${fuzz_targets[*]} (--config=fuzz)"
  if ! bazel --output_base="$clang_base" build --config=fuzz \
      --symlink_prefix=/ "${fuzz_targets[@]}"; then
    echo "fuzzing: build FAILED"
    status=1
  else
    fuzz_bin="$(bazel --output_base="$clang_base" info --config=fuzz \
      bazel-bin 2>/dev/null)/tests/fuzz"
    fuzz_dir="$(mktemp -d -t stoker-fuzz.XXXXXX)"
    fuzz_failed=0
    for f in "${fuzzers[@]}"; do
      work="$fuzz_dir/$f"
      mkdir -p "$work/corpus"
      cp tests/fuzz/corpus/"$f"/* "$work/corpus/"
      ( cd "$work" &&
        UBSAN_OPTIONS=print_stacktrace=1 "$fuzz_bin/${f}_fuzzer" \
          -max_total_time="$fuzz_seconds" -timeout=30 -rss_limit_mb=2048 \
          -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$work/" \
          corpus >"$work/log" 2>&1 )
      rc=$?
      execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
      rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log")
      if [ "$rc" -ne 0 ]; then
        tail -n 60 "$work/log"
        echo "fuzzing $f: FAILED (exit $rc); log and reproducer in $work"
        fuzz_failed=1
      else
        echo "fuzzing $f: passed, ${execs:-?} runs, ${rate:-?}/s in ${fuzz_seconds}s"
      fi
    done
    if [ "$fuzz_failed" -ne 0 ]; then
      status=1
    else
      rm -rf "$fuzz_dir"
    fi
  fi
fi
bazel --output_base="$clang_base" shutdown

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken
# link, a missing page or a page left out of the nav.
docs_dir="$(mktemp -d)"
if mkdocs build --strict --site-dir "$docs_dir"; then
  echo "docs (mkdocs build --strict): passed"
else
  echo "docs (mkdocs build --strict): FAILED"
  status=1
fi
rm -rf "$docs_dir"

# The Python package's types: Debian's mypy (/usr/bin/mypy runs under
# /usr/bin/python3, which sees python3-torch and python3-numpy), its cache
# outside the tree.
if /usr/bin/mypy --strict \
    --cache-dir="${STOKER_MYPY_CACHE:-$HOME/.cache/stoker-mypy}" \
    client/python/stoker; then
  echo "types (mypy --strict client/python/stoker): passed"
else
  echo "types (mypy --strict client/python/stoker): FAILED"
  status=1
fi

# One closing line for people and CI: test targets (each a whole test
# binary or script) passed and failed.
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY)' "$log")
# A build error, the clang build's, or a fuzzer's failure.
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "targets: $passed passed, $failed failed"
exit "$status"
