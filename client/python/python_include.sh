#!/usr/bin/env bash
# Prints a CPython include directory in a form Bazel accepts for the stoker
# extension's --define=PYTHON_INCLUDE (client/python/BUILD): Bazel refuses
# include paths outside the toolchain's system directories, so a directory
# elsewhere (a pyenv or venv interpreter's) is linked in as
# /usr/local/include/stoker-<its name> (needs write access there).
#   client/python/python_include.sh DIR
#   client/python/python_include.sh --python=PY   # PY's own headers
set -euo pipefail
dir="${1:?usage: python_include.sh DIR | --python=PY}"
if [ "${dir#--python=}" != "$dir" ]; then
  python="${dir#--python=}"
  dir="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  if [ ! -f "$dir/Python.h" ]; then
    echo "python_include.sh: $python has no headers ($dir/Python.h is" \
         "missing; Debian: apt-get install python3-dev)" >&2
    exit 1
  fi
fi
dir="$(cd "$dir" && pwd -P)"
if [ ! -f "$dir/Python.h" ]; then
  echo "python_include.sh: no Python.h in $dir" >&2
  exit 1
fi
case "$dir" in
  /usr/include/*|/usr/local/include/*) echo "$dir"; exit 0 ;;
esac
link="/usr/local/include/stoker-$(basename "$dir")"
if ! ln -sfn "$dir" "$link" 2>/dev/null; then
  echo "python_include.sh: cannot create $link -> $dir (Bazel accepts" \
       "Python headers only under /usr/include or /usr/local/include);" \
       "create it as root" >&2
  exit 1
fi
echo "$link"
