"""Finds where a training job's input pipeline is slow, by caching its data
at successive points and watching where throughput falls (the caching
method of the seed articles), without editing the training script.

    import stoker
    report = stoker.diagnose(
        dict(servers="stoker:50051", dataset="train", batch_size=256,
             transform="RandomResizedCrop(224)|RandomHorizontalFlip()",
             device="cuda"),
        step_fn=lambda images, labels: train_step(model, images, labels),
        steps=50, chart="ladder.svg")
    print(report.text())

On the command line (stoker_diagnose) a synthetic consumer of --step_ms per
step stands in for the model.

The ladder, for the same plan (same dataset, batch size, transform):
  1. device cached  one converted batch kept on the device, reused each step:
                    the model alone.
  2. host cached    one received uint8 batch kept in (pinned) host memory,
                    put through the loader's own copy and conversion each
                    step (on a GPU the pinned copy on the loader's stream and
                    its conversion kernel; on the CPU its staging copy and
                    host conversion): adds the copy and conversion.
  3. server replay  servers resend each request's first batch
                    (cache_mode="replay", read from the raw cache that a
                    first pass filled): adds the network and this
                    process's receiving and converting.
  4. cached raw     servers keep raw sample bytes in memory
                    (cache_mode="cached_raw", filled by that pass): adds
                    decode and transform on the servers.
  5. full           the normal pipeline: adds reading from storage.
Each rung reports steps/s, images/s and the share of time the step waited
for data (the cached rungs 1 and 2 run at least a second). Rungs 2 to 4
each do all the work of the rung above them and one stage more, so one
measured faster than the rung above it (beyond 25%, more than the run-to-run
noise of two rungs with the same limit) means the measurements are not to be
trusted (a busy machine, too few steps): the report then says so, with the
figures, and gives no verdict. (The full rung reads storage where the
cached-raw rung copies from the servers' cache; local files in the page
cache can cost less than that copy, so the full rung may be the faster.) A pipeline
runs at its slowest stage's pace, so the first rung that is already about
as slow as the full pipeline (within 10%) added the bottleneck; storage counts only if the servers' workers spent real time
reading (at least a quarter of their decode and transform time), and the
servers' per-stage timings split the decode-and-transform rung into read,
decode and transform.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    import os

    from stoker.loader import Loader

RUNGS = (
    ("device_cached", "device cached", "the model alone"),
    ("host_cached", "host cached", "+ copy and conversion"),
    ("server_replay", "server replay", "+ network and client"),
    ("cached_raw", "cached raw", "+ decode and transform on the servers"),
    ("full", "full pipeline", "+ reading from storage"),
)

# Rungs within this fraction of the full pipeline's pace count as as slow
# as it (measurement noise).
NOISE = 0.10
# A rung may run this much faster than the rung above it before the figures
# are called inconsistent: two rungs with the same limit differ by up to
# about 15% from run to run on a busy 2-core machine.
INCONSISTENT = 0.25
# The cached rungs (1 and 2) cost no data, and their steps can take well
# under a millisecond: they run at least this long (and at most
# MAX_STEP_FACTOR times `steps` steps), so one scheduling hiccup does not
# decide their pace.
CACHED_MIN_SECONDS = 1.0
MAX_STEP_FACTOR = 1000
# What the host-cached rung adds, by device type.
_COPY_ADDS = {"cuda": "+ host-to-device copy and conversion",
              "cpu": "+ staging copy and host conversion"}
# The full rung is storage bound only if the servers' read time is at least
# this share of their decode and transform time.
READ_SHARE = 0.25


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batches(loader: Loader, epoch: int = 0) -> Iterator[Any]:
    """Batches of `loader` from `epoch` on, across epoch ends."""
    while True:
        loader.set_epoch(epoch)
        got = False
        for batch in loader:
            got = True
            yield batch
        if not got:
            raise RuntimeError("the plan has no batches")
        epoch += 1


def _stage_seconds(before: dict[str, Any],
                   after: dict[str, Any]) -> dict[str, float]:
    return {k: after[k] - before[k]
            for k in ("server_read_s", "server_decode_s", "server_transform_s")}


class Rung:
    """One rung's measurement."""

    def __init__(self, key: str, name: str, adds: str) -> None:
        self.key, self.name, self.adds = key, name, adds
        self.steps = 0
        self.images = 0
        self.seconds = 0.0
        self.wait_seconds = 0.0
        # server CPU seconds by stage (rungs 4 and 5)
        self.stages: dict[str, float] | None = None
        self.servers = 0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else 0.0

    @property
    def wait_share(self) -> float:
        return self.wait_seconds / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"rung": self.key, "name": self.name, "steps": self.steps,
                "images": self.images, "seconds": self.seconds,
                "steps_per_s": self.steps_per_s,
                "images_per_s": self.images_per_s,
                "wait_share": self.wait_share, "server_stages_s": self.stages,
                "servers": self.servers}


