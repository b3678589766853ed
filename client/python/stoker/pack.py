"""stoker.pack: WebDataset shards from an ImageFolder tree, a .csv / .jsonl
file list or other shards, by the stoker_pack binary (server/pack.h says
what it writes and how it resumes).

    import stoker
    glob = stoker.pack("/data/train", "/data/train-shards",
                       shard_bytes="1G", shuffle_seed=0)
    loader = stoker.Loader(shards=glob, dataset="train", ...)

From a shell: python3 -m stoker.pack --input=/data/train --out_dir=...
(the binary's flags).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from stoker._stoker import InvalidArgumentError, StokerError


def _binary() -> str:
    """stoker_pack beside this package (a wheel's stoker/bin, or the Bazel
    layout bazel-bin/client/python/stoker -> bazel-bin/server), then
    $STOKER_PACK, then PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.environ.get("STOKER_PACK", ""),
                      os.path.join(here, "bin", "stoker_pack"),
                      os.path.join(here, "..", "..", "..", "server",
                                   "stoker_pack")):
        if candidate and os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    found = shutil.which("stoker_pack")
    if found is None:
        raise StokerError("stoker_pack not found: install it beside the "
                          "stoker package, put it on PATH or set "
                          "STOKER_PACK")
    return found


def pack(input: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
         prefix: str = "shard", shard_bytes: int | str = "1G",
         shard_samples: int = 0, shuffle_seed: int | None = None,
         threads: int = 4) -> str:
    """Packs `input` into `out_dir`/`prefix`-NNNNNN.tar (with .idx
    sidecars) and returns the shards' glob for Loader(shards=...) or
    stoker_server --dataset. Shards are closed before `shard_bytes` (a
    number or "512M", "1G") or at `shard_samples`; `shuffle_seed` shuffles
    the samples first. Finished shards of an interrupted run are kept.
    Raises InvalidArgumentError for bad arguments, StokerError with the
    tool's message otherwise."""
    if shuffle_seed is not None and (not isinstance(shuffle_seed, int)
                                     or shuffle_seed < 0):
        raise InvalidArgumentError(
            f"shuffle_seed must be an int >= 0 or None, got {shuffle_seed!r}")
    args = [_binary(), f"--input={os.fspath(input)}",
            f"--out_dir={os.fspath(out_dir)}", f"--prefix={prefix}",
            f"--shard_bytes={shard_bytes}", f"--shard_samples={shard_samples}",
            f"--shuffle_seed={-1 if shuffle_seed is None else shuffle_seed}",
            f"--threads={threads}"]
    result = subprocess.run(args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        message = result.stderr.strip().splitlines()
        text = message[-1] if message else f"exit status {result.returncode}"
        error = InvalidArgumentError if result.returncode == 2 else StokerError
        raise error(text.removeprefix("stoker_pack: "))
    return result.stdout.strip().splitlines()[-1]


def main() -> int:
    return subprocess.call([_binary(), *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
