#!/usr/bin/python3
"""Local and hybrid servers, and the shared-memory path, in one run.

Run with Debian's interpreter (it has torch and torchvision), on real
photographs (tools/photo_shards.py writes shards of Debian's camera
photos):

    bazel build -c opt //server:stoker_server //client:stoker_fetch \
        //client/python:stoker //bench:decode_ceiling
    /usr/bin/python3 tools/photo_shards.py --out_dir=/tmp/photos
    /usr/bin/python3 bench/local_benchmark.py --data_dir=/tmp/photos \
        --bazel_bin=$(bazel info -c opt bazel-bin)

Figures (every one measured here, beside its peer in the same run):
  1. local    stoker.Loader(shards=..., device="cpu", dtype=uint8) and
              stoker_fetch --local_shards, servers and client on the same
              --cores CPUs, against PyTorch's DataLoader (num_workers =
              cores) on those CPUs: images/s and CPU-ms per image (every
              process: client, servers or workers).
  2. ceiling  stoker_fetch in local mode with server and client on one CPU,
              against a one-core full-frame decode (bench/decode_ceiling).
  3. client   stoker_fetch's own CPU per image on CPU 0 with its local
              server on CPU 1: shared memory against the socket.
  4. python   stoker.Loader(device="cpu") on CPU 0, its local server on CPU
              1: CPU per image of the training process for uint8, float32
              and bfloat16 output, shared memory and socket, beside (3).
  5. hybrid   one local server on CPU 1 plus one "remote" server (another
              stoker_server reached over TCP) on CPU 0: the combined rate
              against each alone.
Each Stoker measurement skips a warm-up epoch (server start, indexing,
page cache); CPU figures are per image over the timed epochs.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_benchmark as rb  # noqa: E402  (helpers shared with it)

DATASET = "bench"


def log(msg):
    rb.log(msg)


def fetch(args, bazel_bin, flags, cpus):
    """stoker_fetch pinned to `cpus` for 1 + args.epochs epochs. Returns
    the timed epochs' images/s, its own CPU and every process's CPU per
    image (its local servers are its children, reaped before it exits)."""
    cmd = [rb.binary(bazel_bin, "client/stoker_fetch"),
           f"--dataset={DATASET}", f"--batch_size={args.batch_size}",
           f"--epochs={1 + args.epochs}", f"--seed={args.seed}",
           f"--server_binary={rb.binary(bazel_bin, 'server/stoker_server')}"
           ] + flags
    before = rb.rusage_seconds(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        cmd, capture_output=True, text=True,
        preexec_fn=lambda: os.sched_setaffinity(0, set(cpus)))
    total_cpu = rb.rusage_seconds(resource.RUSAGE_CHILDREN) - before
    if result.returncode != 0:
        raise RuntimeError(f"stoker_fetch failed:\n{result.stdout}"
                           f"{result.stderr[-4000:]}")
    epochs = [rb.parse_kv(line) for line in result.stdout.splitlines()
              if line.startswith("epoch=")]
    timed = epochs[1:]
    images = sum(int(e["images"]) for e in timed)
    seconds = sum(float(e["seconds"]) for e in timed)
    all_images = sum(int(e["images"]) for e in epochs)
    client = float(rb.parse_kv(rb.last_line_with(result.stdout,
                                                 "client_cpu_s"))
                   ["client_cpu_s"])
    stages = rb.parse_kv(rb.last_line_with(result.stdout, "stages:"))
    return {
        "images_per_s": images / seconds,
        # Over every epoch: the process ran them all.
        "client_ms": client / all_images * 1e3,
        "total_ms": total_cpu / all_images * 1e3,
        "shared_batches": int(stages["shared_memory_batches"]),
    }


PYTHON_LOADER = textwrap.dedent("""
    import json, os, resource, sys, time
    import torch
    sys.path.insert(0, sys.argv[1])
    import stoker
    cfg = json.loads(sys.argv[2])
    os.sched_setaffinity(0, set(cfg["cpus"]))
    dtype = getattr(torch, cfg["dtype"])
    loader = stoker.Loader(dataset="bench", shards=cfg["shards"],
                           batch_size=cfg["batch_size"], seed=cfg["seed"],
                           device="cpu", dtype=dtype,
                           local_cores=cfg["local_cpus"],
                           shared_memory=cfg["shared_memory"],
                           server_binary=cfg["server_binary"])
    from stoker.launch import child_processes, process_cpu_seconds
    def server_cpu():  # the local servers are this process's children
        return sum(process_cpu_seconds(p) for p in child_processes(os.getpid()))
    def own_cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    for _ in loader:  # warm-up epoch
        pass
    c0, s0, t0, n = own_cpu(), server_cpu(), time.time(), 0
    for _ in range(cfg["epochs"]):
        for images, labels in loader:
            n += images.shape[0]
    seconds = time.time() - t0
    own, servers = own_cpu() - c0, server_cpu() - s0
    stats = loader.stats()
    loader.close()
    print(json.dumps({"images_per_s": n / seconds,
                      "client_ms": own / n * 1e3,
                      "total_ms": (own + servers) / n * 1e3,
                      "shared_batches": stats["shared_memory_batches"]}))
