#!/usr/bin/env python3
"""The seed job on a GPU, fed three ways in one run (needs a CUDA GPU).

The seed article (shared/background/000_*) trains a toy classifier with
batch 256 and finds its bottleneck by caching data at successive points of
the input pipeline. This benchmark trains that kind of model on a
real-photo corpus with RandomResizedCrop(224) + RandomHorizontalFlip and
measures, for the same model, step and batch size:

  (a) bound     one batch cached on the device, the training step alone;
  (b) DataLoader torch DataLoader with the seed's pipeline shape: a map
                Dataset reading JPEGs from the shards, PIL decode + the same
                transforms + PILToTensor in num_workers worker processes,
                pin_memory, non_blocking copy, uint8 -> normalized bfloat16
                on the GPU (the article's advice: convert on the device);
  (c) Stoker    stoker_server processes on the same data cores feeding
                stoker.Loader(device="cuda", dtype=torch.bfloat16,
                channels_last=True) in the training process.

The training process is pinned to --train_cpus; DataLoader workers and
Stoker servers to --data_cpus, so (b) and (c) get the same cores. For each
way it prints steps/s, images/s, the mean GPU utilisation (NVML, sampled
every 10 ms while timing) and the ratio to (a); it also times each loader
alone (no model: what the data cores can produce) so that a shortfall can
be told apart from a slow loader. Every figure is measured in this run.

    /usr/bin/python3 tools/photo_shards.py --out_dir=/data/photos \\
        --num_shards=16 --samples_per_shard=500
    PYTHONPATH=bazel-bin/client/python python3 bench/gpu_train.py \\
        --data_dir=/data/photos --server_bin=bazel-bin/server/stoker_server
"""

import argparse
import functools
import os
import sys
import threading
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_benchmark import (  # noqa: E402
    Server, ShardDataset, index_shards, list_shards)

DATASET = "photos"
TRANSFORM = "RandomResizedCrop(224)|RandomHorizontalFlip()"
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def log(msg):
    print(f"[gpu_train] {msg}", file=sys.stderr, flush=True)


def parse_cpus(text):
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


# ---------------------------------------------------------------- the model


