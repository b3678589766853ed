#!/usr/bin/python3
"""Data as users have it: an ImageFolder tree served as it is against the
same images packed into shards, stoker_pack against tar, and the start-up
of a large ImageFolder with and without the index cache.

Run with Debian's interpreter (it has torch and torchvision), on real
photographs (tools/photo_shards.py writes shards of Debian's camera
photos; the tree is made from them):

    bazel build -c opt //server:stoker_server //server:stoker_pack \
        //client:stoker_fetch //client/python:stoker
    /usr/bin/python3 tools/photo_shards.py --out_dir=/tmp/photos
    /usr/bin/python3 bench/folder_benchmark.py --data_dir=/tmp/photos \
        --bazel_bin=$(bazel info -c opt bazel-bin)

Figures (each beside its peer, measured in the same run):
  1. epochs   stoker_fetch over the tree (--dataset=bench=TREE) and over
              the shards stoker_pack made of it, server and client on the
              same CPUs; warm (page cache full, after a warm-up epoch) and
              cold (every file's pages dropped with posix_fadvise before
              the epoch). Peer: PyTorch's DataLoader over
              torchvision.datasets.ImageFolder on the same tree and CPUs.
  2. pack     stoker_pack of the tree (read, write, verify, index) against
              tar -cf of the same tree: MB/s and files/s, warm and cold.
  3. startup  a stoker_server on an ImageFolder of --startup_files files
              (hard links to the photos, folders aged an hour as a real
              dataset's are): time until it listens, and the listing alone
              as its log says, first (no index cache) and again (index
              cache); peer: torchvision.datasets.ImageFolder(tree) in this
              process on the same tree. The dentry and inode caches stay
              warm (dropping them needs root): the cache's gain on a cold
              or network file system is not measured here.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_benchmark as rb  # noqa: E402  (helpers shared with it)

DATASET = rb.DATASET


def log(msg):
    rb.log(msg)


def make_tree(data_dir, tree):
    """The photo shards' images as tree/<class>/<key>.jpg; returns
    (files, bytes)."""
    if os.path.isdir(tree):
        shutil.rmtree(tree)
    files = size = 0
    for shard in rb.list_shards(data_dir):
        with tarfile.open(shard) as tar:
            members = {m.name: m for m in tar.getmembers()}
            for name, member in members.items():
                if not name.endswith(".jpg"):
                    continue
                key = name[:-4]
                label = int(tar.extractfile(members[key + ".cls"]).read())
                folder = os.path.join(tree, f"class{label:03d}")
                os.makedirs(folder, exist_ok=True)
                data = tar.extractfile(member).read()
                with open(os.path.join(folder,
                                       key.replace("/", "_") + ".jpg"),
                          "wb") as f:
                    f.write(data)
                files += 1
                size += len(data)
    return files, size


def evict(paths):
    """Drops the page cache of every file under `paths` (clean pages go at
    once; no privileges needed)."""
    for top in paths:
        if os.path.isfile(top):
            walk = [(os.path.dirname(top), [], [os.path.basename(top)])]
        else:
            walk = os.walk(top)
        for folder, _, names in walk:
            for name in names:
                fd = os.open(os.path.join(folder, name), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def epochs(args, bazel_bin, spec, evict_paths):
    """Warm-up epoch, one cold epoch (pages dropped), then warm epochs."""
    cmd = rb.server_command(args, bazel_bin, None, spec) + [
        "--index_cache_dir=none"]
    cpus = set(range(args.cores))
    server = rb.Server(cmd, cpus=sorted(cpus))
    os.sched_setaffinity(0, cpus)
    try:
        rb.run_fetch(args, bazel_bin, server.port, 0, 1)
        evict(evict_paths)
        _, cold = rb.run_fetch(args, bazel_bin, server.port, 1, 1)
        _, warm = rb.run_fetch(args, bazel_bin, server.port, 2, args.epochs)
    finally:
        server.stop()
        os.sched_setaffinity(0, set(range(os.cpu_count())))
    return {"cold": float(cold["images_per_s"]),
            "warm": float(warm["images_per_s"])}


def peer_epochs(args, tree, evict_paths):
    """DataLoader(ImageFolder(tree)) with the run's transform, one cold
    and args.epochs warm epochs, on the same CPUs."""
    import torch
    import torchvision
    import torchvision.transforms as T
    os.sched_setaffinity(0, set(range(args.cores)))
    try:
        transform = T.Compose([T.RandomResizedCrop(224),
                               T.RandomHorizontalFlip(), T.PILToTensor()])
        dataset = torchvision.datasets.ImageFolder(tree, transform)
        generator = torch.Generator()
        generator.manual_seed(args.seed)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=args.batch_size, shuffle=True,
            num_workers=args.cores, persistent_workers=True,
            worker_init_fn=rb.worker_init, generator=generator)

        def run():
            t0 = time.time()
            n = sum(images.shape[0] for images, _ in loader)
            return n / (time.time() - t0)

        run()  # warm-up: workers start, pages cached
        evict(evict_paths)
        cold = run()
        warm = sum(run() for _ in range(args.epochs)) / args.epochs
        del loader
        return {"cold": cold, "warm": warm}
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count())))


def timed(cmd):
    t0 = time.time()
    result = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.time() - t0
    if result.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed:\n{result.stdout}"
                           f"{result.stderr[-3000:]}")
    return seconds, result.stdout


def pack_vs_tar(args, bazel_bin, tree, work, files, size):
    out = {}
    for state in ("warm", "cold"):
        packed = os.path.join(work, f"packed-{state}")
        shutil.rmtree(packed, ignore_errors=True)
        tar_path = os.path.join(work, f"tree-{state}.tar")
        if state == "cold":
            evict([tree])
        seconds, stdout = timed([
            rb.binary(bazel_bin, "server/stoker_pack"), f"--input={tree}",
            f"--out_dir={packed}", "--shard_bytes=64M",
            f"--threads={args.cores}"])
        out[f"pack_{state}"] = seconds
        if state == "cold":
            evict([tree])
        seconds, _ = timed(["tar", "-cf", tar_path, "-C",
                            os.path.dirname(tree), os.path.basename(tree)])
        out[f"tar_{state}"] = seconds
        os.unlink(tar_path)
        out["glob"] = stdout.strip().splitlines()[-1]
        out["packed_dir"] = packed
    out["files"] = files
    out["bytes"] = size
    return out


def startup(args, bazel_bin, work):
    """Server start-up on an ImageFolder of args.startup_files hard links."""
    tree = os.path.join(work, "big")
    photos = []
    for folder, _, names in os.walk(os.path.join(work, "tree")):
        photos += [os.path.join(folder, n) for n in sorted(names)]
    per_class = 1000
    classes = (args.startup_files + per_class - 1) // per_class
    if not os.path.isdir(tree):
        made = 0
        for c in range(classes):
            folder = os.path.join(tree, f"n{c:08d}")
            os.makedirs(folder)
            for i in range(min(per_class, args.startup_files - made)):
                os.link(photos[made % len(photos)],
                        os.path.join(folder, f"img_{made:08d}.JPEG"))
                made += 1
    old = time.time() - 3600
    for folder, _, _ in os.walk(tree):
        os.utime(folder, (old, old))
    os.utime(tree, (old, old))
    cache = os.path.join(work, "index-cache")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    cmd = rb.server_command(args, bazel_bin, None, tree) + [
        f"--index_cache_dir={cache}"]
    result = {}
    for run in ("first", "cached"):
        t0 = time.time()
        server = rb.Server(cmd)
        result[run] = time.time() - t0
        text = server.log_text()
        server.stop()
        # The listing alone, as the server logs it ("... in 0.288 s: ").
        match = re.search(r"ImageFolder '[^']*'[^:]* in ([0-9.]+) s", text)
        result[run + "_listing"] = float(match.group(1)) if match else None
        if run == "cached" and "from the index cache" not in text:
            raise RuntimeError("the second start did not use the index "
                               "cache:\n" + text[-2000:])
    import torchvision
    t0 = time.time()
    dataset = torchvision.datasets.ImageFolder(tree)
    result["torchvision"] = time.time() - t0
    result["files"] = len(dataset.samples)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bazel_bin", default="")
    p.add_argument("--data_dir", required=True,
                   help="WebDataset shards of real photos "
                   "(tools/photo_shards.py).")
    p.add_argument("--work_dir", default="/tmp/stoker-folder-bench")
    p.add_argument("--cores", type=int, default=min(2, os.cpu_count()))
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=4,
                   help="Warm epochs timed in step 1.")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--transform", default=rb.DEFAULT_TRANSFORM)
    p.add_argument("--startup_files", type=int, default=100000)
    args = p.parse_args()
    args.server_flags = ""
    args.fetch_flags = ""
    bazel_bin = rb.find_bazel_bin(args.bazel_bin)
    if not rb.list_shards(args.data_dir):
        sys.exit(f"no .tar shards in {args.data_dir}")
    os.makedirs(args.work_dir, exist_ok=True)
    tree = os.path.join(args.work_dir, "tree")
    files, size = make_tree(args.data_dir, tree)
    log(f"tree: {files} photos, {size / 1e6:.1f} MB in {tree}")

    log("2. stoker_pack against tar")
    pk = pack_vs_tar(args, bazel_bin, tree, args.work_dir, files, size)
    log("1. epochs: tree against shards, warm and cold")
    folder = epochs(args, bazel_bin, tree, [tree])
    shards = epochs(args, bazel_bin, pk["glob"], [pk["packed_dir"]])
    peer = peer_epochs(args, tree, [tree])
    log(f"3. start-up of a {args.startup_files}-file ImageFolder")
    st = startup(args, bazel_bin, args.work_dir)

    print()
    print(f"ImageFolder of {files} real photos ({size / 1e6:.1f} MB), "
          f"{args.cores} CPUs, transform {args.transform!r}, batch "
          f"{args.batch_size}")
    print("1. epoch throughput (images/s)      warm      cold")
    print(f"   stoker, ImageFolder tree     {folder['warm']:9.0f} "
          f"{folder['cold']:9.0f}")
    print(f"   stoker, shards (stoker_pack) {shards['warm']:9.0f} "
          f"{shards['cold']:9.0f}")
    print(f"   DataLoader(ImageFolder)      {peer['warm']:9.0f} "
          f"{peer['cold']:9.0f}")
    print(f"   tree / shards                {folder['warm'] / shards['warm']:9.2f} "
          f"{folder['cold'] / shards['cold']:9.2f}")
    print("2. packing                 seconds   MB/s   files/s")
    for state in ("warm", "cold"):
        for name in ("pack", "tar"):
            s = pk[f"{name}_{state}"]
            label = "stoker_pack" if name == "pack" else "tar -cf"
            print(f"   {label:11s} {state:4s}   {s:9.2f} {size / 1e6 / s:6.0f} "
                  f"{files / s:9.0f}")
    print(f"3. start-up, ImageFolder of {st['files']} files (seconds; "
          "listing alone as the server logs it)")
    print(f"   stoker_server, no index cache   {st['first']:7.2f} "
          f"({st['first_listing']})")
    print(f"   stoker_server, index cache      {st['cached']:7.2f} "
          f"({st['cached_listing']})")
    print(f"   torchvision ImageFolder(tree)   {st['torchvision']:7.2f}")


if __name__ == "__main__":
    main()
