#!/usr/bin/env bash
# Installs the Debian packages Stoker needs to build, test and run its
# benchmarks, if any are missing. Safe to run repeatedly; does nothing when
# everything is there. Used by tools/demo.sh and tools/test.sh.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java build-essential pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libopencv-dev
  libgtest-dev libgmock-dev libturbojpeg0-dev libjpeg62-turbo-dev
  python3-dev pybind11-dev python3-numpy python3-torch python3-torchvision
  python3-pil tar
  # The thread-safety build and the fuzzers (tools/test.sh).
  clang libclang-rt-14-dev
  # The TLS tests make their certificates with it.
  openssl
  # The benchmark's raw TCP reference (bench/run_benchmark.py).
  iperf3
  # Camera photographs for the real-photo benchmark corpus
  # (tools/photo_shards.py).
  mate-backgrounds
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

if [ ! -d /usr/share/bazel/rules/java ]; then
  echo "setup: bazel-rules-java is installed but /usr/share/bazel/rules/java is missing" >&2
  exit 1
fi