""")


def python_loader(args, bazel_bin, cpus, local_cpus, dtype="uint8",
                  shared_memory=True):
    cfg = {"cpus": cpus, "local_cpus": local_cpus, "dtype": dtype,
           "shards": rb.shard_glob(args.data_dir),
           "batch_size": args.batch_size, "seed": args.seed,
           "epochs": args.epochs, "shared_memory": shared_memory,
           "server_binary": rb.binary(bazel_bin, "server/stoker_server")}
    result = subprocess.run(
        [sys.executable, "-c", PYTHON_LOADER,
         os.path.join(bazel_bin, "client/python"), json.dumps(cfg)],
        capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"stoker.Loader run failed:\n"
                           f"{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def attempt(name, fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 (a failed step prints why)
        log(f"{name}: FAILED: {e}")
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bazel_bin", default="")
    p.add_argument("--data_dir", required=True,
                   help="WebDataset shards of real photos "
                   "(tools/photo_shards.py).")
    p.add_argument("--cores", type=int, default=min(2, os.cpu_count()),
                   help="CPUs of step 1 (the first N).")
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3,
                   help="Timed epochs of every Stoker measurement.")
    p.add_argument("--peer_epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--hybrid_batch_size", type=int, default=64,
                   help="Batch size of step 5 (stoker_fetch's last "
                   "--batch_size wins).")
    p.add_argument("--ceiling_seconds", type=float, default=3)
    args = p.parse_args()
    if os.cpu_count() < 2:
        sys.exit("needs 2 CPUs (server and client on their own)")
    bazel_bin = rb.find_bazel_bin(args.bazel_bin)
    if not rb.list_shards(args.data_dir):
        sys.exit(f"no .tar shards in {args.data_dir}")
    cores = list(range(args.cores))
    shards = rb.shard_glob(args.data_dir)
    local = [f"--local_shards={shards}"]
    r = {}

    log(f"1. local mode on CPUs {cores}")
    r["py_local"] = attempt("python local", lambda: python_loader(
        args, bazel_bin, cores, cores))
    r["fetch_local"] = attempt("fetch local", lambda: fetch(
        args, bazel_bin, local + [f"--local_cpus={cores[0]}-{cores[-1]}"],
        cores))
    peer_args = argparse.Namespace(cores=args.cores,
                                   batch_size=args.batch_size,
                                   seed=args.seed)
    os.sched_setaffinity(0, set(cores))
    r["peer"] = attempt("peer", lambda: rb.bench_peer(
        peer_args, args.data_dir, args.peer_epochs))
    os.sched_setaffinity(0, set(range(os.cpu_count())))

    log("2. one CPU: local server and client against the decode ceiling")
    r["one_core"] = attempt("one core", lambda: fetch(
        args, bazel_bin, local + ["--local_cpus=0"], [0]))
    os.sched_setaffinity(0, {0})
    ceiling_args = argparse.Namespace(ceiling_seconds=args.ceiling_seconds)
    r["ceiling"] = attempt("ceiling", lambda: rb.bench_ceiling(
        ceiling_args, bazel_bin, args.data_dir))
    os.sched_setaffinity(0, set(range(os.cpu_count())))

    log("3. client CPU: stoker_fetch on CPU 0, its server on CPU 1")
    for shm in (True, False):
        r[f"fetch_shm_{shm}"] = attempt(f"fetch shm={shm}", lambda: fetch(
            args, bazel_bin,
            local + ["--local_cpus=1", f"--shared_memory={str(shm).lower()}"],
            [0]))

    log("4. stoker.Loader(device='cpu') on CPU 0, its server on CPU 1")
    for dtype in ("uint8", "float32", "bfloat16"):
        for shm in (True, False):
            r[f"py_{dtype}_{shm}"] = attempt(
                f"python {dtype} shm={shm}", lambda: python_loader(
                    args, bazel_bin, [0], [1], dtype, shm))

    log("5. hybrid: a local server on CPU 1 and a remote one on CPU 0")
    remote = attempt("remote server", lambda: rb.Server(
        [rb.binary(bazel_bin, "server/stoker_server"), "--port=0",
         "--host=127.0.0.1", f"--dataset={DATASET}={shards}", "--threads=1",
         "--log_level=warn"], cpus=[0]))
    if remote is not None:
        both = list(range(min(2, os.cpu_count())))
        # Small requests, so two servers share even a short epoch evenly.
        small = [f"--batch_size={args.hybrid_batch_size}",
                 "--batches_per_request=1"]
        r["remote_only"] = attempt("remote only", lambda: fetch(
            args, bazel_bin,
            [f"--servers=127.0.0.1:{remote.port}"] + small, both))
        r["local_only"] = attempt("local only", lambda: fetch(
            args, bazel_bin, local + ["--local_cpus=1"] + small, both))
        r["hybrid"] = attempt("hybrid", lambda: fetch(
            args, bazel_bin,
            local + ["--local_cpus=1",
                     f"--servers=local,127.0.0.1:{remote.port}"] + small,
            both))
        remote.stop()

    print_table(args, r)


def print_table(args, r):
    def get(key, field):
        return (r.get(key) or {}).get(field)

    peer = r.get("peer") or {}
    peer_rate = peer.get("images_per_s")
    peer_ms = peer.get("cpu_per_image") and peer["cpu_per_image"] * 1e3
    print(f"\n== local mode, {args.cores} CPUs, batch {args.batch_size}, "
          f"real photos in {args.data_dir}")
    print(f"{'':34s} {'images/s':>10s} {'CPU-ms/img':>11s} {'x DataLoader':>13s}")
    for name, key in (("stoker.Loader (local, uint8)", "py_local"),
                      ("stoker_fetch --local_shards", "fetch_local")):
        rate = get(key, "images_per_s")
        ratio = rate / peer_rate if rate and peer_rate else None
        print(f"{name:34s} {fmt(rate, '10.0f')} "
              f"{fmt(get(key, 'total_ms'), '11.3f')} {fmt(ratio, '12.2f')}x")
    print(f"{'PyTorch DataLoader':34s} {fmt(peer_rate, '10.0f')} "
          f"{fmt(peer_ms, '11.3f')}")
    print("  goal: >= 3x the DataLoader's images/s")

    one = get("one_core", "images_per_s")
    ceiling = r.get("ceiling")
    print("\n== one CPU: server and client together vs one-core decode")
    print(f"stoker local on CPU 0: {fmt(one, '.0f')} images/s; decode "
          f"ceiling {fmt(ceiling, '.0f')} images/s; ratio "
          f"{fmt(one / ceiling if one and ceiling else None, '.2f')}x "
          "(goal >= 1.0x)")

    print("\n== training-host CPU per image (client on CPU 0, server on "
          "CPU 1)")
    print(f"{'':34s} {'shared mem':>11s} {'socket':>9s}")
    print(f"{'stoker_fetch':34s} {fmt(get('fetch_shm_True', 'client_ms'), '11.4f')} "
          f"{fmt(get('fetch_shm_False', 'client_ms'), '9.4f')}")
    for dtype in ("uint8", "float32", "bfloat16"):
        print(f"{'stoker.Loader cpu ' + dtype:34s} "
              f"{fmt(get(f'py_{dtype}_True', 'client_ms'), '11.4f')} "
              f"{fmt(get(f'py_{dtype}_False', 'client_ms'), '9.4f')}")
    print("  goals: stoker_fetch <= 0.02 ms on shared memory; the Loader's "
          "uint8 within 0.02 ms of stoker_fetch")
    shared = get("fetch_shm_True", "shared_batches")
    print(f"  (batches through shared memory in the stoker_fetch run: "
          f"{fmt(shared, 'd')})")

    print(f"\n== hybrid: local server (CPU 1) + remote server (CPU 0, TCP), "
          f"batch {args.hybrid_batch_size}, one batch per request; the "
          f"client shares both CPUs")
    for name, key in (("remote alone", "remote_only"),
                      ("local alone", "local_only"),
                      ("both", "hybrid")):
        print(f"{name:34s} {fmt(get(key, 'images_per_s'), '10.0f')} images/s")


if __name__ == "__main__":
    main()