class Report:
    """The ladder's rungs and the verdict. `device_type`: "cuda" or "cpu",
    where the batches were converted."""

    def __init__(self, rungs: Sequence[Rung], batch_size: int,
                 device_type: str = "cuda") -> None:
        self.rungs = rungs
        self.batch_size = batch_size
        self.device_type = device_type
        self.bottleneck, self.advice = self._verdict()

    def _inconsistent(self) -> list[tuple[Rung, Rung]]:
        """The rungs measured faster than the rung above them: (above,
        below) pairs. Rungs 2 to 4 each do all the work of the rung above
        them and more. The full rung is not judged against the cached-raw
        rung: it reads from storage where that one copies out of the
        servers' cache, and storage as fast as memory (local files in the
        page cache) can cost less than the copy (measured: full up to 30%
        faster on a 2-core machine)."""
        judged = self.rungs[:-1]
        return [(above, below)
                for above, below in zip(judged, judged[1:])
                if below.steps_per_s > (1 + INCONSISTENT) * above.steps_per_s]

    def _verdict(self) -> tuple[str, str]:
        faster = self._inconsistent()
        if faster:
            pairs = "; ".join(
                f"{below.name} ({below.images_per_s:.0f} images/s) ran faster "
                f"than {above.name} ({above.images_per_s:.0f} images/s), which "
                f"does less work" for above, below in faster)
            return ("inconsistent", (
                f"inconsistent measurements, no verdict: {pairs}; the machine "
                f"was busy or the rungs too short: run again on an idle "
                f"machine with more steps"))
        # Each rung adds a stage, and a pipeline runs at its slowest
        # stage's pace: the first rung that is already about as slow as the
        # full pipeline added the bottleneck.
        last = self.rungs[-1]
        slow = next(i for i, rung in enumerate(self.rungs)
                    if rung.steps_per_s <= (1 + NOISE) * last.steps_per_s)
        # Storage is only the bottleneck if the servers' workers did spend
        # real time reading (local files in the page cache cost next to
        # nothing): otherwise the gap between the last two rungs is noise.
        if slow == len(self.rungs) - 1 and last.stages:
            read = last.stages["server_read_s"]
            work = (last.stages["server_decode_s"] +
                    last.stages["server_transform_s"])
            if read < READ_SHARE * work:
                slow -= 1
        if slow == 0:
            first = self.rungs[0]
            return ("model", (
                f"model-bound: the full pipeline keeps up with the model "
                f"({last.images_per_s:.0f} of {first.images_per_s:.0f} "
                f"images/s, waiting {100 * last.wait_share:.0f}% of the "
                f"time); faster input will not speed this job up"))
        above, below = self.rungs[slow - 1], self.rungs[slow]
        lost = f"{above.images_per_s:.0f} -> {below.images_per_s:.0f} images/s"
        if below.key == "host_cached" and self.device_type == "cpu":
            return ("copy", (
                f"host conversion bound ({lost}): converting the uint8 "
                f"batches on this host's CPU is the limit; convert on a GPU "
                f"(device='cuda'), or take dtype=torch.uint8 and convert "
                f"inside the model"))
        if below.key == "host_cached":
            return ("copy", (
                f"host-to-device copy bound ({lost}): copy less (uint8 "
                f"batches, channels_last), from pinned memory, overlapped "
                f"with compute"))
        if below.key == "server_replay":
            return ("network_client", (
                f"network and client bound ({lost}): the servers could send "
                f"faster than this process receives and converts; check the "
                f"network bandwidth and this host's CPU (client CPU per "
                f"image), add streams_per_server"))
        if below.key == "cached_raw":
            want = above.images_per_s
            have = below.images_per_s
            servers = max(below.servers, 1)
            need = math.ceil(servers * want / have) if have > 0 else servers
            split = ""
            if below.stages:
                total = sum(below.stages.values()) or 1.0
                split = " (server CPU: " + ", ".join(
                    f"{name} {100 * below.stages['server_' + name + '_s'] / total:.0f}%"
                    for name in ("read", "decode", "transform")) + ")"
            return ("decode_transform", (
                f"decode and transform bound ({lost}){split}: this job needs "
                f"about {need} servers like these for {want:.0f} images/s "
                f"({servers} now)"))
        return ("storage", (
            f"storage bound ({lost}): reading the shards is slower than "
            f"decoding them; use a local cache (--cache_dir), "
            f"shuffle='blocks' for object storage, more requests in flight "
            f"(--storage_max_requests, if stoker_storage_concurrency_limit "
            f"sits at it), or faster storage"))

    def text(self) -> str:
        lines = [f"{'rung':<16}{'adds':<40}{'steps/s':>9}{'images/s':>10}"
                 f"{'waited':>8}"]
        for rung in self.rungs:
            adds = (_COPY_ADDS.get(self.device_type, rung.adds)
                    if rung.key == "host_cached" else rung.adds)
            lines.append(f"{rung.name:<16}{adds:<40}"
                         f"{rung.steps_per_s:>9.2f}{rung.images_per_s:>10.0f}"
                         f"{100 * rung.wait_share:>7.0f}%")
        for rung in self.rungs:
            if rung.stages:
                total = sum(rung.stages.values())
                per_image = {k: 1e3 * v / max(rung.images, 1)
                             for k, v in rung.stages.items()}
                lines.append(
                    f"server CPU per image, {rung.name}: read "
                    f"{per_image['server_read_s']:.2f} ms, decode "
                    f"{per_image['server_decode_s']:.2f} ms, transform "
                    f"{per_image['server_transform_s']:.2f} ms "
                    f"({total:.1f} s in all)")
        lines.append(f"bottleneck: {self.advice}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size,
                "device_type": self.device_type,
                "bottleneck": self.bottleneck,
                "advice": self.advice,
                "rungs": [r.as_dict() for r in self.rungs]}

    def write_svg(self, path: str | os.PathLike[str]) -> None:
        """A bar chart of images/s per rung (the falling one in red), with
        the share of time spent waiting for data."""
        width, height, left, top, bar_h, gap = 760, 60 + 46 * len(self.rungs), 190, 40, 28, 18
        scale = max(r.images_per_s for r in self.rungs) or 1.0
        span = width - left - 140
        rows = []
        for i, rung in enumerate(self.rungs):
            y = top + i * (bar_h + gap)
            w = span * rung.images_per_s / scale
            slow = rung.key == {
                "copy": "host_cached", "network_client": "server_replay",
                "decode_transform": "cached_raw",
                "storage": "full"}.get(self.bottleneck)
            color = "#d62728" if slow else "#1f77b4"
            rows.append(
                f'<text x="{left - 10}" y="{y + bar_h * 0.7:.1f}" '
                f'text-anchor="end">{rung.name}</text>'
                f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                f'fill="{color}"/>'
                f'<text x="{left + w + 8:.1f}" y="{y + bar_h * 0.7:.1f}">'
                f'{rung.images_per_s:.0f} img/s, waits '
                f'{100 * rung.wait_share:.0f}%</text>')
        advice = (self.advice.replace("&", "&amp;").replace("<", "&lt;")
                  .replace(">", "&gt;"))
        svg = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" font-family="sans-serif" font-size="13">'
            f'<rect width="100%" height="100%" fill="white"/>'
            f'<text x="{left}" y="22" font-size="15">Stoker input-pipeline '
            f'ladder (batch {self.batch_size}): images/s per rung</text>'
            + "".join(rows) +
            f'<text x="10" y="{height - 14}" font-size="11">{advice[:140]}'
            f'</text></svg>\n')
        with open(path, "w") as f:
            f.write(svg)


