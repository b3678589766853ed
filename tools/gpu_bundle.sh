#!/usr/bin/env bash
# Packs everything the GPU checks need into one folder, for a GPU machine
# that has a CUDA driver, a CUDA PyTorch and Python, but not Bazel, Debian's
# libraries or this checkout's build (e.g. a lent cloud GPU box):
#
#   tools/gpu_bundle.sh [--out=DIR] [--python_include=DIR]
#   # copy DIR and the checkout to the GPU machine, then there:
#   DIR/gpu_check.sh            # (a copy of tools/gpu_check.sh)
#
# DIR (default .dev, ignored by git through .git/info/exclude) gets:
#   bundle.tar.xz  (xz: the whole folder stays under a lent machine's
#             64 MiB transfer limit)
#     bin/    the gpu-tagged C++ tests, device_bench, stoker_server,
#             stoker_fetch, make_sample_shards (debug info stripped)
#     lib/    every shared library they and the extension load, except
#             glibc and libstdc++/libgcc (the GPU machine's own are newer)
#     py/stoker  the Python package, its extension built against the
#             CPython headers in --python_include (default: this
#             machine's 3.11); the GPU machine's interpreter must be that
#             CPython minor version
#   pylibs.txt  the libraries the extension needs (gpu_check.sh gives the
#             Python process only these)
#   photos/   the camera photos tools/photo_shards.py cuts the corpus from
#   gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

out=.dev
python_include=/usr/include/python3.11
for arg in "$@"; do
  case "$arg" in
    --out=*) out="${arg#--out=}" ;;
    --python_include=*) python_include="${arg#--python_include=}" ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_bundle.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
if [ ! -f "$python_include/Python.h" ]; then
  echo "gpu_bundle.sh: no Python.h in $python_include" >&2
  exit 1
fi
photos=/usr/share/backgrounds/mate/nature
if [ ! -d "$photos" ]; then
  echo "gpu_bundle.sh: $photos is missing (tools/setup.sh installs" \
       "mate-backgrounds)" >&2
  exit 1
fi

tests=(//tests/client:convert_gpu_test //tests/client:device_loader_gpu_test
       //tests/client:batch_ops_gpu_test //tests/client:host_replay_gpu_test
       //tests/client:output_pool_gpu_test)
bins=(//client:device_bench //server:stoker_server //client:stoker_fetch
      //tools:make_sample_shards)
bazel build "${tests[@]}" "${bins[@]}"
# Bazel only accepts system include directories for copts; link others in.
include="$(client/python/python_include.sh "$python_include")"
bazel build //client/python:stoker --define=PYTHON_INCLUDE="$include"
bin="$(bazel info bazel-bin)"

rm -rf "$out"
mkdir -p "$out/photos"
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/bin" "$staging/py/stoker" "$staging/lib"
for t in "${tests[@]}" "${bins[@]}"; do
  path="${t#//}"
  cp "$bin/${path/://}" "$staging/bin/"
done
cp "$bin"/client/python/stoker/*.py "$bin/client/python/stoker/_stoker.so" \
  "$staging/py/stoker/"
chmod u+w "$staging"/bin/* "$staging"/py/stoker/*
strip --strip-debug "$staging"/bin/* "$staging/py/stoker/_stoker.so"
cp "$photos"/*.jpg "$out/photos/"
cp tools/gpu_check.sh "$out/"

ldd "$staging/py/stoker/_stoker.so" | awk '/=>/ {print $1}' > "$out/pylibs.txt"
ldd "$staging"/bin/* "$staging/py/stoker/_stoker.so" 2>/dev/null |
  awk '/=>/ {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so|ld-linux' |
  xargs -I{} cp -L {} "$staging/lib/"
tar -C "$staging" -cf - bin lib py | xz -T2 -6 > "$out/bundle.tar.xz"
echo "gpu_bundle.sh: $(du -sh "$out" | cut -f1) in $out"
