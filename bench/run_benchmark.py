#!/usr/bin/python3
"""Stoker vs. a PyTorch DataLoader on the same data and cores, in one run.

Run with Debian's interpreter (it has torch and torchvision):

    bazel build //bench:decode_ceiling //bench:transport_bench \
        //server:stoker_server //client:stoker_fetch //tools:make_sample_shards \
        //client/python:stoker
    /usr/bin/python3 bench/run_benchmark.py            # or: bazel run //bench:run

Steps (all on the first --cores CPUs: this process pins itself there and
every child inherits the affinity):
  a. corpus   ImageNet-like JPEG WebDataset shards from make_sample_shards
              (reused if --data_dir already holds shards).
  b. Stoker   stoker_server + stoker_fetch over loopback, default transform.
              One untimed warm-up epoch, then enough epochs for
              --min_seconds. Server and client share the cores.
     tls      the same over TLS (certificates made with openssl here).
     http     the same with the shards behind nginx, which delays every
              answer by --http_rtt_ms (a timer, no CPU: tc netem is not
              available in every container), read with range requests and
              prefetch; once with the full shuffle and once with
              shuffle=blocks (--shuffle_window), beside local files with
              the same shuffle.
  c. peer     torch DataLoader over the same shards: PIL decode,
              RandomResizedCrop(224), RandomHorizontalFlip(), PILToTensor(),
              num_workers=cores, persistent workers, same batch size and
              epochs, one untimed warm-up epoch.
  d. ceiling  decode_ceiling: full-frame libjpeg-turbo decode on one core.
  e. client   the training host's cost: stoker_fetch's own CPU per image,
              in step b and against transport_bench --serve_port (cached
              batches, no decode: the client at its highest rate).
  f. wire     transport_bench (gRPC, Stoker's zero-copy encoding) and
              iperf3 over loopback (raw TCP).
  g. table    measured figures, ratios and the goals, PASS/MISS.

Nothing is hard-coded: every figure in the table is measured in this run.
A step that fails prints why and shows "n/a"; the others still run.
"""

import argparse
import gc
import io
import json
import math
import os
import re
import resource
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

DATASET = "bench"
DEFAULT_TRANSFORM = "RandomResizedCrop(224)|RandomHorizontalFlip()"

# Goals: (description, threshold, True if higher is better).
GOAL_IMAGES = 2.0
GOAL_CPU = 0.5
GOAL_PER_CORE = 1.0
GOAL_WIRE = 0.7
# Client CPU per 224x224 image, in ms (an absolute goal).
GOAL_CLIENT_MS = 0.12


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- helpers


def find_bazel_bin(given):
    candidates = [given] if given else [
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                     "bazel-bin"),
        os.path.join(os.getcwd(), "bazel-bin"),
    ]
    for c in candidates:
        if c and os.path.isdir(c):
            # The stoker package (//client/python:stoker): its launcher.
            sys.path.insert(0, os.path.join(os.path.abspath(c),
                                            "client", "python"))
            return os.path.abspath(c)
    sys.exit("run_benchmark: cannot find bazel-bin; pass --bazel_bin")


def binary(bazel_bin, target):
    path = os.path.join(bazel_bin, target)
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            f"{path} is missing; bazel build //{os.path.dirname(target)}:"
            f"{os.path.basename(target)}")
    return path


def proc_cpu_seconds(pid):
    """utime + stime of a live process (all its threads), in seconds."""
    from stoker.launch import process_cpu_seconds
    return process_cpu_seconds(pid)


def child_pids(parent):
    """Children of `parent`, also those exited but not yet reaped."""
    from stoker.launch import child_processes
    return list(child_processes(parent, include_zombies=True))


