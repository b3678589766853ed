"""The `stoker` command (the wheel's console script; also `python -m stoker`).

    stoker serve --dataset=train=/data/train-*.tar     # stoker_server
    stoker fetch --servers=localhost:50051 ...         # stoker_fetch
    stoker index SHARD.tar...                          # stoker_index
    stoker pack --input=DIR --out_dir=DIR              # stoker_pack
    stoker samples --out_dir=DIR                       # make_sample_shards
    stoker diagnose --servers=... --dataset=...        # the caching ladder
    stoker version

Every command but diagnose and version runs the program of the same role
that ships with the package (stoker/bin in a wheel; see _binaries.py) with
the arguments as given, in place of this process: its exit status, signals
and --help are the program's own.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence

from stoker import _binaries
from stoker._stoker import StokerError

# command: (program, what it does). Order is the help's.
_PROGRAMS = {
    "serve": ("stoker_server", "run a server (the gRPC daemon)"),
    "fetch": ("stoker_fetch", "stream epochs from servers on the CPU and "
              "print throughput and checksums"),
    "index": ("stoker_index", "write the sidecar indexes of shards "
              "(for object storage)"),
    "pack": ("stoker_pack", "write WebDataset shards from an ImageFolder, "
             "a file list or other shards"),
    "samples": ("make_sample_shards", "write synthetic sample shards"),
}
_PYTHON_COMMANDS = {
    "diagnose": "find the input pipeline's bottleneck (the caching ladder; "
                "needs torch)",
    "version": "print the versions and where the programs are",
}


def _usage() -> str:
    lines = ["usage: stoker COMMAND [ARGS...]", "",
             "Stoker: decoded, augmented batches from CPU servers to "
             "training jobs.", "", "commands:"]
    for command, (program, text) in _PROGRAMS.items():
        lines.append(f"  {command:<9} {text} ({program})")
    for command, text in _PYTHON_COMMANDS.items():
        lines.append(f"  {command:<9} {text}")
    lines += ["", "`stoker COMMAND --help` describes a command's flags."]
    return "\n".join(lines)


def _version() -> int:
    import stoker

    print(f"stoker {stoker.__version__}")
    print(f"package: {os.path.dirname(os.path.abspath(stoker.__file__))}")
    print(f"python: {platform.python_version()} ({sys.executable})")
    for program, _ in _PROGRAMS.values():
        found = _binaries.beside_package(program)
        print(f"{program}: {found or 'not shipped with the package'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # `stoker version | head -1`: the reader has gone; Python would
        # otherwise complain again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _run(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command in ("version", "--version"):
        return _version()
    if command == "diagnose":
        try:
            from stoker.diagnose import main as diagnose_main
        except ImportError as e:
            print(f"stoker diagnose needs PyTorch in this Python "
                  f"({sys.executable}): {e}", file=sys.stderr)
            return 1
        return diagnose_main(rest, prog="stoker diagnose")
    if command not in _PROGRAMS:
        print(f"stoker: unknown command {command!r}\n\n{_usage()}",
              file=sys.stderr)
        return 2
    try:
        program = _binaries.find(_PROGRAMS[command][0])
    except StokerError as e:
        print(f"stoker {command}: {e}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, [os.path.basename(program), *rest])


if __name__ == "__main__":
    sys.exit(main())
