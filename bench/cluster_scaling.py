#!/usr/bin/python3
"""How Stoker scales with servers, on hosts that are network namespaces
(tests/testing/netcluster.py): 1, 2 and 4 stoker_servers, each on a host of
its own limited to --server_cpu of a core (a CFS quota: the share a server
host's cores are of the whole) behind a --server_mbit link, feeding 1 and 4
client ranks (stoker_fetch --rank/--world_size) on one client host behind a
--client_mbit link, found through dnsmasq; each rank's training step
consumes --rank_demand images/s (stoker_fetch --step_ms, a GPU's pace).
Prints, per point: images/s, the ideal line (the one-server rate times the
servers, at most what the ranks consume), efficiency, the ranks'
starvation (share of their time spent waiting for a batch), the client
link's use, the client CPU per image, and what limits it.

    bazel build -c opt //server:stoker_server //client:stoker_fetch \\
        //tools:make_sample_shards
    sudo /usr/bin/python3 bench/cluster_scaling.py \\
        --bazel_bin=$(bazel info -c opt bazel-bin) --data_dir=/tmp/photos

Needs root (network namespaces, cgroups), iproute2 and dnsmasq. Without
--data_dir it writes a synthetic ImageNet-like corpus. Nothing is
hard-coded: every figure comes from this run.
"""

import argparse
import glob as globlib
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "testing"))
import netcluster  # noqa: E402

NAME = "stoker.cluster.test"
PORT = 50051
TRANSFORM = "RandomResizedCrop(224)|RandomHorizontalFlip()"
# A point's bounds: how long servers may take to start, and an epoch.
START_TIMEOUT_S = 120
RUN_TIMEOUT_S = 900


def parse_fetch(out):
    """The figures of stoker_fetch's last summary line and stages line."""
    def last(name):
        found = re.findall(rf"\b{name}=([0-9.]+)", out)
        return float(found[-1]) if found else 0.0
    return {name: last(name) for name in (
        "images", "seconds", "bytes", "client_wait_s", "client_cpu_s")}