def rusage_seconds(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


class LoadMonitor:
    """CPU time spent on the pinned CPUs by anything other than this run.

    Busy jiffies of those CPUs (/proc/stat, steal included) minus this
    process's and its waited-for children's CPU time (getrusage). Call
    stop() only after every child started in between has been waited for,
    or its time counts as foreign. The machine may be shared; a large figure
    means the step's numbers are disturbed.
    """

    def __init__(self, cpus):
        self.cpus = cpus
        self.busy = self._busy()
        self.own = (rusage_seconds(resource.RUSAGE_SELF) +
                    rusage_seconds(resource.RUSAGE_CHILDREN))
        self.start = time.time()

    def _busy(self):
        total = 0
        with open("/proc/stat") as f:
            for line in f:
                name, *values = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(
                        name[3:]) in self.cpus:
                    v = [int(x) for x in values]
                    # user nice system idle iowait irq softirq steal
                    total += v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
        return total / os.sysconf("SC_CLK_TCK")

    def stop(self):
        """Foreign CPU time as a fraction of the CPUs' capacity."""
        own = (rusage_seconds(resource.RUSAGE_SELF) +
               rusage_seconds(resource.RUSAGE_CHILDREN)) - self.own
        capacity = (time.time() - self.start) * len(self.cpus)
        return max(0.0, (self._busy() - self.busy - own) / capacity)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_kv(line):
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def last_line_with(text, key):
    for line in reversed(text.splitlines()):
        if line.startswith(key) or f" {key}" in line:
            return line
    return None


# ---------------------------------------------------------------- a. corpus


def make_corpus(args, bazel_bin):
    data_dir = args.data_dir
    if data_dir and list_shards(data_dir):
        log(f"reusing corpus in {data_dir}")
        return data_dir, False
    temporary = not data_dir
    if temporary:
        data_dir = tempfile.mkdtemp(prefix="stoker-bench-")
    log(f"writing {args.num_shards} x {args.samples_per_shard} JPEGs "
        f"({args.min_side}..{args.max_side} px, quality {args.quality}) to "
        f"{data_dir}")
    subprocess.run([
        binary(bazel_bin, "tools/make_sample_shards"), f"--out_dir={data_dir}",
        f"--num_shards={args.num_shards}",
        f"--samples_per_shard={args.samples_per_shard}",
        f"--min_side={args.min_side}", f"--max_side={args.max_side}",
        f"--quality={args.quality}", f"--seed={args.seed}",
        "--num_classes=1000"
    ], check=True, stdout=subprocess.DEVNULL)
    return data_dir, temporary


def list_shards(data_dir):
    if not os.path.isdir(data_dir):
        return []
    return sorted(
        os.path.join(data_dir, n) for n in os.listdir(data_dir)
        if n.endswith(".tar"))


def shard_glob(data_dir):
    return os.path.join(data_dir, "*.tar")


# ---------------------------------------------------------------- b. Stoker


def server_command(args, bazel_bin, data_dir, dataset_glob=None):
    return [
        binary(bazel_bin, "server/stoker_server"), "--port=0",
        "--host=127.0.0.1",
        f"--dataset={DATASET}={dataset_glob or shard_glob(data_dir)}",
        f"--threads={args.cores}", "--log_level=info"
    ] + shlex.split(args.server_flags)


def Server(cmd, cpus=None):
    """A server started from `cmd` with --port_file (stoker_server with
    --port=0, transport_bench --serve_port=0), optionally pinned to `cpus`:
    a stoker.launch.ServerProcess (`.port`, `.process`, `.log_text()`;
    `.stop()` sends SIGTERM). The stoker package must be importable
    (find_bazel_bin puts bazel-bin/client/python on the path)."""
    from stoker.launch import ServerProcess
    log("server: " + " ".join(shlex.quote(c) for c in cmd))
    return ServerProcess(cmd, cpus=cpus, timeout_s=120)


def run_fetch(args, bazel_bin, port, start_epoch, epochs):
    cmd = [
        binary(bazel_bin, "client/stoker_fetch"),
        f"--servers=127.0.0.1:{port}", f"--dataset={DATASET}",
        f"--batch_size={args.batch_size}", f"--epochs={epochs}",
        f"--start_epoch={start_epoch}", f"--seed={args.seed}",
        f"--transform={args.transform}"
    ] + shlex.split(args.fetch_flags)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"stoker_fetch failed ({result.returncode}):\n"
                           f"{result.stdout}{result.stderr}")
    line = last_line_with(result.stdout, "images=")
    if line is None or "images_per_s=" not in line:
        raise RuntimeError("no summary line from stoker_fetch:\n" +
                           result.stdout)
    return result.stdout, parse_kv(line)


