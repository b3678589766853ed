#!/usr/bin/env bash
# Builds Stoker's wheel: the stoker package, its extension, the programs
# (stoker_server, stoker_fetch, stoker_index, stoker_pack,
# make_sample_shards) and every shared library they need beyond the base
# system, in one file that pip installs without Bazel or -dev packages.
#
#   tools/build_wheel.sh                      # for /usr/bin/python3, into dist/
#   tools/build_wheel.sh --python=PY          # for interpreter PY (CPython 3.9+
#                                             # with its headers)
#   tools/build_wheel.sh --out_dir=DIR
#   pip install dist/stoker-*.whl             # then: stoker --help
#
# The extension is built against PY's own headers (one wheel per
# interpreter: pybind11 needs the full C API); tools/wheel.py bundles the
# libraries (see its docstring). Prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."

python=/usr/bin/python3
out_dir=dist
for arg in "$@"; do
  case "$arg" in
    --python=*) python="${arg#--python=}" ;;
    --out_dir=*) out_dir="${arg#--out_dir=}" ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "build_wheel.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

tools/setup.sh
include="$(client/python/python_include.sh --python="$python")"

# The programs the package ships (client/python/stoker/_binaries.py PROGRAMS).
programs=(server/stoker_server server/stoker_index server/stoker_pack
          client/stoker_fetch tools/make_sample_shards)
targets=(//client/python:stoker)
for p in "${programs[@]}"; do targets+=("//${p%/*}:${p##*/}"); done
bazel build -c opt --define=PYTHON_INCLUDE="$include" "${targets[@]}"
bin="$(bazel info -c opt bazel-bin)"

args=(--package_dir="$bin/client/python/stoker" --python="$python"
      --out_dir="$out_dir")
for p in "${programs[@]}"; do args+=(--program="$bin/$p"); done
/usr/bin/python3 tools/wheel.py "${args[@]}"
