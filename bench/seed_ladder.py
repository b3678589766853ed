#!/usr/bin/python3
"""The seed article's caching ladder for its toy job, run by stoker.diagnose.

Seed 000 trains a toy CNN on 1024x1024 images with RandomCrop, its own
RandomMask (a random mask dilated with a 4-neighbour kernel), a colour
conversion and scaling, batch 256, and finds the bottleneck by caching data
at successive points of the pipeline by hand. Here the same kind of job gets
its data from stoker_server (RandomCrop + the RandomMask plugin,
plugins/random_mask, on the server; scaling and normalization where the
loader converts: on the device) and stoker.diagnose runs the five rungs
without touching the training step.

    bazel build -c opt //server:stoker_server //tools:make_sample_shards \\
        //plugins/random_mask:random_mask.so //client/python:stoker
    PYTHONPATH=bazel-bin/client/python /usr/bin/python3 bench/seed_ladder.py \\
        --bazel_bin=bazel-bin --device=cpu

The model is bench/gpu_train.py's ToyNet (the seed's Net is not given in
its text). On a CPU-only machine (--device=cpu) the training step runs on
the same cores as the server, so the step is small (--width, --batch_size).
"""

import argparse
import os
import shutil
import sys
import tempfile

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_train import ToyNet  # noqa: E402
from run_benchmark import Server, log  # noqa: E402

import stoker  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bazel_bin", default="bazel-bin")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available()
                   else "cpu")
    p.add_argument("--data_dir", default="",
                   help="reused if it holds shards (default: a temporary "
                   "folder of 1024x1024 images)")
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--crop", type=int, default=256)
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--width", type=int, default=64,
                   help="ToyNet channels (the model's cost per step)")
    p.add_argument("--server_threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--chart", default="")
    args = p.parse_args()

    data_dir, temporary = args.data_dir, False
    if not data_dir or not os.path.isdir(data_dir) or not any(
            n.endswith(".tar") for n in os.listdir(data_dir)):
        data_dir = data_dir or tempfile.mkdtemp(prefix="stoker-seed-")
        temporary = not args.data_dir
        shards = 8
        import subprocess
        subprocess.run(
            [os.path.join(args.bazel_bin, "tools/make_sample_shards"),
             f"--out_dir={data_dir}", f"--num_shards={shards}",
             f"--samples_per_shard={max(1, args.images // shards)}",
             "--min_side=1024", "--max_side=1024", "--num_classes=10"],
            check=True, capture_output=True)
    server = Server([
        os.path.join(args.bazel_bin, "server/stoker_server"), "--port=0",
        "--host=127.0.0.1", f"--dataset=seed={data_dir}/*.tar",
        f"--threads={args.server_threads}",
        f"--plugin={os.path.join(args.bazel_bin, 'plugins/random_mask/random_mask.so')}"])
    try:
        device = torch.device(args.device)
        torch.manual_seed(0)
        model = ToyNet(args.width, num_classes=10).to(device)
        model.train()
        criterion = nn.CrossEntropyLoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.001,
                                    momentum=0.9)

        def train_step(images, labels):
            loss = criterion(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        kwargs = dict(servers=f"127.0.0.1:{server.port}", dataset="seed",
                      batch_size=args.batch_size,
                      transform=f"RandomCrop({args.crop})|"
                      "RandomMask(ratio=0.25)",
                      device=args.device)
        log(f"seed ladder: {args.images} 1024x1024 images, batch "
            f"{args.batch_size}, crop {args.crop}, ToyNet width "
            f"{args.width} on {args.device}, server --threads="
            f"{args.server_threads}")
        report = stoker.diagnose(kwargs, step_fn=train_step,
                                 steps=args.steps, warmup=args.warmup,
                                 chart=args.chart or None, log=log)
        print(report.text())
    finally:
        server.stop()
        if temporary:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
