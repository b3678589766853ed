#!/usr/bin/python3
"""Little's law for a Stoker server reading object storage, measured.

Serves WebDataset shards from nginx, which delays every answer by --rtt_ms
(its echo module's timer: no CPU), to one stoker_server given every core
of --cores, full shuffle, and streams --epochs epochs with stoker_fetch
while sampling the server's Prometheus figures every 100 ms. Prints:

  - images/s, range requests/s and requests per image;
  - the mean latency of a request (the latency histogram's sum / count);
  - requests in flight: the mean of the server's in-flight gauge sampled
    every 100 ms, beside what Little's law predicts from the rate and the
    latency (requests/s x mean latency), and the peak sampled;
  - connections opened, and the server's threads;
then projects, from the measured requests per image and the latency,
what a server needs at other rates and latencies: requests in flight,
connections over HTTP/1.1 (one per request in flight) and HTTP/2 (100
streams per connection, curl's default), and prefetch memory.

    bazel build -c opt //server:stoker_server //client:stoker_fetch
    /usr/bin/python3 bench/storage_concurrency.py --data_dir=/tmp/photos \\
        --bazel_bin=$(bazel info -c opt bazel-bin) --rtt_ms=100

Nothing is hard-coded: every figure comes from this run.
"""

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "testing"))
import object_stores  # noqa: E402
from storage_metrics import storage_metrics as scrape  # noqa: E402

TRANSFORM = "RandomResizedCrop(224)|RandomHorizontalFlip()"
SAMPLE_S = 0.1
# HTTP/2 streams per connection (libcurl's CURLMOPT_MAX_CONCURRENT_STREAMS
# default; nginx allows 128).
H2_STREAMS = 100


class Server:
    """stoker_server with a --port_file: its ports once it listens."""

    def __init__(self, argv, timeout_s=600):
        self.dir = tempfile.mkdtemp(prefix="stoker-bench-")
        port_file = os.path.join(self.dir, "ports")
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.process = subprocess.Popen(argv + [f"--port_file={port_file}"],
                                        stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(port_file):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise SystemExit("stoker_server did not start; see "
                                 + self.log.name)
            time.sleep(0.05)
        self.ports = {}
        with open(port_file) as f:
            for line in f:
                name, _, value = line.strip().partition("=")
                if value.isdigit():
                    self.ports[name] = int(value)
        self.address = f"127.0.0.1:{self.ports['port']}"

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def shard_pattern(data_dir, base_url):
    names = sorted(n for n in os.listdir(data_dir) if n.endswith(".tar"))
    prefix = os.path.commonprefix(names)
    first, last = names[0][len(prefix):-4], names[-1][len(prefix):-4]
    if not (first.isdigit() and last.isdigit() and
            int(last) - int(first) + 1 == len(names)):
        raise SystemExit("shard names are not numbered consecutively")
    return f"{base_url}/{prefix}{{{first}..{last}}}.tar"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data_dir", required=True)
    p.add_argument("--bazel_bin", required=True)
    p.add_argument("--rtt_ms", type=float, default=100)
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--server_flags", default="")
    args = p.parse_args()
    os.sched_setaffinity(0, set(range(args.cores)))

    with object_stores.Nginx(args.data_dir, delay_ms=args.rtt_ms) as web:
        server = Server(
            [os.path.join(args.bazel_bin, "server/stoker_server"),
             "--port=0", "--metrics_port=0", f"--threads={args.cores}",
             f"--dataset=bench={shard_pattern(args.data_dir, web.base_url)}",
             "--host=127.0.0.1", *args.server_flags.split()])
        try:
            port = server.ports["metrics_port"]
            samples = []
            stop = threading.Event()

            def sample():
                while not stop.is_set():
                    values = scrape(port)
                    values["threads"] = threads_of(server.process.pid)
                    values["t"] = time.monotonic()
                    samples.append(values)
                    stop.wait(SAMPLE_S)

            sampler = threading.Thread(target=sample, daemon=True)
            before = scrape(port)
            start = time.monotonic()
            sampler.start()
            result = subprocess.run(
                [os.path.join(args.bazel_bin, "client/stoker_fetch"),
                 f"--servers={server.address}", "--dataset=bench",
                 f"--batch_size={args.batch_size}", f"--epochs={args.epochs}",
                 f"--transform={TRANSFORM}"],
                capture_output=True, text=True, check=True)
            elapsed = time.monotonic() - start
            stop.set()
            sampler.join()
            after = scrape(port)
        finally:
            server.kill()

    images = int(re.search(r"images=(\d+) batches", result.stdout).group(1))
    d = {k: after[k] - before.get(k, 0) for k in after}
    requests = d["stoker_storage_request_seconds_count"]
    latency = d["stoker_storage_request_seconds_sum"] / max(requests, 1)
    rate = requests / elapsed
    per_image = requests / images
    image_bytes = d["stoker_storage_bytes_total"] / images
    gauge = [s["stoker_storage_requests_in_flight"] for s in samples]
    measured = sum(gauge) / max(len(gauge), 1)
    peak = max(s["stoker_storage_requests_in_flight"] for s in samples)
    print(f"nginx + {args.rtt_ms:g} ms per answer, {args.cores} cores, "
          f"server --threads={args.cores}, full shuffle, batch "
          f"{args.batch_size}, {args.epochs} epochs")
    print(f"  images/s                   {images / elapsed:10.0f}")
    print(f"  range requests/s           {rate:10.0f}  "
          f"({per_image:.2f} per image, {image_bytes / 1e3:.0f} KB per image "
          f"read)")
    print(f"  mean request latency       {1e3 * latency:10.1f} ms")
    print(f"  in flight, sampled mean    {measured:10.1f}  "
          f"({len(gauge)} samples of the gauge)")
    print(f"  in flight, Little's law    {rate * latency:10.1f}  "
          f"(requests/s x mean latency)")
    print(f"  in flight, peak sampled    {peak:10.0f}")
    print(f"  connections opened         "
          f"{d['stoker_storage_connections_total']:10.0f}")
    print(f"  server threads, peak       "
          f"{max(s['threads'] for s in samples):10.0f}")
    print()
    print(f"Projection from this run's {per_image:.2f} requests and "
          f"{image_bytes / 1e3:.0f} KB per image (x2: the prefetch "
          f"headroom):")
    print(f"  {'images/s':>9} {'latency':>8} {'in flight':>10} "
          f"{'HTTP/1.1 conns':>15} {'HTTP/2 conns':>13} {'prefetch MB':>12}")
    for target in (images / elapsed, 4000, 10000, 30000):
        for ms in (20, 100):
            in_flight = target * per_image * ms / 1e3
            print(f"  {target:9.0f} {ms:6d}ms {in_flight:10.0f} "
                  f"{math.ceil(in_flight):15d} "
                  f"{math.ceil(in_flight / H2_STREAMS):13d} "
                  f"{2 * target * image_bytes * ms / 1e3 / 1e6:12.0f}")


if __name__ == "__main__":
    main()