def diagnose(loader_kwargs: Mapping[str, Any],
             step_fn: (Callable[[torch.Tensor, torch.Tensor], object]
                       | None) = None,
             steps: int = 30, warmup: int = 3, step_ms: float = 0.0,
             chart: str | os.PathLike[str] | None = None,
             log: Callable[[str], object] | None = None) -> Report:
    """Runs the five rungs for `loader_kwargs` (stoker.Loader's arguments)
    and returns a Report (report.text() is the table and the verdict).

    step_fn(images, labels) is one training step; None uses a synthetic
    consumer that sleeps `step_ms` per step. Each rung runs `warmup` steps
    (the server rungs at least as many as the loader holds ahead: prefetch
    + output_slots + 2), then times `steps` (the cached rungs at least a
    second). Give the server rungs at least 30 steps: batches a loader made
    before its timed steps (up to that many) make short rungs look faster
    than they are. `chart`: a path to write the ladder as SVG."""
    from stoker.loader import Loader
    if steps < 1 or warmup < 0:
        raise ValueError("steps must be >= 1 and warmup >= 0")
    if step_fn is None:
        seconds = step_ms / 1e3

        def step_fn(images: torch.Tensor, labels: torch.Tensor) -> None:
            if seconds > 0:
                time.sleep(seconds)
    log = log or (lambda message: None)
    kwargs = dict(loader_kwargs)
    for key in ("cache_mode", "fields"):
        if kwargs.get(key) is not None:
            raise ValueError(f"diagnose sets {key} itself; leave it out")
    batch_size = kwargs.get("batch_size", 256)
    rungs = [Rung(*spec) for spec in RUNGS]

    def run(rung: Rung, batches: Iterator[tuple[torch.Tensor, torch.Tensor]],
            loader: Loader | None = None, min_seconds: float = 0.0,
            warm: int = warmup) -> None:
        """Times `steps` steps after `warm` steps, and more (up to
        MAX_STEP_FACTOR times as many) until `min_seconds` have passed; the
        time spent getting each batch is waiting."""
        # Set above; mypy does not carry that narrowing into this closure.
        assert step_fn is not None and log is not None
        device = None
        stats_before = None
        for _ in range(warm):
            images, labels = next(batches)
            device = images.device
            step_fn(images, labels)
        if device is not None:
            _sync(device)
        if loader is not None:
            stats_before = loader.stats()
        start = time.perf_counter()
        waited = 0.0
        timed = 0
        while timed < steps or (
                time.perf_counter() - start < min_seconds and
                timed < MAX_STEP_FACTOR * steps):
            t0 = time.perf_counter()
            images, labels = next(batches)
            device = images.device
            t1 = time.perf_counter()
            step_fn(images, labels)
            waited += t1 - t0
            rung.images += images.shape[0]
            timed += 1
        assert device is not None  # steps >= 1 batches were taken
        _sync(device)
        rung.seconds = time.perf_counter() - start
        rung.steps = timed
        rung.wait_seconds = waited
        if loader is not None:
            after = loader.stats()
            rung.servers = len(after["batches_by_server"])
            if rung.key in ("cached_raw", "full"):
                assert stats_before is not None  # taken with the loader
                rung.stages = _stage_seconds(stats_before, after)
        log(f"{rung.name}: {rung.images_per_s:.0f} images/s, waited "
            f"{100 * rung.wait_share:.0f}%")

    # 1. One converted batch on the device.
    with Loader(**kwargs) as first:
        images, labels = next(_batches(first))
        device = images.device
    run(rungs[0], iter(lambda: (images, labels), None),
        min_seconds=CACHED_MIN_SECONDS)

    # 2. One batch as received (uint8, NHWC memory, on the host), put
    #    through the loader's own copy and conversion every step: the same
    #    code as the full pipeline's, so this rung adds exactly that stage.
    #    (The batch ops, random erasing and MixUp / CutMix, are left out;
    #    with mixing the step gets rung 1's soft labels.)
    raw_kwargs = dict(kwargs, device="cpu", dtype=torch.uint8,
                      channels_last=True)
    with Loader(**raw_kwargs) as raw_loader:
        raw, raw_labels = next(_batches(raw_loader))
    # A closed loader still converts (its settings and allocation).
    replay = first._host_replay(raw, raw_labels)

    def replayed() -> tuple[torch.Tensor, torch.Tensor]:
        converted, hard = first._convert_replay(replay)
        return converted, labels if first._mixing else hard
    run(rungs[1], iter(replayed, None), min_seconds=CACHED_MIN_SECONDS)

    # The server rungs warm up past everything a loader holds ahead of its
    # consumer (prefetched, staged and in hand): batches made before the
    # timed steps would otherwise count as made during them.
    ahead = first._settings.prefetch + first._settings.output_slots + 2
    warm = max(warmup, ahead)
    total = warm + steps
    per_request = max(total, kwargs.get("batches_per_request", 4))
    # Servers keep raw bytes (cache_mode="cached_raw"): one pass fills their
    # cache with the batches rungs 3 and 4 then read: the first batch of
    # each replayed request (up to `requests_ahead` of them, as the
    # replaying loader runs ahead) and the batches of rung 4.
    requests_ahead = 3
    fill = requests_ahead * per_request + first._settings.prefetch
    with Loader(**dict(kwargs, cache_mode="cached_raw")) as filler:
        batches = _batches(filler)
        for _ in range(fill):
            next(batches)

    # 3. Servers replay each request's first batch (read from that cache):
    #    few decodes, so make the requests long.
    with Loader(**dict(kwargs, cache_mode="replay",
                       batches_per_request=per_request)) as loader:
        run(rungs[2], _batches(loader), loader=loader, warm=warm)

    # 4. Decode and transform from the cache, without storage.
    with Loader(**dict(kwargs, cache_mode="cached_raw")) as loader:
        run(rungs[3], _batches(loader), loader=loader, warm=warm)

    # 5. The full pipeline.
    with Loader(**kwargs) as loader:
        run(rungs[4], _batches(loader), loader=loader, warm=warm)

    report = Report(rungs, batch_size, device.type)
    if chart:
        report.write_svg(chart)
    return report


