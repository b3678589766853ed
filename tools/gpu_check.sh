#!/usr/bin/env bash
# Runs every GPU check from a bundle made by tools/gpu_bundle.sh, on a GPU
# machine without Bazel (run from the checkout's root):
#
#   BUNDLE/gpu_check.sh [--out=DIR] [--python=PY] [--models=toy,resnet50]
#
#   1. the gpu-tagged C++ tests (convert_gpu_test, device_loader_gpu_test,
#      batch_ops_gpu_test, host_replay_gpu_test, output_pool_gpu_test);
#   2. device_bench: pinned copy vs plain cudaMemcpy, the conversion kernel
#      vs the device's memory bandwidth, the synthetic consumer's wait;
#   3. the Python GPU tests (tests/python/loader_gpu_test.py, local servers
#      and shared memory on CUDA included) and the CPU
#      ones (loader_test.py) with PY's torch;
#   4. bench/gpu_train.py for each model on a real-photo corpus written by
#      tools/photo_shards.py from the bundle's photos.
# Logs go to DIR (default $OUT, else ./gpu-check); the summary to stdout.
# Exits non-zero if a test fails.
set -uo pipefail
bundle="$(cd "$(dirname "$0")" && pwd)"
root="$(pwd)"
out="${OUT:-$root/gpu-check}"
python=python3
models=toy,resnet50
for arg in "$@"; do
  case "$arg" in
    --out=*) out="${arg#--out=}" ;;
    --python=*) python="${arg#--python=}" ;;
    --models=*) models="${arg#--models=}" ;;
    *) echo "gpu_check.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
if [ ! -f "$root/bench/gpu_train.py" ]; then
  echo "gpu_check.sh: run it from the checkout's root" >&2
  exit 2
fi
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Binaries see every bundled library; the Python process only those the
# extension needs (torch brings its own).
mkdir -p "$work/pkg" "$work/pylib" "$work/bin" "$work/tmp"
tar -xJf "$bundle/bundle.tar.xz" -C "$work/pkg"
while read -r name; do
  [ -e "$work/pkg/lib/$name" ] &&
    ln -sf "$work/pkg/lib/$name" "$work/pylib/$name"
done < "$bundle/pylibs.txt"
for b in "$work"/pkg/bin/*; do
  printf '#!/bin/bash\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$work/pkg/lib" \
    "$b" > "$work/bin/$(basename "$b")"
  chmod +x "$work/bin/$(basename "$b")"
done
export STOKER_SERVER_BIN="$work/bin/stoker_server"
# What stoker.Loader's local servers run (the bundle has no Bazel layout).
export STOKER_SERVER="$STOKER_SERVER_BIN"
export STOKER_FETCH_BIN="$work/bin/stoker_fetch"
export STOKER_SHARDS_BIN="$work/bin/make_sample_shards"
export TEST_TMPDIR="$work/tmp"
cat > "$work/bin/py" <<EOF
#!/bin/bash
LD_LIBRARY_PATH="$work/pylib" PYTHONUNBUFFERED=1 \\
  PYTHONPATH="$work/pkg/py:$root/tests/python" exec "$python" -B "\$@"
EOF
chmod +x "$work/bin/py"
py="$work/bin/py"

# The corpus is written while the tests run.
"$python" tools/photo_shards.py --photos="$bundle/photos" \
  --out_dir="$work/photos" --num_shards=16 --samples_per_shard=500 \
  > "$out/corpus.txt" 2>&1 &
corpus=$!

failed=0
check() {  # name, log, command...
  local name="$1" log="$2"
  shift 2
  "$@" > "$log" 2>&1
  local rc=$?
  echo "$name: $([ $rc -eq 0 ] && echo passed || echo "FAILED (rc=$rc)")"
  [ $rc -eq 0 ] || { failed=1; tail -n 30 "$log"; }
}
check convert_gpu_test "$out/convert_gpu_test.txt" \
  timeout 300 "$work/bin/convert_gpu_test"
check device_loader_gpu_test "$out/device_loader_gpu_test.txt" \
  timeout 300 "$work/bin/device_loader_gpu_test"
check batch_ops_gpu_test "$out/batch_ops_gpu_test.txt" \
  timeout 300 "$work/bin/batch_ops_gpu_test"
check host_replay_gpu_test "$out/host_replay_gpu_test.txt" \
  timeout 300 "$work/bin/host_replay_gpu_test"
check output_pool_gpu_test "$out/output_pool_gpu_test.txt" \
  timeout 300 "$work/bin/output_pool_gpu_test"
timeout 300 "$work/bin/device_bench" > "$out/device_bench.txt" 2>&1
timeout 300 "$work/bin/device_bench" --dtype=bfloat16 --layout=NHWC \
  --consumer_us=5000 2>&1 | tail -n 3 >> "$out/device_bench.txt"
cat "$out/device_bench.txt"
check loader_gpu_test.py "$out/loader_gpu_test.txt" \
  timeout 300 "$py" tests/python/loader_gpu_test.py
check loader_test.py "$out/loader_test.txt" \
  timeout 300 "$py" tests/python/loader_test.py
check local_test.py "$out/local_test.txt" \
  timeout 300 "$py" tests/python/local_test.py

wait "$corpus" || { echo "corpus failed:"; cat "$out/corpus.txt"; exit 1; }
for model in ${models//,/ }; do
  timeout 600 "$py" bench/gpu_train.py --data_dir="$work/photos" \
    --server_bin="$STOKER_SERVER_BIN" --model="$model" \
    > "$out/gpu_train_$model.txt" 2>&1
  echo "gpu_train --model=$model (rc=$?):"
  sed -n '/^device:/,$p' "$out/gpu_train_$model.txt"
  grep "stoker stats" "$out/gpu_train_$model.txt"
done
exit "$failed"
