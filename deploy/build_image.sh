#!/usr/bin/env bash
# Builds the server image (deploy/Dockerfile) from the wheel's programs and
# libraries, with docker where its engine runs, else buildah (Debian's, with
# --isolation=chroot, which works in unprivileged sandboxes where container
# runtimes cannot set rlimits).
#
#   deploy/build_image.sh                    # stoker-server:latest
#   deploy/build_image.sh --tag=REGISTRY/stoker/stoker-server:TAG
#   deploy/build_image.sh --wheel=dist/stoker-...whl   # skip building it
#   deploy/build_image.sh --base=IMAGE       # another base than bookworm-slim
#
# Without --wheel it runs tools/build_wheel.sh first. The base is
# debian:bookworm-slim when the tool has it or can pull it; else, where no
# registry can be reached, it is made from Debian's packages with mmdebstrap
# (minbase, ca-certificates, no documentation) and kept as
# localhost/stoker-base:bookworm for later builds. Prints the image's name,
# size and build time.
set -euo pipefail
cd "$(dirname "$0")/.."

tag=stoker-server:latest
wheel=""
base=""
for arg in "$@"; do
  case "$arg" in
    --tag=*) tag="${arg#--tag=}" ;;
    --wheel=*) wheel="${arg#--wheel=}" ;;
    --base=*) base="${arg#--base=}" ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "build_image.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
start=$(date +%s)

if docker info >/dev/null 2>&1; then
  tool=docker
elif command -v buildah >/dev/null; then
  tool=buildah
else
  echo "build_image.sh: needs docker (with a running engine) or buildah" \
       "(Debian: apt-get install buildah mmdebstrap)" >&2
  exit 1
fi

if [ -z "$wheel" ]; then
  wheel="$(tools/build_wheel.sh | tail -n 1)"
fi
[ -f "$wheel" ] || { echo "build_image.sh: no wheel $wheel" >&2; exit 1; }

has_image() {
  if [ "$tool" = docker ]; then docker image inspect "$1" >/dev/null 2>&1
  else buildah inspect --type image "$1" >/dev/null 2>&1; fi
}

# The base: given, present, pulled, or made here.
if [ -z "$base" ]; then
  local_base=localhost/stoker-base:bookworm
  if has_image debian:bookworm-slim; then
    base=debian:bookworm-slim
  elif has_image "$local_base"; then
    base="$local_base"
  elif timeout 60 "$tool" pull -q debian:bookworm-slim >/dev/null 2>&1; then
    base=debian:bookworm-slim
  else
    command -v mmdebstrap >/dev/null || {
      echo "build_image.sh: no registry answered and mmdebstrap is missing" \
           "(Debian: apt-get install mmdebstrap), or pass --base=IMAGE" >&2
      exit 1
    }
    echo "build_image.sh: no registry; making $local_base with mmdebstrap" >&2
    rootfs="$(mktemp -d)/rootfs.tar"
    mmdebstrap --quiet --variant=minbase --include=ca-certificates \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      bookworm "$rootfs" >&2
    if [ "$tool" = docker ]; then
      docker import "$rootfs" "$local_base" >/dev/null
    else
      ctr="$(buildah from scratch)"
      buildah add "$ctr" "$rootfs" / >/dev/null
      buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd /bin/bash "$ctr"
      buildah commit -q "$ctr" "$local_base" >/dev/null
      buildah rm "$ctr" >/dev/null
    fi
    rm -rf "$(dirname "$rootfs")"
    base="$local_base"
  fi
fi

# The build context: the wheel's programs and libraries, nothing else.
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
/usr/bin/python3 - "$wheel" "$context" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if info.filename.startswith(("stoker/bin/", "stoker.libs/")):
            path = z.extract(info, out)
            os.chmod(path, (info.external_attr >> 16) & 0o777 or 0o644)
PY
cp deploy/Dockerfile "$context/Dockerfile"

if [ "$tool" = docker ]; then
  docker build -q --build-arg BASE="$base" -t "$tag" "$context" >/dev/null
  size="$(( $(docker image inspect --format '{{.Size}}' "$tag") / 1000000 )) MB"
else
  buildah bud -q --isolation=chroot --build-arg BASE="$base" -t "$tag" \
    "$context" >/dev/null
  size="$(buildah images --json "$tag" |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["size"])')"
fi
echo "build_image.sh: $tag from $base by $tool: $size," \
     "$(( $(date +%s) - start )) s" >&2
echo "$tag"