def bench_stoker(args, bazel_bin, data_dir, dataset_glob=None):
    server = Server(server_command(args, bazel_bin, data_dir, dataset_glob))
    try:
        _, warm = run_fetch(args, bazel_bin, server.port, 0, 1)
        warm_rate = float(warm["images_per_s"])
        per_epoch = int(warm["images"])
        epochs = max(args.epochs,
                     math.ceil(args.min_seconds * warm_rate / per_epoch))
        epochs = min(epochs, args.max_epochs)
        log(f"stoker: warm-up epoch at {warm_rate:.0f} images/s; timing "
            f"{epochs} epochs of {per_epoch} images")

        # Server: its own utime+stime, read from /proc while it runs.
        # Client: RUSAGE_CHILDREN counts children that have been waited for;
        # the server is still running, so the delta is stoker_fetch alone.
        server_before = proc_cpu_seconds(server.process.pid)
        children_before = rusage_seconds(resource.RUSAGE_CHILDREN)
        stdout, summary = run_fetch(args, bazel_bin, server.port, 1, epochs)
        client_cpu = rusage_seconds(resource.RUSAGE_CHILDREN) - children_before
        server_cpu = proc_cpu_seconds(server.process.pid) - server_before
    finally:
        server.stop()
    for line in stdout.splitlines():
        log("stoker_fetch: " + line)
    images = int(summary["images"])
    return {
        "images": images,
        "epochs": epochs,
        "seconds": float(summary["seconds"]),
        "images_per_s": float(summary["images_per_s"]),
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
        "cpu_per_image": (server_cpu + client_cpu) / images,
    }


def bench_stoker_tls(args, bazel_bin, data_dir):
    """Step b over TLS: certificates made here with openssl (a CA and a
    server certificate for 127.0.0.1), stoker_server --tls_cert/--tls_key,
    stoker_fetch --tls_ca; the same epochs as the plaintext step."""
    certs = tempfile.mkdtemp(prefix="stoker-bench-tls-")
    try:
        def openssl(*argv):
            subprocess.run(["openssl", *argv], check=True,
                           capture_output=True)
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                "1", "-subj", "/CN=bench CA", "-keyout", f"{certs}/ca.key",
                "-out", f"{certs}/ca.pem")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj",
                "/CN=localhost", "-keyout", f"{certs}/server.key", "-out",
                f"{certs}/server.csr")
        with open(f"{certs}/san.ext", "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        openssl("x509", "-req", "-in", f"{certs}/server.csr", "-CA",
                f"{certs}/ca.pem", "-CAkey", f"{certs}/ca.key",
                "-CAcreateserial", "-days", "1", "-extfile",
                f"{certs}/san.ext", "-out", f"{certs}/server.pem")
        tls_args = argparse.Namespace(**vars(args))
        tls_args.server_flags = (args.server_flags +
                                 f" --tls_cert={certs}/server.pem"
                                 f" --tls_key={certs}/server.key")
        tls_args.fetch_flags = args.fetch_flags + f" --tls_ca={certs}/ca.pem"
        return bench_stoker(tls_args, bazel_bin, data_dir)
    finally:
        shutil.rmtree(certs, ignore_errors=True)


def request_latency_ms(url):
    """Median time of five 1-byte range GETs of `url`, in ms."""
    import urllib.request
    times = []
    for _ in range(5):
        request = urllib.request.Request(url, headers={"Range": "bytes=0-0"})
        start = time.perf_counter()
        with urllib.request.urlopen(request) as response:
            response.read()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[2]