def cpu_times():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def process_cpu_s(pid):
    """User + system CPU seconds of a process (the servers are exec'd in
    place by sh and ip netns exec, so the pid is theirs)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_point(args, glob, servers, ranks):
    hosts = ["dns", "client"] + [f"s{i}" for i in range(servers)]
    with netcluster.NetCluster(hosts, rate_mbit=args.server_mbit) as net:
        net.set_rate("client", args.client_mbit)
        net.start_dns("client")
        port_files = []
        server_processes = []
        for i in range(servers):
            folder = tempfile.mkdtemp(prefix="stoker-scaling-")
            port_files.append(os.path.join(folder, "ports"))
            server_processes.append(net.spawn(f"s{i}", [
                os.path.join(args.bazel_bin, "server/stoker_server"),
                f"--port={PORT}", f"--dataset=train={glob}",
                f"--port_file={port_files[-1]}",
                f"--threads={args.server_threads}"],
                cpu_share=args.server_cpu, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(os.path.exists(p) for p in port_files):
            if time.monotonic() > deadline:
                raise RuntimeError("servers did not start")
            time.sleep(0.05)
        net.set_records(NAME, [f"s{i}" for i in range(servers)])
        clients = [net.spawn("client", [
            os.path.join(args.bazel_bin, "client/stoker_fetch"),
            f"--servers=dns:///{NAME}:{PORT}", "--dataset=train",
            f"--batch_size={args.batch_size}", f"--epochs={args.epochs}",
            f"--rank={r}", f"--world_size={ranks}", f"--transform={TRANSFORM}",
            f"--prefetch={prefetch(args, servers)}",
            f"--step_ms={step_ms(args)}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in range(ranks)]
        busy0, total0 = cpu_times()
        served0 = sum(process_cpu_s(p.pid) for p in server_processes)
        results = []
        for client in clients:
            out, err = client.communicate(timeout=RUN_TIMEOUT_S)
            if client.returncode != 0:
                raise RuntimeError(f"stoker_fetch failed: {err[-2000:]}")
            results.append(parse_fetch(out))
        busy1, total1 = cpu_times()
        served1 = sum(process_cpu_s(p.pid) for p in server_processes)
    seconds = max(r["seconds"] for r in results)
    images = sum(r["images"] for r in results)
    return {
        "images_per_s": images / seconds,
        "starvation": sum(r["client_wait_s"] / r["seconds"]
                          for r in results) / len(results),
        "client_link": sum(r["bytes"] for r in results) * 8 / seconds
                       / (args.client_mbit * 1e6),
        "client_cpu_ms": 1000 * sum(r["client_cpu_s"] for r in results)
                         / images,
        "bytes_per_image": sum(r["bytes"] for r in results) / images,
        # Everything the machine did meanwhile: servers, clients, and the
        # kernel moving the bytes through veth, bridge and qdiscs.
        "machine_cpu": (busy1 - busy0) / (total1 - total0),
        "server_cpu_ms": 1000 * (served1 - served0) / images,
        "server_quota_use": (served1 - served0) / seconds
                            / (servers * args.server_cpu),
    }


def prefetch(args, servers):
    """--prefetch, or a window that holds a range for every stream of every
    server (2 streams of 4 batches each, stoker_fetch's defaults): with a
    smaller one, ranges are leased only inside it and some servers idle
    (8 batches, the default, keeps two servers busy)."""
    return args.prefetch or 2 * 4 * servers


def step_ms(args):
    """The consumer's step: a rank that trains at --rank_demand images/s."""
    if args.rank_demand <= 0:
        return 0
    return 1000.0 * args.batch_size / args.rank_demand


def limit_of(point, efficiency, base_server_cpu_ms):
    if point["starvation"] < 0.05:
        return "the ranks' demand (fed)"
    if point["client_link"] > 0.85:
        return "client link"
    if point["machine_cpu"] > 0.9:
        return "the box's cores (kernel networking shares them)"
    grown = point["server_cpu_ms"] / base_server_cpu_ms - 1
    if efficiency < 0.85 and grown > 0.15:
        return (f"server CPU per image +{grown:.0%}: the servers share the "
                "box's cores and caches")
    if efficiency < 0.85:
        return (f"servers used {point['server_quota_use']:.0%} of their CPU; "
                "links and the box not saturated")
    return "server CPU"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bazel_bin", required=True)
    p.add_argument("--data_dir", default="",
                   help="a folder of .tar shards (default: synthetic)")
    p.add_argument("--servers", default="1,2,4")
    p.add_argument("--ranks", default="1,4")
    p.add_argument("--server_cpu", type=float, default=0.2,
                   help="CPUs each server host has (a CFS quota)")
    p.add_argument("--server_threads", type=int, default=1)
    p.add_argument("--server_mbit", type=float, default=1000)
    p.add_argument("--client_mbit", type=float, default=1000)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--prefetch", type=int, default=0,
                   help="batches each rank fetches ahead (0: 8 per server)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--rank_demand", type=float, default=1000,
                   help="images/s each rank's training step consumes (a "
                   "GPU's rate); 0: no step, the servers' capacity")
    args = p.parse_args()
    reason = netcluster.unsupported()
    if reason:
        sys.exit(f"cluster_scaling.py: {reason}")
    if args.data_dir:
        glob = os.path.join(args.data_dir, "*.tar")
        if not globlib.glob(glob):
            sys.exit(f"cluster_scaling.py: no .tar in {args.data_dir}")
    else:
        folder = tempfile.mkdtemp(prefix="stoker-scaling-data-")
        subprocess.run([
            os.path.join(args.bazel_bin, "tools/make_sample_shards"),
            f"--out_dir={folder}", "--num_shards=8",
            "--samples_per_shard=128", "--min_side=300", "--max_side=500"],
            check=True, stdout=subprocess.DEVNULL)
        glob = os.path.join(folder, "*.tar")
    servers = [int(s) for s in args.servers.split(",")]
    ranks = [int(r) for r in args.ranks.split(",")]
    print(f"# {os.cpu_count()} cores; each server {args.server_cpu} CPU, "
          f"{args.server_threads} thread(s), {args.server_mbit:g} Mbit/s; "
          f"client host {args.client_mbit:g} Mbit/s; {TRANSFORM}; "
          f"batch {args.batch_size}, {args.epochs} epochs, prefetch "
          f"{args.prefetch or '8 per server'}; each rank consumes "
          f"{args.rank_demand:g} images/s; {time.strftime('%Y-%m-%d')}")
    print("| servers | ranks | images/s | ideal (linear) | efficiency | "
          "starvation | client link | client CPU ms/image | KB/image | "
          "server CPU ms/image | machine CPU | limit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
          "| --- | --- |")
    for r in ranks:
        base = None
        base_cpu = None
        demand = r * args.rank_demand if args.rank_demand > 0 else math.inf
        for n in servers:
            point = run_point(args, glob, n, r)
            if base is None:
                base = point["images_per_s"] / n
                base_cpu = point["server_cpu_ms"]
            ideal = min(base * n, demand)
            efficiency = point["images_per_s"] / ideal
            print(f"| {n} | {r} | {point['images_per_s']:,.0f} | "
                  f"{ideal:,.0f} | {efficiency:.0%} | "
                  f"{point['starvation']:.0%} | {point['client_link']:.0%} | "
                  f"{point['client_cpu_ms']:.3f} | "
                  f"{point['bytes_per_image'] / 1000:.0f} | "
                  f"{point['server_cpu_ms']:.2f} | "
                  f"{point['machine_cpu']:.0%} | "
                  f"{limit_of(point, efficiency, base_cpu)} |", flush=True)


if __name__ == "__main__":
    main()
