#!/usr/bin/python3
"""What hostile data and greedy clients cost a stoker_server: peak RSS and time.

1. Bombs: a ~10 KB shard of forged images (JPEG, CMYK JPEG and PNG headers
   claiming 30000x30000 pixels) beside one good sample; one epoch through
   stoker_fetch. Reports the server's peak RSS and the epoch's wall time.
2. Greedy clients: a server with --max_memory_bytes=1GiB; six stoker_fetch
   clients ask for 10x4096x4096 batches (503 MB) and are then frozen
   (SIGSTOP: they stop reading mid-stream); a normal client runs an epoch
   beside them. Reports the server's peak RSS and the normal epoch's time.

Run from a checkout after `bazel build //server:stoker_server
//client:stoker_fetch //tools:make_sample_shards //client/python:stoker`:
  /usr/bin/python3 bench/hostile_load.py [--bazel_bin=bazel-bin]
"""

import argparse
import io
import os
import re
import signal
import struct
import subprocess
import sys
import tarfile
import tempfile
import time

from PIL import Image


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def forge_jpeg(mode, side):
    buf = io.BytesIO()
    Image.new(mode, (64, 48), (90,) * len(mode)).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", side, side)  # height, width
    return bytes(data)


def forge_png(side):
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 20, 30)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    data[16:24] = struct.pack(">II", side, side)
    return bytes(data)


def write_tar(path, members):
    with tarfile.open(path, "w") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def start_server(binary, glob, log, *flags):
    """A stoker_server serving dataset "train" from `glob`, its log in `log`
    (stoker.launch.ServerProcess; stop() drains it)."""
    from stoker.launch import ServerProcess
    return ServerProcess([binary, "--port=0", f"--dataset=train={glob}",
                          *flags], log_path=log, timeout_s=30)


def bombs(args, tmp):
    good = io.BytesIO()
    Image.new("RGB", (120, 90), (200, 100, 50)).save(good, "JPEG")
    members = [("good.jpg", good.getvalue()), ("good.cls", b"0\n")]
    forged = [("jpeg", forge_jpeg("RGB", 30000)),
              ("cmyk", forge_jpeg("CMYK", 30000)),
              ("png", forge_png(30000)), ("png16k", forge_png(16000))]
    for i, (kind, payload) in enumerate(forged):
        ext = "png" if kind.startswith("png") else "jpg"
        members += [(f"bomb{i}-{kind}.{ext}", payload), (f"bomb{i}-{kind}.cls", b"1\n")]
    shard = os.path.join(tmp, "bombs-0.tar")
    write_tar(shard, members)
    server = start_server(args.server, os.path.join(tmp, "bombs-*.tar"),
                    os.path.join(tmp, "bombs.log"), "--threads=4")
    idle = peak_rss_mb(server.process.pid)
    start = time.time()
    out = subprocess.run(
        [args.fetch, f"--servers={server.address}", "--dataset=train",
         "--batch_size=5", "--epochs=1", "--transform=RandomResizedCrop(224)"],
        capture_output=True, text=True, check=True).stdout
    elapsed = time.time() - start
    peak = peak_rss_mb(server.process.pid)
    server.stop()
    skipped = len(re.findall(r"skipped sample", open(server.log).read()))
    print(f"bombs: shard {os.path.getsize(shard) / 1024:.1f} KB with "
          f"{len(forged)} forged images of up to 30000x30000 px; epoch "
          f"{elapsed:.2f} s; server peak RSS {peak:.0f} MB ({idle:.0f} MB "
          f"before the epoch); {skipped} samples skipped; fetch: "
          f"{out.strip().splitlines()[-1]}")


def greedy(args, tmp):
    shards = os.path.join(tmp, "shards")
    subprocess.run([args.make_shards, f"--out_dir={shards}", "--num_shards=4",
                    "--samples_per_shard=64", "--min_side=200",
                    "--max_side=500"], check=True, capture_output=True)
    server = start_server(args.server, os.path.join(shards, "*.tar"),
                    os.path.join(tmp, "greedy.log"), "--threads=2",
                    "--max_memory_bytes=1073741824")
    greedy_clients = []
    try:
        for i in range(6):
            greedy_clients.append(subprocess.Popen(
                [args.fetch, f"--servers={server.address}", "--dataset=train",
                 "--batch_size=10", "--epochs=1", "--prefetch=2",
                 "--batches_per_request=2",
                 "--transform=RandomResizedCrop(4096)"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(args.greedy_seconds)
        for p in greedy_clients:
            p.send_signal(signal.SIGSTOP)  # stops reading mid-stream
        start = time.time()
        out = subprocess.run(
            [args.fetch, f"--servers={server.address}", "--dataset=train",
             "--batch_size=32", "--epochs=1",
             "--transform=RandomResizedCrop(224)|RandomHorizontalFlip()"],
            capture_output=True, text=True, check=True).stdout
        elapsed = time.time() - start
        peak = peak_rss_mb(server.process.pid)
    finally:
        for p in greedy_clients:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()
    server.stop()
    print(f"greedy clients: 6 clients of 503 MB batches frozen mid-stream, "
          f"--max_memory_bytes=1GiB; normal client's epoch {elapsed:.2f} s "
          f"({out.strip().splitlines()[-1]}); server peak RSS {peak:.0f} MB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bazel_bin", default="bazel-bin")
    parser.add_argument("--greedy_seconds", type=float, default=8,
                        help="how long the greedy clients read before they "
                        "are frozen")
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.bazel_bin, "client/python"))
    args.server = os.path.join(args.bazel_bin, "server/stoker_server")
    args.fetch = os.path.join(args.bazel_bin, "client/stoker_fetch")
    args.make_shards = os.path.join(args.bazel_bin, "tools/make_sample_shards")
    with tempfile.TemporaryDirectory() as tmp:
        bombs(args, tmp)
        greedy(args, tmp)


if __name__ == "__main__":
    main()