def bench_stoker_http(args, bazel_bin, data_dir, local):
    """Step b with the shards over HTTP, --http_rtt_ms away, for the full
    shuffle and shuffle=blocks, each beside local files with the same
    shuffle (`local` is step b's full-shuffle result)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "..", "tests", "testing"))
    import object_stores
    shards = list_shards(data_dir)
    names = [os.path.basename(p) for p in shards]
    prefix = os.path.commonprefix(names)
    digits = len(names[0]) - len(prefix) - len(".tar")
    first, last = names[0][len(prefix):-4], names[-1][len(prefix):-4]
    if not (prefix and digits > 0 and first.isdigit() and last.isdigit() and
            int(last) - int(first) + 1 == len(names)):
        raise RuntimeError("shard names are not numbered consecutively")
    pattern_tail = f"{prefix}{{{first}..{last}}}.tar"
    web = object_stores.Nginx(data_dir, delay_ms=args.http_rtt_ms)
    try:
        web.start()
        how = (f"nginx delaying every answer by {args.http_rtt_ms:g} ms "
               f"(echo_sleep, a timer: no CPU)")
        results = {"how": how, "latency_ms": request_latency_ms(
            f"{web.base_url}/{names[0]}")}
        for mode, flags in (("full", ""),
                            ("blocks", f" --shuffle_window={args.shuffle_window}")):
            run_args = argparse.Namespace(**vars(args))
            run_args.fetch_flags = args.fetch_flags + flags
            if mode == "full" and local:
                results["local_" + mode] = local
            else:
                results["local_" + mode] = bench_stoker(run_args, bazel_bin,
                                                        data_dir)
            run_args.server_flags = args.server_flags
            results["http_" + mode] = bench_stoker(
                run_args, bazel_bin, data_dir,
                dataset_glob=f"{web.base_url}/{pattern_tail}")
        return results
    finally:
        web.stop()


def bench_client_cached(args, bazel_bin):
    """stoker_fetch against transport_bench's cached batches: the client's
    CPU per image with nothing to wait for. One warm-up epoch (it allocates
    the receive buffers), then --client_epochs timed ones."""
    server = Server([
        binary(bazel_bin, "bench/transport_bench"), "--serve_port=0",
        f"--batch={args.batch_size}", "--batches_per_epoch=32"
    ])
    try:
        run_fetch(args, bazel_bin, server.port, 0, 1)
        before = rusage_seconds(resource.RUSAGE_CHILDREN)
        _, summary = run_fetch(args, bazel_bin, server.port, 1,
                               args.client_epochs)
        cpu = rusage_seconds(resource.RUSAGE_CHILDREN) - before
    finally:
        server.stop()
    images = int(summary["images"])
    return {
        "images": images,
        "images_per_s": float(summary["images_per_s"]),
        "cpu_per_image": cpu / images,
    }


# ---------------------------------------------------------------- c. peer


def index_shards(shards):
    """[(shard path, jpg offset, jpg size, label)], tar order, shards sorted
    by path: the same global order Stoker uses."""
    import tarfile
    samples = []
    for path in shards:
        members = {}
        with tarfile.open(path) as tar:
            for m in tar:
                if not m.isfile():
                    continue
                key, _, ext = m.name.rpartition(".")
                members.setdefault(key, {})[ext] = m
            for key, parts in members.items():
                if "jpg" not in parts or "cls" not in parts:
                    continue
                cls = tar.extractfile(parts["cls"]).read()
                jpg = parts["jpg"]
                samples.append((path, jpg.offset_data, jpg.size,
                                int(cls.strip() or 0)))
    return samples


class ShardDataset:
    """torch-style map Dataset: reads one JPEG by offset, decodes with PIL."""

    def __init__(self, samples, transform):
        self.samples = samples
        self.transform = transform
        self.files = {}  # per process (opened lazily after fork)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        from PIL import Image
        path, offset, size, label = self.samples[i]
        f = self.files.get(path)
        if f is None:
            f = self.files[path] = open(path, "rb")
        f.seek(offset)
        image = Image.open(io.BytesIO(f.read(size))).convert("RGB")
        return self.transform(image), label


def worker_init(_):
    import torch
    torch.set_num_threads(1)


def bench_peer(args, data_dir, epochs, transform=None, collate_fn=None):
    """The DataLoader over `data_dir`'s shards. `transform` maps one PIL
    image to a tensor (default: RandomResizedCrop(224),
    RandomHorizontalFlip(), PILToTensor()); `collate_fn` is the DataLoader's
    (default: torch's), run in the workers (bench/recipe_benchmark.py
    passes torchvision's recipes and their MixUp / CutMix)."""
    import torch
    import torchvision.transforms as T

    samples = index_shards(list_shards(data_dir))
    if transform is None:
        transform = T.Compose([
            T.RandomResizedCrop(224),
            T.RandomHorizontalFlip(),
            T.PILToTensor()
        ])
    generator = torch.Generator()
    generator.manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(ShardDataset(samples, transform),
                                         batch_size=args.batch_size,
                                         shuffle=True,
                                         num_workers=args.cores,
                                         persistent_workers=True,
                                         worker_init_fn=worker_init,
                                         collate_fn=collate_fn,
                                         generator=generator)

    def run_epoch(loader):
        n = 0
        for images, _ in loader:
            n += images.shape[0]
        return n

    # Warm-up: one whole epoch starts the workers, opens the shard files and
    # fills the page cache. Timing whole epochs (not "after the first batch")
    # keeps batches that workers prefetched before the clock started out of
    # the count.
    t0 = time.time()
    per_epoch = run_epoch(loader)
    log(f"peer: warm-up epoch at {per_epoch / (time.time() - t0):.0f} "
        f"images/s; timing {epochs} epochs of {per_epoch} images")

    # CPU time: the main process's own (RUSAGE_SELF: all its threads) plus
    # each worker's utime+stime from /proc/<pid>/stat. The workers are
    # persistent, so they are alive (idle between epochs) at both readings
    # and RUSAGE_CHILDREN would never see them; at an epoch boundary no
    # worker holds work for a later epoch, so the readings bracket exactly
    # the timed epochs' work.
    workers = child_pids(os.getpid())
    if len(workers) != args.cores:
        raise RuntimeError(f"expected {args.cores} DataLoader workers, found "
                           f"child processes {workers}")
    self_before = rusage_seconds(resource.RUSAGE_SELF)
    workers_before = sum(proc_cpu_seconds(p) for p in workers)
    start = time.time()
    images = sum(run_epoch(loader) for _ in range(epochs))
    seconds = time.time() - start
    workers_cpu = sum(proc_cpu_seconds(p) for p in workers) - workers_before
    main_cpu = rusage_seconds(resource.RUSAGE_SELF) - self_before
    # Shut the workers down and wait for them (their CPU time then moves to
    # RUSAGE_CHILDREN, which LoadMonitor counts as this run's own).
    del loader
    gc.collect()
    deadline = time.time() + 10
    while set(workers) & set(child_pids(os.getpid())):
        if time.time() > deadline:
            log(f"peer: workers {workers} did not exit; the load figure "
                "for this step counts their CPU time as foreign")
            break
        time.sleep(0.05)
    return {
        "images": images,
        "epochs": epochs,
        "seconds": seconds,
        "images_per_s": images / seconds,
        "main_cpu": main_cpu,
        "workers_cpu": workers_cpu,
        "cpu_per_image": (main_cpu + workers_cpu) / images,
    }


# ---------------------------------------------------------------- d, e


def bench_ceiling(args, bazel_bin, data_dir):
    out = subprocess.run([
        binary(bazel_bin, "bench/decode_ceiling"),
        f"--shards={shard_glob(data_dir)}",
        f"--min_seconds={args.ceiling_seconds}"
    ], capture_output=True, text=True, check=True).stdout
    return float(parse_kv(last_line_with(out, "decode_ceiling_images_per_s"))
                 ["decode_ceiling_images_per_s"])


def bench_grpc(args, bazel_bin):
    out = subprocess.run([
        binary(bazel_bin, "bench/transport_bench"),
        f"--min_seconds={args.transport_seconds}",
        f"--batch={args.batch_size}", f"--streams={args.transport_streams}"
    ], capture_output=True, text=True, check=True).stdout
    return float(parse_kv(last_line_with(out, "grpc_gbytes_per_s"))
                 ["grpc_gbytes_per_s"])


def bench_tcp(args):
    iperf = shutil.which("iperf3")
    if iperf is None:
        raise RuntimeError("iperf3 is not installed")
    port = free_port()
    server = subprocess.Popen([iperf, "-s", "-1", "-p", str(port)],
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        # The server takes a moment to listen; a probe connection would use
        # up its one session (-1), so the client simply retries.
        for _ in range(50):
            result = subprocess.run([
                iperf, "-c", "127.0.0.1", "-p", str(port), "-t",
                str(args.iperf_seconds), "-J"
            ], capture_output=True, text=True)
            report = json.loads(result.stdout or "{}")
            if "end" in report and "sum_received" in report["end"]:
                return report["end"]["sum_received"]["bits_per_second"] / 8e9
            if "connect" not in report.get("error", ""):
                raise RuntimeError(f"iperf3: {report.get('error', result)}")
            time.sleep(0.1)
        raise RuntimeError("iperf3 server did not come up")
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()


# ---------------------------------------------------------------- f. table


def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def verdict(x, goal, higher_is_better):
    if x is None:
        return "n/a"
    ok = x >= goal if higher_is_better else x <= goal
    return "PASS" if ok else "MISS"


def ratio_of(a, b):
    return None if a is None or b is None or b == 0 else a / b


def print_table(args, corpus, stoker, peer, ceiling, client, grpc, tcp,
                foreign, tls=None, http=None):
    s_ips = stoker and stoker["images_per_s"]
    p_ips = peer and peer["images_per_s"]
    s_cpu = stoker and stoker["cpu_per_image"]
    p_cpu = peer and peer["cpu_per_image"]
    per_core = s_ips and s_ips / args.cores
    c_ms = stoker and stoker["client_cpu"] / stoker["images"] * 1e3
    cc_ms = client and client["cpu_per_image"] * 1e3
    p_ms = p_cpu and p_cpu * 1e3
    # (metric, Stoker side, value, reference, value, ratio, goal, higher is
    # better, what the goal judges: ("ratio",) or ("ms", Stoker's value))
    rows = [
        ("images/s", "Stoker", fmt(s_ips, ".0f"), "PyTorch DataLoader",
         fmt(p_ips, ".0f"), ratio_of(s_ips, p_ips), GOAL_IMAGES, True,
         ("ratio",)),
        ("CPU-ms/image", "Stoker srv+cli", fmt(s_cpu and s_cpu * 1e3, ".2f"),
         "PyTorch DataLoader", fmt(p_ms, ".2f"), ratio_of(s_cpu, p_cpu),
         GOAL_CPU, False, ("ratio",)),
        ("client CPU-ms/image", "stoker_fetch (b)", fmt(c_ms, ".3f"),
         "DataLoader, all", fmt(p_ms, ".2f"), ratio_of(c_ms, p_ms),
         GOAL_CLIENT_MS, False, ("ms", c_ms)),
        ("client CPU-ms/image", "stoker_fetch cached", fmt(cc_ms, ".3f"),
         "DataLoader, all", fmt(p_ms, ".2f"), ratio_of(cc_ms, p_ms),
         GOAL_CLIENT_MS, False, ("ms", cc_ms)),
        ("images/s per core", "Stoker", fmt(per_core, ".0f"),
         "1-core full decode", fmt(ceiling, ".0f"),
         ratio_of(per_core, ceiling), GOAL_PER_CORE, True, ("ratio",)),
        ("GB/s loopback", "gRPC (Stoker enc.)", fmt(grpc, ".2f"),
         "TCP (iperf3)", fmt(tcp, ".2f"), ratio_of(grpc, tcp), GOAL_WIRE,
         True, ("ratio",)),
    ]
    header = ("metric", "Stoker side", "value", "reference", "value",
              "ratio", "goal", "result")
    table = [header]
    for metric, a, av, b, bv, ratio, goal, higher, judged in rows:
        on_value = judged[0] == "ms"
        table.append((metric, a, av, b, bv, fmt(ratio, ".2f") + "x"
                      if ratio is not None else "n/a",
                      (">= " if higher else "<= ") +
                      (f"{goal:.2f} ms" if on_value else f"{goal:.1f}x"),
                      verdict(judged[1] if on_value else ratio, goal,
                              higher)))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]

    def line(r):
        return "  ".join(c.ljust(w) if i in (0, 1, 3) else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths)))

    cpu_model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            cpu_model = m.group(1) if m else cpu_model
    except OSError:
        pass
    print()
    print(f"Stoker benchmark: {args.cores} of {os.cpu_count()} cores "
          f"({cpu_model}); every process in this run is pinned to CPUs "
          f"0-{args.cores - 1}.")
    print(f"Corpus: {corpus['images']} JPEGs in {corpus['shards']} shards, "
          f"{corpus['mb']:.0f} MB, sides {args.min_side}..{args.max_side} px, "
          f"quality {args.quality}; batch {args.batch_size}, transform "
          f"{args.transform}.")
    if stoker:
        print(f"Stoker: server (--threads={args.cores}) and stoker_fetch share "
              f"the same cores over loopback; {stoker['images']} images in "
              f"{stoker['epochs']} epochs after 1 warm-up epoch; CPU "
              f"server {stoker['server_cpu']:.1f} s + client "
              f"{stoker['client_cpu']:.1f} s "
              f"({stoker['images'] / stoker['server_cpu']:.0f} images per "
              f"server CPU-second).")
    if peer:
        print(f"Peer: DataLoader num_workers={args.cores}, persistent "
              f"workers, PIL decode + RandomResizedCrop(224) + "
              f"RandomHorizontalFlip() + PILToTensor(); {peer['images']} "
              f"images in {peer['epochs']} epochs after 1 warm-up epoch; CPU "
              f"main {peer['main_cpu']:.1f} s + workers "
              f"{peer['workers_cpu']:.1f} s.")
    if client:
        print(f"Client: stoker_fetch's own CPU time (getrusage) per image "
              f"received, in step b and against transport_bench's cached "
              f"batches ({client['images']} images at "
              f"{client['images_per_s']:.0f}/s); the goal is on the value.")
    print(f"Wire: one in-process gRPC stream of cached {args.batch_size}x224x"
          f"224x3 batches ({args.transport_streams} stream(s)) vs one iperf3 "
          f"TCP stream, both over 127.0.0.1.")
    print("CPU used on these cores by other processes during each step: " +
          ", ".join(f"{k} {v:.0%}" for k, v in foreign.items()) +
          (" -- the machine was shared; figures are disturbed."
           if any(v > 0.1 for v in foreign.values()) else "."))
    print()
    print(line(table[0]))
    print("  ".join("-" * w for w in widths))
    for r in table[1:]:
        print(line(r))
    if tls and stoker:
        t_ms = tls["client_cpu"] / tls["images"] * 1e3
        print(f"\nTLS (step b again, stoker_server --tls_cert, stoker_fetch "
              f"--tls_ca): {tls['images_per_s']:.0f} images/s "
              f"({ratio_of(tls['images_per_s'], s_ips):.2f}x plaintext), "
              f"CPU {tls['cpu_per_image'] * 1e3:.2f} ms/image (plaintext "
              f"{s_cpu * 1e3:.2f}), client {t_ms:.3f} ms/image (plaintext "
              f"{c_ms:.3f}).")
    if http:
        print(f"\nObject storage (step b with the shards over HTTP from "
              f"{http['how']}; a 1-byte range GET takes "
              f"{http['latency_ms']:.1f} ms; goal: HTTP >= 0.90x local "
              f"files):")
        for mode, name in (("full", "full shuffle"),
                           ("blocks", f"shuffle=blocks, window "
                                      f"{args.shuffle_window}")):
            local, remote = http["local_" + mode], http["http_" + mode]
            ratio = remote["images_per_s"] / local["images_per_s"]
            print(f"  {name:<28} local {local['images_per_s']:7.0f} images/s"
                  f"   HTTP {remote['images_per_s']:7.0f} images/s   "
                  f"{ratio:.2f}x  {'PASS' if ratio >= 0.9 else 'MISS'}   "
                  f"(CPU {local['cpu_per_image'] * 1e3:.2f} vs "
                  f"{remote['cpu_per_image'] * 1e3:.2f} ms/image)")
    print(flush=True)


