"""Where the stoker package finds its programs (stoker_server, stoker_fetch,
stoker_index, stoker_pack, make_sample_shards).

In order: the environment variable a caller names (e.g. $STOKER_PACK), the
package's own bin/ (where a wheel puts them: stoker/bin/<name>), the Bazel
layout (bazel-bin/client/python/stoker/ is three levels below bazel-bin,
where the programs are built), then PATH.
"""

from __future__ import annotations

import os
import shutil

from stoker._stoker import StokerError

# The programs the package ships (a wheel's stoker/bin) and where Bazel
# builds each, relative to bazel-bin (tools/build_wheel.sh lists the same).
PROGRAMS = {
    "stoker_server": "server/stoker_server",
    "stoker_index": "server/stoker_index",
    "stoker_pack": "server/stoker_pack",
    "stoker_fetch": "client/stoker_fetch",
    "make_sample_shards": "tools/make_sample_shards",
}

_HERE = os.path.dirname(os.path.abspath(__file__))


def beside_package(name: str) -> str | None:
    """The program shipped with this package (a wheel's stoker/bin, or the
    Bazel build next to it), or None."""
    candidates = [os.path.join(_HERE, "bin", name)]
    if name in PROGRAMS:
        candidates.append(os.path.join(_HERE, "..", "..", "..",
                                       PROGRAMS[name]))
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    return None


def find(name: str, env: str = "") -> str:
    """$`env` when set, else the program beside the package, else PATH;
    raises StokerError when none is found."""
    if env and os.environ.get(env):
        return os.environ[env]
    found = beside_package(name) or shutil.which(name)
    if found is None:
        hint = f", or set ${env}" if env else ""
        raise StokerError(f"{name} not found: install the stoker wheel "
                          f"(it ships the programs), build it with Bazel or "
                          f"put it on PATH{hint}")
    return found
