#!/usr/bin/python3
"""Python ops on Stoker's servers (stoker_server --python_ops), measured on
real photographs, beside a PyTorch DataLoader running the same Python
function on the same cores, in one run.

    bazel build -c opt //server:stoker_server //client:stoker_fetch \
        //client/python:stoker //bench:python_op_call_bench
    /usr/bin/python3 bench/python_ops_benchmark.py \
        --bazel_bin=$(bazel info -c opt bazel-bin) --data_dir=/tmp/photos

(tools/photo_shards.py makes the photo shards.) Everything runs on the
first --cores CPUs (this process pins itself; children inherit it).

  0. call      bench/python_op_call_bench: Python op calls of a do-nothing
               op on 224x224 images in isolation (one thread, one worker),
               one sample per request and 16, CPU per sample of both
               sides.
  1. overhead  one server with a do-nothing Python op (`Noop`, a module
               written here) and the example GridMask
               (plugins/python/augment_ops.py); stoker_fetch streams
               --rounds alternating runs of the base pipeline
               RandomResizedCrop(224)|RandomHorizontalFlip() with and
               without `|Noop()` at its end, and of the base pipeline then
               ColorJitter(brightness=0.2) with and without `Noop()` before
               the ColorJitter (both run by the servers for chunks of 16
               samples: server/batched_tail.h), and
               RandomResizedCrop(224)|Noop()|RandomHorizontalFlip() (one
               request per sample: a geometric op follows, which then
               resamples on its own) against the base pipeline. CPU per image = the server's and its
               Python workers' utime+stime (from /proc while they run)
               plus stoker_fetch's, over the images delivered; the
               overhead is the median difference, against the goal of
               0.05 ms.
  2. GridMask  the base pipeline then GridMask() on Stoker, against a
               DataLoader (PIL decode, torchvision RandomResizedCrop(224)
               and RandomHorizontalFlip, the same grid_mask function on the
               numpy array, one Generator per worker; num_workers=cores,
               persistent) over the same shards, batch size and epochs.
               images/s and CPU ms per image for both.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_benchmark as rb  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE_OPS = os.path.join(ROOT, "plugins/python/augment_ops.py")
BASE = "RandomResizedCrop(224)|RandomHorizontalFlip()"
JITTER = "ColorJitter(brightness=0.2)"
BEFORE_FLIP = "RandomResizedCrop(224)|Noop()|RandomHorizontalFlip()"
GOAL_OVERHEAD_MS = 0.05
NOOP_MODULE = '''
def noop(image, rng):
    return image

STOKER_OPS = [{"fn": noop, "name": "Noop"}]
'''


def tree_cpu_seconds(pid):
    """utime + stime of `pid` and its live children (the Python workers)."""
    return rb.proc_cpu_seconds(pid) + sum(
        rb.proc_cpu_seconds(c) for c in rb.child_pids(pid))


def timed_fetch(args, bazel_bin, server, transform, epochs):
    """One stoker_fetch run of `epochs` epochs; its images/s and CPU ms per
    image (server tree + client)."""
    args.transform = transform
    server_before = tree_cpu_seconds(server.process.pid)
    client_before = rb.rusage_seconds(resource.RUSAGE_CHILDREN)
    stdout, summary = rb.run_fetch(args, bazel_bin, server.port, 1, epochs)
    client = rb.rusage_seconds(resource.RUSAGE_CHILDREN) - client_before
    server_cpu = tree_cpu_seconds(server.process.pid) - server_before
    images = int(summary["images"])
    skipped = sum(int(rb.parse_kv(line).get("skipped", 0))
                  for line in stdout.splitlines() if line.startswith("epoch="))
    if skipped:
        raise RuntimeError(f"{skipped} samples were skipped")
    return {
        "images": images,
        "images_per_s": float(summary["images_per_s"]),
        "cpu_ms": 1e3 * (server_cpu + client) / images,
        "server_ms": 1e3 * server_cpu / images,
        "client_ms": 1e3 * client / images,
    }


class GridMaskTransform:
    """The peer's per-sample transform: torchvision's crop and flip on the
    PIL image, then the example module's grid_mask on its numpy array with
    this worker's Generator, as a CHW uint8 tensor (what PILToTensor
    gives)."""

    def __init__(self):
        import torchvision.transforms as T
        self.geometry = T.Compose([T.RandomResizedCrop(224),
                                   T.RandomHorizontalFlip()])
        self.rng = None

    def __call__(self, image):
        import numpy as np
        import torch
        sys.path.insert(0, os.path.dirname(EXAMPLE_OPS))
        from augment_ops import grid_mask
        if self.rng is None:  # one per worker process, after the fork
            self.rng = np.random.default_rng()
        pixels = np.array(self.geometry(image), dtype=np.uint8)
        pixels = grid_mask(pixels, self.rng)
        return torch.from_numpy(pixels).permute(2, 0, 1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bazel_bin", default="")
    p.add_argument("--data_dir", required=True,
                   help="Folder of photo shards (tools/photo_shards.py).")
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2,
                   help="Epochs per timed run.")
    p.add_argument("--rounds", type=int, default=3,
                   help="Alternating runs of each pipeline in step 1.")
    p.add_argument("--python", default=sys.executable,
                   help="The servers' --python (it needs numpy).")
    p.add_argument("--skip_peer", action="store_true")
    args = p.parse_args()
    os.sched_setaffinity(0, set(range(args.cores)))
    bazel_bin = rb.find_bazel_bin(args.bazel_bin)
    shards = rb.list_shards(args.data_dir)
    if not shards:
        sys.exit(f"no .tar shards in {args.data_dir}")
    args.server_flags = ""
    args.fetch_flags = ""
    args.transform = BASE

    call = None
    call_bench = os.path.join(bazel_bin, "bench/python_op_call_bench")
    if os.access(call_bench, os.X_OK):
        call = subprocess.run([call_bench, f"--python={args.python}"],
                              capture_output=True, text=True,
                              check=True).stdout.strip()
        rb.log(f"call: {call}")
    else:
        rb.log(f"{call_bench} is missing (bazel build -c opt "
               "//bench:python_op_call_bench); step 0 skipped")

    folder = tempfile.mkdtemp(prefix="stoker-pyops-bench-")
    noop = os.path.join(folder, "bench_noop.py")
    with open(noop, "w") as f:
        f.write(NOOP_MODULE)
    cmd = rb.server_command(args, bazel_bin, args.data_dir) + [
        f"--python_ops={noop}", f"--python_ops={EXAMPLE_OPS}",
        f"--python={args.python}"]
    server = rb.Server(cmd)
    runs = {name: [] for name in ("base", "noop", "base_mid", "noop_mid",
                                  "noop_geometry", "grid")}
    try:
        rb.run_fetch(args, bazel_bin, server.port, 0, 1)  # warm-up
        for r in range(args.rounds):
            for name, transform in [
                    ("base", BASE), ("noop", BASE + "|Noop()"),
                    ("base_mid", BASE + "|" + JITTER),
                    ("noop_mid", BASE + "|Noop()|" + JITTER),
                    ("noop_geometry", BEFORE_FLIP)]:
                result = timed_fetch(args, bazel_bin, server, transform,
                                     args.epochs)
                rb.log(f"round {r} {name}: {result}")
                runs[name].append(result)
        runs["grid"].append(timed_fetch(args, bazel_bin, server,
                                        BASE + "|GridMask()", args.epochs))
        rb.log(f"gridmask: {runs['grid'][0]}")
    finally:
        server.stop()

    peer = None
    if not args.skip_peer:
        peer = rb.bench_peer(args, args.data_dir, args.epochs,
                             transform=GridMaskTransform())

    def median(name, key):
        return statistics.median(r[key] for r in runs[name])

    images = runs["base"][0]["images"] // args.epochs
    print(f"\nPython ops on {len(shards)} photo shards ({images} images), "
          f"{args.cores} cores, batch {args.batch_size}, {args.epochs} "
          f"epochs per run, median of {args.rounds} rounds")
    print(f"{'pipeline':<60}{'images/s':>10}{'CPU ms/img':>12}"
          f"{'server':>9}{'client':>9}")
    for name, label in [("base", BASE), ("noop", BASE + "|Noop()"),
                        ("base_mid", BASE + "|" + JITTER),
                        ("noop_mid", BASE + "|Noop()|" + JITTER),
                        ("noop_geometry", BEFORE_FLIP),
                        ("grid", BASE + "|GridMask()")]:
        print(f"{'Stoker ' + label:<60}{median(name, 'images_per_s'):>10.0f}"
              f"{median(name, 'cpu_ms'):>12.3f}"
              f"{median(name, 'server_ms'):>9.3f}"
              f"{median(name, 'client_ms'):>9.3f}")
    if peer is not None:
        print(f"{'DataLoader: ' + BASE + ' + grid_mask':<60}"
              f"{peer['images_per_s']:>10.0f}"
              f"{1e3 * peer['cpu_per_image']:>12.3f}")
    if call is not None:
        print("\nCalls in isolation (bench/python_op_call_bench):")
        for line in call.splitlines():
            print("  " + line)
    for label, noop, base in [
            ("at the end", "noop", "base"),
            ("before ColorJitter", "noop_mid", "base_mid"),
            ("before the flip (per sample, plus the flip's own resample)",
             "noop_geometry", "base")]:
        deltas = [n["cpu_ms"] - b["cpu_ms"]
                  for n, b in zip(runs[noop], runs[base])]
        server = statistics.median(
            n["server_ms"] - b["server_ms"]
            for n, b in zip(runs[noop], runs[base]))
        overhead = statistics.median(deltas)
        print(f"Noop overhead {label}: {overhead:.3f} ms CPU per image "
              f"(rounds: {', '.join(f'{d:.3f}' for d in deltas)}; the "
              f"server's and its workers' alone {server:.3f}); goal <= "
              f"{GOAL_OVERHEAD_MS} ms: "
              f"{'PASS' if overhead <= GOAL_OVERHEAD_MS else 'MISS'}")
    if peer is not None:
        grid = runs["grid"][0]
        print(f"GridMask: Stoker {grid['images_per_s']:.0f} images/s at "
              f"{grid['cpu_ms']:.3f} ms/img, DataLoader "
              f"{peer['images_per_s']:.0f} images/s at "
              f"{1e3 * peer['cpu_per_image']:.3f} ms/img: "
              f"{grid['images_per_s'] / peer['images_per_s']:.2f}x the "
              f"images/s, {1e3 * peer['cpu_per_image'] / grid['cpu_ms']:.2f}x"
              " less CPU per image")


if __name__ == "__main__":
    main()