# ---------------------------------------------------------------- main


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bazel_bin", default="",
                   help="Folder holding server/, client/, tools/, bench/ "
                   "binaries (default: bazel-bin next to this script or in "
                   "the current directory).")
    p.add_argument("--cores", type=int, default=os.cpu_count(),
                   help="CPUs for the whole run (the first N).")
    p.add_argument("--data_dir", default="",
                   help="Corpus folder: reused if it holds .tar shards, "
                   "written otherwise (default: a temporary folder).")
    p.add_argument("--num_shards", type=int, default=8)
    p.add_argument("--samples_per_shard", type=int, default=250)
    p.add_argument("--min_side", type=int, default=300)
    p.add_argument("--max_side", type=int, default=640)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--transform", default=DEFAULT_TRANSFORM,
                   help="Stoker's pipeline; the peer always runs "
                   "RandomResizedCrop(224)|RandomHorizontalFlip().")
    p.add_argument("--epochs", type=int, default=2,
                   help="Fewest timed epochs (both loaders).")
    p.add_argument("--min_seconds", type=float, default=10,
                   help="Time Stoker for at least about this long (adds "
                   "epochs); the peer runs the same epochs.")
    p.add_argument("--max_epochs", type=int, default=20)
    p.add_argument("--peer_epochs", type=int, default=0,
                   help="Override the peer's timed epochs (0 = as Stoker).")
    p.add_argument("--ceiling_seconds", type=float, default=3)
    p.add_argument("--client_epochs", type=int, default=6,
                   help="Timed epochs of 32 cached batches for the client "
                   "CPU step.")
    p.add_argument("--transport_seconds", type=float, default=3)
    p.add_argument("--transport_streams", type=int, default=1)
    p.add_argument("--iperf_seconds", type=int, default=5)
    p.add_argument("--server_flags", default="",
                   help="Extra stoker_server flags.")
    p.add_argument("--fetch_flags", default="",
                   help="Extra stoker_fetch flags.")
    p.add_argument("--http_rtt_ms", type=float, default=20,
                   help="Round-trip time added in front of nginx (http step).")
    p.add_argument("--shuffle_window", type=int, default=256,
                   help="Window of the http step's shuffle=blocks run.")
    p.add_argument("--skip", default="",
                   help="Comma-separated steps to skip: stoker, peer, "
                   "tls, http, ceiling, client, grpc, tcp.")
    args = p.parse_args()
    if not 1 <= args.cores <= os.cpu_count():
        sys.exit(f"--cores must be in 1..{os.cpu_count()}")
    skip = set(filter(None, args.skip.split(",")))

    # Pin this process; every child (server, client, DataLoader workers,
    # decode_ceiling, transport_bench, iperf3) inherits the affinity, the
    # same as running the whole script under `taskset -c 0-<cores-1>`.
    os.sched_setaffinity(0, set(range(args.cores)))
    bazel_bin = find_bazel_bin(args.bazel_bin)

    data_dir, temporary = make_corpus(args, bazel_bin)
    shards = list_shards(data_dir)
    corpus = {
        "shards": len(shards),
        "mb": sum(os.path.getsize(s) for s in shards) / 1e6,
        "images": None,
    }

    foreign = {}  # step -> fraction of the pinned CPUs used by others

    def attempt(name, fn):
        if name in skip:
            return None
        log(f"--- {name}")
        monitor = LoadMonitor(set(range(args.cores)))
        try:
            return fn()
        except Exception as e:  # one failed step must not hide the others
            log(f"{name} failed: {e}")
            return None
        finally:
            foreign[name] = monitor.stop()

    try:
        stoker = attempt("stoker", lambda: bench_stoker(args, bazel_bin,
                                                        data_dir))
        peer_epochs = args.peer_epochs or (stoker["epochs"]
                                           if stoker else args.epochs)
        peer = attempt("peer", lambda: bench_peer(args, data_dir, peer_epochs))
        tls = attempt("tls", lambda: bench_stoker_tls(args, bazel_bin,
                                                      data_dir))
        http = attempt("http", lambda: bench_stoker_http(args, bazel_bin,
                                                         data_dir, stoker))
        ceiling = attempt("ceiling",
                          lambda: bench_ceiling(args, bazel_bin, data_dir))
        client = attempt("client",
                         lambda: bench_client_cached(args, bazel_bin))
        grpc = attempt("grpc", lambda: bench_grpc(args, bazel_bin))
        tcp = attempt("tcp", lambda: bench_tcp(args))
        if stoker:
            corpus["images"] = stoker["images"] // stoker["epochs"]
        elif peer:
            corpus["images"] = peer["images"] // peer["epochs"]
        else:
            corpus["images"] = len(index_shards(shards))
        print_table(args, corpus, stoker, peer, ceiling, client, grpc, tcp,
                    foreign, tls, http)
    finally:
        if temporary:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
