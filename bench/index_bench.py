#!/usr/bin/python3
"""A server's memory per sample and start-up time on web-scale datasets of
tiny samples, before and after the compact index, in one run.

    bazel build -c opt //server:stoker_server //server:stoker_index
    /usr/bin/python3 bench/index_bench.py --data_dir=/data/tiny \\
        --samples=1000000,10000000 --bin=$(bazel info -c opt bazel-bin) \\
        --baseline_bin=OTHER_BAZEL_BIN

For each N in --samples, it writes N tiny samples (tools/tiny_shards.py:
a 668-byte JPEG and a label each, --per_shard samples per shard) under
--data_dir, writes their sidecar indexes with this build's stoker_index
(timed), then starts each server on them and measures, once it listens:
the time from exec to listening and the process's memory from
/proc/PID/status, less the same server's with a one-shard dataset:
RssAnon (the server's own memory: what the index costs it) and RssFile
(mapped file pages: the sample table's, reclaimable page cache).
Servers: this build with the sidecars; this build without them (the
tar headers read at start); the --baseline_bin build (the version before,
which always reads the tar headers). Every start is on warm page cache (a
first untimed start reads the files in). Then this build serves one
batch of 256 samples (cropped to 8x8) per 10^4 samples through stoker_fetch and its
memory is read again (what touching the records costs).
Not a test: the figures depend on the machine.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import tiny_shards  # noqa: E402


def proc_status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                fields[key] = int(value.split()[0]) * 1024
    return fields


def start(binary, glob_pattern, extra=()):
    """(seconds to listen, memory, process) of a server on `glob_pattern`."""
    from stoker.launch import ServerProcess
    argv = [binary, "--port=0", "--host=127.0.0.1", "--log_level=warn",
            "--threads=2", f"--dataset=tiny={glob_pattern}"] + list(extra)
    t0 = time.monotonic()
    server = ServerProcess(argv, timeout_s=600)
    seconds = time.monotonic() - t0
    return seconds, proc_status(server.process.pid), server


def measure(binary, glob_pattern, base_glob, extra=()):
    """Start-up seconds and memory above the one-shard server's."""
    _, base, server = start(binary, base_glob, extra)
    server.stop()
    seconds, memory, server = start(binary, glob_pattern, extra)
    return seconds, {k: memory[k] - base.get(k, 0) for k in memory}, server


def line(what, n, seconds, memory):
    print(f"  {what:<44} start {seconds:7.2f} s   own memory "
          f"{memory['RssAnon'] / n:7.1f} B/sample "
          f"({memory['RssAnon'] / 2**20:8.1f} MB)   mapped "
          f"{memory['RssFile'] / n:6.1f} B/sample", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--samples", default="1000000,10000000")
    parser.add_argument("--per_shard", type=int, default=10000)
    parser.add_argument("--bin", required=True,
                        help="bazel-bin of this build (-c opt)")
    parser.add_argument("--baseline_bin", default="",
                        help="bazel-bin of the build to compare with")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.bin, "client/python"))
    server = os.path.join(args.bin, "server/stoker_server")
    index = os.path.join(args.bin, "server/stoker_index")
    fetch = os.path.join(args.bin, "client/stoker_fetch")
    baseline = (os.path.join(args.baseline_bin, "server/stoker_server")
                if args.baseline_bin else "")

    base_dir = os.path.join(args.data_dir, "one")
    base_glob = tiny_shards.write(base_dir, 1, 1)
    print(f"index_bench: {os.cpu_count()} CPUs; memory is RssAnon / RssFile "
          "above a one-sample server's", flush=True)
    for n in [int(x) for x in args.samples.split(",")]:
        shards = max(1, n // args.per_shard)
        folder = os.path.join(args.data_dir, f"n{n}")
        t0 = time.monotonic()
        pattern = tiny_shards.write(folder, n, shards)
        written = time.monotonic() - t0
        tars = sorted(p for p in os.listdir(folder) if p.endswith(".tar"))
        size = sum(os.path.getsize(os.path.join(folder, p)) for p in tars)
        print(f"N={n}: {shards} shards, {size / 2**30:.1f} GiB "
              f"(written or checked in {written:.0f} s)", flush=True)
        t0 = time.monotonic()
        subprocess.run([index, f"--threads={os.cpu_count()}"] +
                       [os.path.join(folder, p) for p in tars], check=True,
                       stdout=subprocess.DEVNULL)
        idx = sum(os.path.getsize(os.path.join(folder, p + ".idx"))
                  for p in tars)
        print(f"  stoker_index: {time.monotonic() - t0:.1f} s, sidecars "
              f"{idx / n:.1f} B/sample", flush=True)
        # Warm the page cache (shards' headers and sidecars).
        _, _, warm = start(server, pattern)
        warm.stop()

        seconds, memory, new = measure(server, pattern, base_glob)
        line("this build, sidecars", n, seconds, memory)
        batches = max(1, n // 10000)
        subprocess.run([fetch, f"--servers={new.address}", "--dataset=tiny",
                        "--batch_size=256", f"--stop_after_batches={batches}",
                        "--transform=CenterCrop(8)"], check=True,
                       stdout=subprocess.DEVNULL)
        served = proc_status(new.process.pid)
        new.stop()
        print(f"  {'  after serving ' + str(batches * 256) + ' samples':<44}"
              f" RssAnon {served['RssAnon'] / 2**20:.1f} MB, RssFile "
              f"{served['RssFile'] / 2**20:.1f} MB (process totals)",
              flush=True)

        hidden = tempfile.mkdtemp(prefix="index-bench-")
        try:
            # Without sidecars: move them aside.
            for p in tars:
                shutil.move(os.path.join(folder, p + ".idx"), hidden)
            seconds, memory, s = measure(server, pattern, base_glob)
            s.stop()
            line("this build, tar headers", n, seconds, memory)
            if baseline:
                seconds, memory, s = measure(baseline, pattern, base_glob)
                s.stop()
                line("baseline build (tar headers)", n, seconds, memory)
        finally:
            for p in tars:
                shutil.move(os.path.join(hidden, p + ".idx"), folder)
            os.rmdir(hidden)


if __name__ == "__main__":
    main()
