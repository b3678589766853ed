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
import subprocess
import sys

from stoker import _binaries
from stoker._stoker import InvalidArgumentError, StokerError


def _binary() -> str:
    """$STOKER_PACK, stoker_pack beside this package, or PATH."""
    return _binaries.find("stoker_pack", env="STOKER_PACK")


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
