#!/usr/bin/env python3
"""Trains a small image classifier for a few steps twice, once fed by Stoker
and once by a plain torch DataLoader reading the same shards (tarfile + PIL +
torchvision transforms in worker processes), and prints both throughputs.

Quick CPU run (about a minute; builds nothing, starts its own server):

    bazel build //client/python:stoker //server:stoker_server //tools:make_sample_shards
    bazel-bin/tools/make_sample_shards --out_dir=/tmp/stoker_sample \\
        --num_shards=4 --samples_per_shard=64
    PYTHONPATH=bazel-bin/client/python /usr/bin/python3 \\
        client/python/examples/train_compare.py \\
        --shards='/tmp/stoker_sample/*.tar' --device=cpu --steps=20

With running servers pass --servers=host:port,... (the servers must serve
the same shards as dataset --dataset). On a GPU: --device=cuda
--model=resnet18 --image_size=224 --batch_size=256 --amp.
"""

import argparse
import glob as globlib
import io
import os
import sys
import tarfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import stoker
from stoker.launch import ServerProcess, ServerStartError

MEAN = stoker.IMAGENET_MEAN
STD = stoker.IMAGENET_STD


# --- The baseline: a map-style dataset over the tar shards ---

def index_shards(pattern):
    """[(tar path, offset, size, label)] for every image with a label, in
    shard order, and the number of classes."""
    samples = []
    for path in sorted(globlib.glob(pattern)):
        images, labels = {}, {}
        with tarfile.open(path) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                key, _, ext = member.name.partition(".")
                ext = ext.lower()
                if ext in ("jpg", "jpeg", "png"):
                    images[key] = (member.offset_data, member.size)
                elif ext == "cls":
                    labels[key] = int(tar.extractfile(member).read().strip())
        for key, (offset, size) in images.items():
            if key in labels:
                samples.append((path, offset, size, labels[key]))
    if not samples:
        sys.exit(f"no labelled images in shards matching {pattern!r}")
    return samples, max(s[3] for s in samples) + 1


class ShardDataset(torch.utils.data.Dataset):
    def __init__(self, samples, image_size):
        import torchvision.transforms as T
        self.samples = samples
        self.transform = T.Compose([
            T.RandomResizedCrop(image_size),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(MEAN, STD),
        ])

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        from PIL import Image
        path, offset, size, label = self.samples[i]
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(size)
        image = Image.open(io.BytesIO(data)).convert("RGB")
        return self.transform(image), label


# --- Models ---

class TinyNet(nn.Module):
    """A few conv layers; fast enough to train on a CPU."""

    def __init__(self, num_classes):
        super().__init__()
        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1,
                                           bias=False),
                                 nn.BatchNorm2d(cout), nn.ReLU(inplace=True))
        self.features = nn.Sequential(block(3, 16), block(16, 32),
                                      block(32, 64))
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.features(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def make_model(name, num_classes):
    if name == "tiny":
        return TinyNet(num_classes)
    import torchvision
    return getattr(torchvision.models, name)(num_classes=num_classes)


# --- Training ---

def endless(loader, set_epoch):
    epoch = 0
    while True:
        set_epoch(epoch)
        for batch in loader:
            yield batch
        epoch += 1


def train(name, batches, args, num_classes, device):
    """Runs args.warmup + args.steps steps; returns (images/s, data wait s)
    over the timed steps."""
    torch.manual_seed(0)
    model = make_model(args.model, num_classes).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    images_seen, wait = 0, 0.0
    start = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            images_seen, wait = 0, 0.0
        t0 = time.perf_counter()
        images, labels = next(batches)
        if images.device != device:  # the DataLoader baseline
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
        if args.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        wait += time.perf_counter() - t0
        with torch.autocast(device.type, dtype=torch.bfloat16,
                            enabled=args.amp):
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        images_seen += images.shape[0]
        if args.verbose:
            print(f"{name} step {step} loss {loss.item():.3f}", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return images_seen, seconds, wait, loss.item()


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", required=True,
                        help="glob of the .tar shards (read by the baseline; "
                             "served by the server started here)")
    parser.add_argument("--servers", default="",
                        help="running Stoker servers serving --shards; if "
                             "empty, starts --server_bin on a free port")
    parser.add_argument("--server_bin", default="bazel-bin/server/stoker_server")
    parser.add_argument("--dataset", default="train")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available()
                        else "cpu")
    parser.add_argument("--model", default="tiny",
                        help="'tiny' or a torchvision model name (resnet18)")
    parser.add_argument("--image_size", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20,
                        help="timed training steps per loader")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2,
                        help="DataLoader worker processes (baseline)")
    parser.add_argument("--prefetch", type=int, default=8)
    parser.add_argument("--channels_last", action="store_true")
    parser.add_argument("--amp", action="store_true",
                        help="bfloat16 autocast")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()

    device = torch.device(args.device)
    samples, num_classes = index_shards(args.shards)
    print(f"{len(samples)} samples, {num_classes} classes, model {args.model}, "
          f"{args.image_size}px, batch {args.batch_size}, device {device}",
          flush=True)
    transform = (f"RandomResizedCrop({args.image_size})|"
                 "RandomHorizontalFlip()")

    server = None
    servers = args.servers
    if not servers:
        if not os.path.exists(args.server_bin):
            sys.exit(f"no --servers and no server binary at {args.server_bin}")
        try:
            server = ServerProcess(
                [args.server_bin, "--port=0",
                 f"--dataset={args.dataset}={args.shards}"], timeout_s=60)
        except ServerStartError as e:
            sys.exit(str(e))
        servers = server.address
    try:
        loader = stoker.Loader(
            servers, args.dataset, args.batch_size, transform, device=device,
            dtype=torch.float32, channels_last=args.channels_last,
            prefetch=args.prefetch)
        results = {}
        results["stoker"] = train("stoker", endless(loader, loader.set_epoch),
                                  args, num_classes, device)
        stats = loader.stats()
        loader.close()

        dataset = ShardDataset(samples, args.image_size)
        sampler = torch.utils.data.RandomSampler(dataset)
        baseline = torch.utils.data.DataLoader(
            dataset, batch_size=args.batch_size, sampler=sampler,
            num_workers=args.workers, pin_memory=device.type == "cuda",
            persistent_workers=args.workers > 0)
        results["dataloader"] = train(
            "dataloader", endless(baseline, lambda e: None), args,
            num_classes, device)
    finally:
        if server is not None:
            server.kill()

    for name, (images, seconds, wait, loss) in results.items():
        print(f"{name:>10}: {images} images in {seconds:.2f} s = "
              f"{images / seconds:8.1f} images/s (waiting for data "
              f"{wait:.2f} s, final loss {loss:.3f})")
    print("stoker stages: " + ", ".join(
        f"{k}={stats[k]:.3f}" if isinstance(stats[k], float) else
        f"{k}={stats[k]}"
        for k in ("server_read_s", "server_decode_s", "server_transform_s",
                  "client_wait_s", "network_bytes", "batches",
                  "stream_failures")))
    ratio = (results["stoker"][0] / results["stoker"][1]) / (
        results["dataloader"][0] / results["dataloader"][1])
    print(f"stoker / dataloader throughput: {ratio:.2f}x")


if __name__ == "__main__":
    main()
