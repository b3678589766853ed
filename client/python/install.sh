#!/usr/bin/env bash
# Builds the `stoker` Python package (//client/python:stoker) and installs it
# for a Python interpreter, in one command:
#
#   client/python/install.sh                 # into /usr/bin/python3's site-packages
#   client/python/install.sh DIR             # into DIR (e.g. a venv's site-packages)
#   client/python/install.sh --python=PY     # for interpreter PY (any CPython 3)
#   client/python/install.sh --develop [DIR] # a stoker.pth pointing at bazel-bin:
#                                            # later `bazel build`s take effect
#
# Without DIR the package goes to the interpreter's purelib directory
# (sysconfig) when it is writable, else to its user site-packages. The
# extension module is built against the interpreter's own headers (its
# sysconfig include directory; Debian: python3-dev), and the interpreter
# needs torch (python3-torch).
set -euo pipefail
cd "$(dirname "$0")/../.."

python=/usr/bin/python3
develop=0
dest=""
for arg in "$@"; do
  case "$arg" in
    --python=*) python="${arg#--python=}" ;;
    --develop) develop=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "install.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) [ -z "$dest" ] || { echo "install.sh: more than one DIR" >&2; exit 2; }
       dest="$arg" ;;
  esac
done

include="$(client/python/python_include.sh --python="$python")"
bazel build //client/python:stoker --define=PYTHON_INCLUDE="$include"
bin="$(bazel info bazel-bin)/client/python"

if [ -z "$dest" ]; then
  dest="$("$python" - <<'EOF'
import os, site, sysconfig
purelib = sysconfig.get_paths()["purelib"]
probe = purelib
while not os.path.exists(probe):
    probe = os.path.dirname(probe)
print(purelib if os.access(probe, os.W_OK) else site.getusersitepackages())
EOF
)"
fi
mkdir -p "$dest"

rm -rf "$dest/stoker" "$dest/stoker.pth"
if ((develop)); then
  echo "$bin" > "$dest/stoker.pth"
  echo "install.sh: wrote $dest/stoker.pth -> $bin"
else
  mkdir "$dest/stoker"
  cp "$bin"/stoker/*.py "$bin"/stoker/*.pyi "$bin/stoker/py.typed" \
    "$bin/stoker/_stoker.so" "$dest/stoker/"
  chmod 644 "$dest"/stoker/*.py "$dest"/stoker/*.pyi "$dest/stoker/py.typed"
  chmod 755 "$dest/stoker/_stoker.so"
  echo "install.sh: installed $dest/stoker"
fi

# Check from a neutral directory that the interpreter finds what we installed
# (addsitedir also reads stoker.pth).
(cd / && "$python" -c '
import site, sys
dest = sys.argv[1]
if dest not in sys.path:
    print(f"install.sh: note: {dest} is not on this interpreter\x27s sys.path; "
          "add it to PYTHONPATH")
site.addsitedir(dest)
import stoker
print("install.sh: import stoker OK:", stoker.__file__)
' "$dest")