class ToyNet(nn.Module):
    """A toy CNN classifier like the seed's: strided convolutions, global
    pooling and one linear layer (the article's own Net is not reproduced in
    its text). --width scales the channels, i.e. the GPU time per step."""

    def __init__(self, width=64, num_classes=1000):
        super().__init__()
        layers, cin = [], 3
        for cout in (width, 2 * width, 4 * width, 8 * width):
            layers += [nn.Conv2d(cin, cout, 3, stride=2, padding=1),
                       nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                       nn.Conv2d(cout, cout, 3, padding=1),
                       nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def make_model(name, width):
    if name == "toy":
        return ToyNet(width)
    import torchvision
    return getattr(torchvision.models, name)(num_classes=1000)


class Trainer:
    """The seed's train_step, under bfloat16 autocast, channels_last."""

    def __init__(self, args, device):
        torch.manual_seed(0)
        self.device_type = device.type
        self.model = make_model(args.model, args.width).to(
            device, memory_format=torch.channels_last)
        self.model.train()
        self.criterion = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.001,
                                         momentum=0.9)

    def step(self, inputs, labels):
        with torch.autocast(self.device_type, dtype=torch.bfloat16):
            loss = self.criterion(self.model(inputs), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()


# ---------------------------------------------------------------- measuring


class GpuUtilization:
    """Mean NVML GPU utilisation (percent of time a kernel was running)
    sampled every 10 ms between start() and stop()."""

    def __init__(self, device):
        self.handle = None
        if device.type != "cuda":
            return
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(
                device.index or 0)
        except Exception as e:  # no NVML: report n/a
            log(f"NVML unavailable ({e}); GPU utilisation is n/a")

    def start(self):
        self.samples = []
        self.running = True
        if self.handle is not None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def _run(self):
        while self.running:
            rate = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
            self.samples.append(rate.gpu)
            time.sleep(0.01)

    def stop(self):
        self.running = False
        if self.handle is None:
            return None
        self.thread.join()
        return sum(self.samples) / max(1, len(self.samples))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(name, batches, step, args, util, batch_size):
    """Runs `step` on --warmup then --steps batches from the iterator
    `batches`; returns the figures of the timed part."""
    device = torch.device(args.device)
    for _ in range(args.warmup):
        step(*next(batches))
    synchronize(device)
    util.start()
    start = time.perf_counter()
    for _ in range(args.steps):
        step(*next(batches))
    synchronize(device)
    seconds = time.perf_counter() - start
    gpu = util.stop()
    result = {
        "name": name,
        "steps_per_s": args.steps / seconds,
        "images_per_s": args.steps * batch_size / seconds,
        "gpu_util": gpu,
    }
    log(f"{name}: {result['steps_per_s']:.2f} steps/s, "
        f"{result['images_per_s']:.0f} images/s, GPU "
        f"{'n/a' if gpu is None else f'{gpu:.0f}%'}")
    return result


def no_step(*_):
    pass


# ---------------------------------------------------------------- (b) peer


def pin_worker(cpus, _):
    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(1)


def dataloader_batches(args, device, data_cpus):
    import torchvision.transforms as T
    samples = index_shards(list_shards(args.data_dir))
    transform = T.Compose([T.RandomResizedCrop(224),
                           T.RandomHorizontalFlip(),
                           T.PILToTensor()])
    loader = torch.utils.data.DataLoader(
        ShardDataset(samples, transform), batch_size=args.batch_size,
        shuffle=True, drop_last=True, num_workers=len(data_cpus),
        pin_memory=device.type == "cuda", persistent_workers=True, prefetch_factor=4,
        worker_init_fn=functools.partial(pin_worker, data_cpus))
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def batches():
        while True:
            for images, labels in loader:
                x = images.to(device, non_blocking=True)
                x = x.contiguous(memory_format=torch.channels_last)
                x = ((x.float() - mean) / std).to(torch.bfloat16)
                yield x, labels.to(device, non_blocking=True)

    return batches(), loader


# ---------------------------------------------------------------- (c) Stoker


class Servers:
    """--num_servers stoker_server processes, each pinned to its share of
    the data CPUs with one decode thread per CPU."""

    def __init__(self, args, data_cpus):
        glob = os.path.join(os.path.abspath(args.data_dir), "*.tar")
        shares = [data_cpus[i::args.num_servers]
                  for i in range(args.num_servers)]
        self.servers = []
        try:
            for cpus in shares:
                self.servers.append(Server(
                    [args.server_bin, "--port=0", "--host=127.0.0.1",
                     f"--dataset={DATASET}={glob}", f"--threads={len(cpus)}"],
                    cpus))
        except BaseException:
            self.stop()  # the ones already started
            raise
        self.addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
        log(f"stoker servers at {','.join(self.addresses)} on CPUs "
            f"{shares}")

    def stop(self):
        for server in self.servers:
            server.stop()


def stoker_batches(args, servers, device):
    import stoker
    loader = stoker.Loader(servers=",".join(servers.addresses),
                           dataset=DATASET, batch_size=args.batch_size,
                           transform=TRANSFORM, seed=0, drop_last=True,
                           device=device, dtype=torch.bfloat16,
                           channels_last=True, prefetch=args.prefetch,
                           output_slots=args.output_slots)

    def batches():
        while True:
            yield from loader

    return batches(), loader


# ---------------------------------------------------------------- main


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" \
        else "CPU"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", required=True,
                   help="WebDataset shards (tools/photo_shards.py)")
    p.add_argument("--server_bin", default="bazel-bin/server/stoker_server")
    p.add_argument("--model", default="toy",
                   help="'toy' or a torchvision.models name, e.g. resnet50")
    p.add_argument("--width", type=int, default=64,
                   help="toy model: channels of the first stage")
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=40,
                   help="untimed steps first; more than the batches a "
                   "loader buffers, so that timing starts in steady state")
    cpus = sorted(os.sched_getaffinity(0))
    train = cpus[:2] if len(cpus) >= 4 else cpus[:1]
    p.add_argument("--train_cpus", default=",".join(map(str, train)),
                   help="CPUs of the training process (default: the first "
                   "two, or one on a machine of fewer than 4)")
    p.add_argument("--data_cpus",
                   default=",".join(map(str, cpus[len(train):] or cpus)),
                   help="CPUs of the DataLoader workers and the Stoker "
                   "servers (default: the others)")
    p.add_argument("--num_servers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=8)
    p.add_argument("--output_slots", type=int, default=4)
    p.add_argument("--device", default="cuda:0",
                   help="'cpu' runs the same code without a GPU (a smoke "
                   "test; its figures mean nothing)")
    p.add_argument("--skip", default="",
                   help="comma-separated ways to skip: dataloader,stoker")
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_train: needs a CUDA GPU and a CUDA build of PyTorch "
                 "(or --device=cpu for a smoke test)")
    if not list_shards(args.data_dir):
        sys.exit(f"gpu_train: no .tar shards in {args.data_dir}; write them "
                 "with tools/photo_shards.py")
    train_cpus = parse_cpus(args.train_cpus)
    data_cpus = parse_cpus(args.data_cpus)
    if not 1 <= args.num_servers <= len(data_cpus):
        sys.exit(f"gpu_train: --num_servers={args.num_servers} needs 1 to "
                 f"{len(data_cpus)} (one data CPU at least per server)")
    os.sched_setaffinity(0, train_cpus)
    torch.set_num_threads(len(train_cpus))
    skip = set(filter(None, args.skip.split(",")))
    util = GpuUtilization(device)
    log(f"{device_name(device)}, torch {torch.__version__}; "
        f"training on CPUs {train_cpus}, data on CPUs {data_cpus}; model "
        f"{args.model}, batch {args.batch_size}, {args.steps} timed steps")

    trainer = Trainer(args, device)
    results, produced = [], {}

    servers = Servers(args, data_cpus)
    try:
        batches, loader = stoker_batches(args, servers, device)
        # (a) one batch (a real one, from the Stoker loader) cached on the
        # device.
        images, labels = next(batches)
        cached = (images.clone(), labels.clone())
        del images, labels
        results.append(timed_steps("(a) bound: batch cached on device",
                                   iter(lambda: cached, None), trainer.step,
                                   args, util, args.batch_size))
        if "stoker" not in skip:
            produced["stoker"] = timed_steps(
                "Stoker alone (no model)", batches, no_step, args, util,
                args.batch_size)
            results.append(timed_steps("(c) Stoker", batches, trainer.step,
                                       args, util, args.batch_size))
            stats = loader.stats()
            log("stoker stats: " + ", ".join(
                f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                for k, v in sorted(stats.items())
                if not isinstance(v, dict)))
        del batches, loader
    finally:
        servers.stop()

    if "dataloader" not in skip:
        batches, loader = dataloader_batches(args, device, data_cpus)
        produced["dataloader"] = timed_steps(
            "DataLoader alone (no model)", batches, no_step, args, util,
            args.batch_size)
        results.append(timed_steps("(b) DataLoader", batches, trainer.step,
                                   args, util, args.batch_size))
        del batches, loader

    bound = results[0]["steps_per_s"]
    print()
    print(f"device: {device_name(device)}; model {args.model}"
          f"{f' width {args.width}' if args.model == 'toy' else ''}, batch "
          f"{args.batch_size}, bf16 autocast, channels_last; "
          f"{len(train_cpus)} training CPUs, {len(data_cpus)} data CPUs")
    print(f"{'way':36s} {'steps/s':>8s} {'images/s':>9s} {'GPU util':>9s} "
          f"{'vs (a)':>7s}")
    for r in results:
        gpu = "n/a" if r["gpu_util"] is None else f"{r['gpu_util']:.0f}%"
        print(f"{r['name']:36s} {r['steps_per_s']:8.2f} "
              f"{r['images_per_s']:9.0f} {gpu:>9s} "
              f"{r['steps_per_s'] / bound:6.1%}")
    for name, r in produced.items():
        print(f"{name} alone (no model): {r['images_per_s']:.0f} images/s "
              f"from {len(data_cpus)} data CPUs; the model consumes "
              f"{results[0]['images_per_s']:.0f} images/s at its bound")


if __name__ == "__main__":
    main()
