#!/usr/bin/env bash
# stoker_diagnose: the caching ladder (stoker.diagnose) from the command line,
# with a synthetic consumer. `bazel run //client/python:stoker_diagnose --
# --servers=HOST:PORT --dataset=NAME [--step_ms=MS] [--chart=ladder.svg]`,
# or run this script from bazel-bin. Uses /usr/bin/python3 (it has torch).
set -euo pipefail
here="${BASH_SOURCE[0]}"
if [ -n "${RUNFILES_DIR:-}" ]; then
  root="$RUNFILES_DIR/${TEST_WORKSPACE:-stoker}"
elif [ -d "$here.runfiles/stoker" ]; then
  root="$here.runfiles/stoker"
else
  root="$(cd "$(dirname "$here")/../.." && pwd)"
fi
export PYTHONPATH="$root/client/python${PYTHONPATH:+:$PYTHONPATH}"
# Through main(), not `-m stoker.diagnose`: the package imports the module
# first, and runpy then warns that it was already imported.
exec /usr/bin/python3 -B -c 'import sys
from stoker.diagnose import main
sys.exit(main(sys.argv[1:]))' "$@"
