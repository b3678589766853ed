#!/usr/bin/python3
"""Throughput of one dataset before and after a change, and of a mixture,
in one run, on real photographs.

    bazel build -c opt //server:stoker_server //client:stoker_fetch \\
        //client/python:stoker
    /usr/bin/python3 bench/plan_throughput.py --data_dir=/tmp/photos \\
        --bin=$(bazel info -c opt bazel-bin) --baseline_bin=OTHER_BAZEL_BIN

--data_dir holds photo shards (tools/photo_shards.py). --baseline_bin is the
bazel-bin of another build (e.g. a worktree of the commit before the
change); the two builds' stoker_server + stoker_fetch run alternately
(baseline, new, baseline, ...) for --rounds rounds on the same cores, so both
see the same machine state; each round is one warm-up epoch and --epochs
timed ones, and the medians are compared. Then the new build serves the same
shards as three datasets (the shards split 4 : 2 : 2) and reads them as a
mixture of weights 0.5 / 0.3 / 0.2, beside the same shards read as one
dataset: what mixing costs. Not a test: the figures depend on the machine.
"""

import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({result.returncode}):\n"
                 f"{result.stdout}{result.stderr}")
    return result.stdout


def images_per_s(out):
    rates = [float(m) for m in re.findall(r"^images=.* images_per_s=(\S+)$",
                                          out, re.M)]
    return rates[-1]


def fetch_rate(bazel_bin, args, dataset_flags, server_datasets):
    from stoker.launch import ServerProcess
    cmd = [os.path.join(bazel_bin, "server/stoker_server"), "--port=0",
           "--host=127.0.0.1", f"--threads={args.threads}",
           "--log_level=warn"] + server_datasets
    launched = ServerProcess(cmd, timeout_s=120)
    try:
        fetch = [os.path.join(bazel_bin, "client/stoker_fetch"),
                 f"--servers={launched.address}", f"--batch_size={args.batch_size}",
                 f"--transform={args.transform}", "--seed=1"] + dataset_flags
        run(fetch + ["--epochs=1"])  # warm-up
        out = run(fetch + [f"--epochs={args.epochs}", "--start_epoch=1"])
        return images_per_s(out), out
    finally:
        launched.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", required=True)
    p.add_argument("--bin", required=True, help="bazel-bin of the new build")
    p.add_argument("--baseline_bin", default="",
                   help="bazel-bin of the build to compare with")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--transform",
                   default="RandomResizedCrop(224)|RandomHorizontalFlip()")
    args = p.parse_args()
    sys.path.insert(0, os.path.join(args.bin, "client/python"))
    shards = sorted(glob.glob(os.path.join(args.data_dir, "*.tar")))
    if len(shards) < 3:
        sys.exit(f"need at least 3 shards in {args.data_dir}")
    whole = ["--dataset=photos=" + os.path.join(args.data_dir, "*.tar")]
    one = ["--dataset=photos"]
    print(f"plan_throughput: {len(shards)} shards, {args.threads} threads, "
          f"batch {args.batch_size}, {args.rounds} rounds x {args.epochs} "
          "epochs")
    new, base = [], []
    for r in range(args.rounds):
        if args.baseline_bin:
            rate, _ = fetch_rate(args.baseline_bin, args, one, whole)
            base.append(rate)
        rate, _ = fetch_rate(args.bin, args, one, whole)
        new.append(rate)
        print(f"  round {r}: baseline {base[-1] if base else float('nan'):.1f}"
              f"  new {new[-1]:.1f} images/s", flush=True)
    line = f"one dataset: new {statistics.median(new):.1f} images/s"
    if base:
        line += (f", baseline {statistics.median(base):.1f} images/s, "
                 f"ratio {statistics.median(new) / statistics.median(base):.3f}")
    print(line)
    # The same shards as a mixture of three datasets.
    q = len(shards) // 4
    parts = {"a": shards[:2 * q], "b": shards[2 * q:3 * q],
             "c": shards[3 * q:]}
    # Each part is a folder of links to its shards.
    links = tempfile.mkdtemp(prefix="plan-throughput-")
    lists = []
    for name, files in parts.items():
        os.makedirs(os.path.join(links, name))
        for f in files:
            os.symlink(f, os.path.join(links, name, os.path.basename(f)))
        lists.append(f"--dataset={name}=" + os.path.join(links, name, "*.tar"))
    mixed, single = [], []
    for r in range(args.rounds):
        rate, out = fetch_rate(
            args.bin, args,
            ["--mixture=a:0.5,b:0.3,c:0.2"], lists)
        mixed.append(rate)
        rate, _ = fetch_rate(args.bin, args, one, whole)
        single.append(rate)
        print(f"  round {r}: mixture {mixed[-1]:.1f}  one dataset "
              f"{single[-1]:.1f} images/s  "
              f"({re.search(r'^sources:.*$', out, re.M).group(0)})",
              flush=True)
    shutil.rmtree(links)
    print(f"mixture of 3: {statistics.median(mixed):.1f} images/s, one "
          f"dataset {statistics.median(single):.1f}, ratio "
          f"{statistics.median(mixed) / statistics.median(single):.3f}")


if __name__ == "__main__":
    main()