def main(argv: Sequence[str] | None = None,
         prog: str = "stoker_diagnose") -> int:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Runs the caching ladder against Stoker servers and "
        "names the input pipeline's bottleneck. A synthetic consumer "
        "(--step_ms per step) stands in for the model.")
    p.add_argument("--servers", required=True,
                   help="host:port list or dns:///name:port")
    p.add_argument("--dataset", required=True)
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--transform",
                   default="RandomResizedCrop(224)|RandomHorizontalFlip()")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--step_ms", type=float, default=0.0,
                   help="the synthetic consumer's time per step")
    p.add_argument("--shuffle_window", type=int, default=0,
                   help="shuffle='blocks' with this window (0: full shuffle)")
    p.add_argument("--chart", default="",
                   help="write the ladder as an SVG bar chart here")
    p.add_argument("--json", default="", help="write the report as JSON here")
    p.add_argument("--token_file", default="")
    p.add_argument("--tls_ca", default="")
    args = p.parse_args(argv)
    kwargs = dict(servers=args.servers, dataset=args.dataset,
                  batch_size=args.batch_size, transform=args.transform,
                  device=args.device)
    if args.shuffle_window > 0:
        kwargs.update(shuffle="blocks", shuffle_window=args.shuffle_window)
    if args.token_file:
        with open(args.token_file) as f:
            kwargs["token"] = f.read().strip()
    if args.tls_ca:
        kwargs["tls_ca"] = args.tls_ca
    report = diagnose(kwargs, steps=args.steps, warmup=args.warmup,
                      step_ms=args.step_ms, chart=args.chart or None,
                      log=lambda m: print(m, file=sys.stderr, flush=True))
    print(report.text())
    if args.chart:
        print(f"chart: {args.chart}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.as_dict(), f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
