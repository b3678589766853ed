#!/usr/bin/env bash
# Installs the Debian packages Stoker needs to build, test and run its
# benchmarks, and the npm package s3rver, if any are missing. Safe to run
# repeatedly; does nothing when everything is there. Used by tools/demo.sh and tools/test.sh.
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
  # Object-storage reads: libcurl for the server; nginx (HTTP(S) range
  # reads) and node with npm (for s3rver, below) are the real servers of the
  # tests and the benchmark (tests/testing/object_stores.py).
  nginx-light libnginx-mod-http-echo libcurl4-openssl-dev nodejs npm
  # Metrics: prometheus-cpp for the server's /metrics endpoint; the real
  # Prometheus server and promtool of the metrics test
  # (tests/testing/prometheus_server.py). The tests start their own
  # Prometheus; the packaged service is not used (nor started without systemd).
  prometheus prometheus-cpp-dev
  # The documentation site, built with --strict by tools/test.sh, and the
  # type check of the Python package (mypy --strict).
  mkdocs mypy
  # The wheel (tools/build_wheel.sh bundles libraries with patchelf) and its
  # test, which installs it into fresh virtual environments.
  patchelf python3-venv
  # The server image (deploy/build_image.sh, tests/python/image_test.py):
  # buildah builds it, mmdebstrap makes its base where no registry answers.
  buildah mmdebstrap
  # Video fields: FFmpeg's libraries for the server (image/video_decoder.h);
  # the ffmpeg CLI makes the test and benchmark videos, and PyAV
  # (python3-av) is the tests' reference decoder and the benchmark's peer.
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev ffmpeg
  python3-av
  # The cluster in a box (tests/testing/netcluster.py): namespaces, links
  # and qdiscs (iproute2), the DNS server of the headless-Service tests.
  iproute2 dnsmasq-base
)

# Packages that count as installed when their command is there: a nodejs
# from NodeSource bundles npm and conflicts with Debian's npm package.
declare -A SATISFIED_BY_COMMAND=([nodejs]=node [npm]=npm)

missing=()
for p in "${PACKAGES[@]}"; do
  if [ -n "${SATISFIED_BY_COMMAND[$p]:-}" ] &&
    command -v "${SATISFIED_BY_COMMAND[$p]}" >/dev/null; then
    continue
  fi
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

# s3rver, the S3 server of the object-store tests, from npm (Debian has no
# package): into $STOKER_NPM_DIR, where tests/testing/object_stores.py looks.
S3RVER_VERSION=3.7.1
NPM_DIR="${STOKER_NPM_DIR:-$HOME/.cache/stoker-npm}"
if [ ! -x "$NPM_DIR/node_modules/.bin/s3rver" ] ||
  ! grep -q "\"version\": \"$S3RVER_VERSION\"" \
    "$NPM_DIR/node_modules/s3rver/package.json" 2>/dev/null; then
  echo "setup: installing s3rver@$S3RVER_VERSION into $NPM_DIR" >&2
  mkdir -p "$NPM_DIR"
  npm install --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error \
    "s3rver@$S3RVER_VERSION" >/dev/null
fi
