#!/usr/bin/python3
"""Video clips: Stoker against a PyTorch DataLoader decoding with PyAV, with
the same clip sampling, on the same cores, in one run.

Run with Debian's interpreter (it has torch, torchvision and PyAV), on
clips made from real photographs (tools/video_shards.py):

    bazel build -c opt //server:stoker_server //client/python:stoker
    /usr/bin/python3 tools/video_shards.py --out_dir=/tmp/videos
    /usr/bin/python3 bench/video_benchmark.py --data_dir=/tmp/videos \\
        --bazel_bin=$(bazel info -c opt bazel-bin)
    /usr/bin/python3 bench/video_benchmark.py --data_dir=/tmp/videos \\
        --skip_stoker                 # the DataLoader alone (no build)
    /usr/bin/python3 bench/video_benchmark.py --data_dir=/tmp/videos \\
        --verify_decode               # self-check of the peer's decode

Everything runs on the first --cores CPUs (this process pins itself, the
server inherits it, the DataLoader's workers pin themselves there too).

Clips (both loaders): T=--frames frames --stride source frames apart,
frame indices start, start+stride, ..., start+(T-1)*stride (presentation
order, 0 = the first frame); span = (T-1)*stride+1. --sampler random: start
uniform over [0, num_frames-span], drawn per clip; uniform: clip c of C
starts at ((num_frames-span)*c)//(C-1), or (num_frames-span)//2 if C = 1
(the benchmark takes one clip per video per epoch). A video shorter than
the span is padded: start 0, indices past the end repeat the last frame.
Then RandomResizedCrop(--size) and RandomHorizontalFlip(), drawn once per
clip and applied to all its frames; uint8 (N, T, 3, size, size) batches
and int64 labels.

  Stoker      stoker_server --threads=cores over the shards and a
              stoker.Loader(device="cpu", dtype=uint8) in this process with
              fields="video=mp4;webm:video:frames=..., label=cls:class",
              over loopback. CPU per clip = the server's utime+stime (from
              /proc while it runs) plus this process's (the loader's
              threads) over the clips delivered.
  DataLoader  a map-style dataset over the same shards (tar offsets and
              frame counts indexed once, before timing, as torchvision's
              VideoClips does) decoding with PyAV on one thread per worker:
              open the member's bytes, seek to the keyframe before the
              clip's first frame, decode forward, convert the wanted frames
              to RGB, stop after the last; torchvision's transforms.v2 where
              the installed torchvision has it, else RandomResizedCrop's
              get_params once per clip and functional.resized_crop
              (antialias) and hflip on the (T, 3, H, W) tensor.
              num_workers=cores, persistent, shuffled. CPU per clip = its
              workers' utime+stime (/proc) plus this process's.

Each loader runs one untimed warm-up epoch (DataLoader first: its workers
fork before any gRPC thread exists), then --rounds rounds alternate a timed
run of --epochs epochs of each; the table shows medians. "Decoded per
delivered" is the frames the decoder produced over the frames in the
batches: the DataLoader's is counted by its decode function, Stoker's is
the servers' count each batch reports (info["video"][name]
["frames_decoded"] beside frames_delivered).

--verify_decode checks the DataLoader's decode instead of timing: for
--verify_videos videos, clips starting at 0, at and around keyframes, at
the last start, the uniform sampler's and random ones, and a padded one,
must equal a straight decode of every frame from the start, and decode
exactly the frames from the keyframe before the clip to its last frame.
"""

import argparse
import collections
import functools
import io
import os
import random
import re
import resource
import shlex
import statistics
import sys
import tarfile
import time
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run_benchmark as rb  # noqa: E402  (helpers shared with it)

DATASET = "train"
VIDEO_EXTENSIONS = ("mp4", "webm")
SAMPLERS = ("random", "uniform")
# torchvision's RandomResizedCrop defaults, which Stoker's op shares.
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)


def log(msg):
    rb.log(msg)


def _launch():
    """client/python/stoker/launch.py (the one launcher: /proc CPU times,
    child processes) loaded on its own. It needs only the standard library;
    the stoker package loads the compiled extension, which the DataLoader
    part must not need."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "stoker_launch", os.path.join(ROOT, "client/python/stoker/launch.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


launch = _launch()


# ---------------------------------------------------------------- clips


def clip_span(frames, stride):
    """Source frames a clip covers, first to last."""
    return (frames - 1) * stride + 1


def clip_indices(num_frames, frames, stride, start):
    """The frame indices (presentation order) of the clip of `frames` frames
    `stride` apart from `start`; indices past the end repeat the last
    frame (the "pad" policy for videos shorter than the span)."""
    if num_frames < 1 or frames < 1 or stride < 1:
        raise ValueError(f"clip_indices: need num_frames, frames, stride >= "
                         f"1; got {num_frames}, {frames}, {stride}")
    if not 0 <= start < num_frames:
        raise ValueError(f"clip_indices: start {start} is outside a video "
                         f"of {num_frames} frames")
    return [min(start + k * stride, num_frames - 1) for k in range(frames)]


def clip_starts(num_frames, frames, stride, sampler, num_clips=1, rng=random):
    """First frames of `num_clips` clips of a video of `num_frames` frames.

    random: each uniform over [0, num_frames - span] (rng.randint);
    uniform: clip c at ((num_frames - span) * c) // (num_clips - 1), one
    clip at (num_frames - span) // 2. Shorter than the span: 0 (pad)."""
    last = num_frames - clip_span(frames, stride)
    if last < 0:
        return [0] * num_clips
    if sampler == "random":
        return [rng.randint(0, last) for _ in range(num_clips)]
    if sampler == "uniform":
        if num_clips == 1:
            return [last // 2]
        return [last * c // (num_clips - 1) for c in range(num_clips)]
    raise ValueError(f"clip_starts: sampler must be one of {SAMPLERS}, got "
                     f"{sampler!r}")


# ---------------------------------------------------------------- PyAV


class FrameClock:
    """Frame index <-> pts of one video stream: index = (pts - start_time)
    x time_base x average_rate, rounded (WebM's millisecond pts are not
    exact multiples of a 30 frames/s frame)."""

    def __init__(self, stream):
        self.time_base = stream.time_base
        self.rate = stream.average_rate or stream.guessed_rate
        if not self.rate or not self.time_base:
            raise RuntimeError("the video stream has no frame rate or time "
                               "base")
        self.start = stream.start_time or 0

    def index(self, pts):
        if pts is None:
            raise RuntimeError("a decoded frame has no pts")
        return round((pts - self.start) * self.time_base * self.rate)

    def seek_pts(self, index):
        """A pts a quarter frame after frame `index`'s: at or after its own
        however the muxer rounded it, before the next frame's."""
        return self.start + int((index + Fraction(1, 4)) /
                                (self.rate * self.time_base))


def _open_video(av, data):
    container = av.open(io.BytesIO(data))
    stream = container.streams.video[0]
    # One thread: the DataLoader's workers are the parallelism.
    stream.thread_type = "NONE"
    stream.thread_count = 1
    return container, stream


def count_frames(data):
    """Frames of the first video stream, counted by demuxing (no decode):
    WebM carries no frame count in its headers."""
    import av
    container, stream = _open_video(av, data)
    with container:
        return sum(1 for packet in container.demux(stream) if packet.size)


def decode_clip(data, indices):
    """The frames `indices` (presentation order; repeats allowed) of the
    video in `data` as uint8 (T, H, W, 3), and how many frames the decoder
    produced: seek to the keyframe at or before the first wanted frame,
    decode forward, convert only the wanted frames, stop after the last."""
    import av
    import numpy as np
    wanted = set(indices)
    first, last = min(wanted), max(wanted)
    kept = {}
    decoded = 0
    container, stream = _open_video(av, data)
    with container:
        clock = FrameClock(stream)
        container.seek(clock.seek_pts(first), stream=stream, backward=True,
                       any_frame=False)
        for frame in container.decode(stream):
            decoded += 1
            index = clock.index(frame.pts)
            if index in wanted:
                kept[index] = frame.to_ndarray(format="rgb24")
            if index >= last:
                break
    missing = sorted(wanted - set(kept))
    if missing:
        raise RuntimeError(f"frames {missing} not decoded (seek to frame "
                           f"{first}, {decoded} frames decoded)")
    return np.stack([kept[i] for i in indices]), decoded


def decode_all(data):
    """Every frame from the start, no seek: ([uint8 (H, W, 3)] in
    presentation order, [keyframe indices]). Raises if the indices are not
    0, 1, 2, ..."""
    import av
    frames, keyframes = [], []
    container, stream = _open_video(av, data)
    with container:
        clock = FrameClock(stream)
        for frame in container.decode(stream):
            index = clock.index(frame.pts)
            if index != len(frames):
                raise RuntimeError(f"frame {len(frames)} has index {index}")
            if frame.key_frame:
                keyframes.append(index)
            frames.append(frame.to_ndarray(format="rgb24"))
    return frames, keyframes


# ---------------------------------------------------------------- corpus


class VideoSample(collections.namedtuple(
        "VideoSample", "path offset size ext label frames")):
    """One clip of the corpus: its shard, the video member's byte offset
    and size there, its extension (mp4, webm), class and frame count."""

    def name(self):
        return f"{os.path.basename(self.path)} at byte {self.offset}"


def index_videos(shards):
    """[VideoSample] in tar order, shards sorted by path (Stoker's global
    order)."""
    samples = []
    for path in shards:
        members = {}
        with tarfile.open(path) as tar:
            for m in tar:
                if m.isfile():
                    key, _, ext = m.name.rpartition(".")
                    members.setdefault(key, {})[ext] = m
            for key, parts in members.items():
                ext = next((e for e in VIDEO_EXTENSIONS if e in parts), None)
                if ext is None or "cls" not in parts:
                    continue
                video = parts[ext]
                label = int(tar.extractfile(parts["cls"]).read().strip()
                            or 0)
                frames = count_frames(tar.extractfile(video).read())
                samples.append(VideoSample(path, video.offset_data,
                                           video.size, ext, label, frames))
    return samples


def read_member(files, sample):
    """The video's bytes; `files` caches open shards (per process)."""
    f = files.get(sample.path)
    if f is None:
        f = files[sample.path] = open(sample.path, "rb")
    f.seek(sample.offset)
    return f.read(sample.size)


# ---------------------------------------------------------------- DataLoader


def torchvision_version():
    import torchvision
    m = re.match(r"(\d+)\.(\d+)", torchvision.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def transform_path():
    """How the peer transforms a clip, for the report."""
    if torchvision_version() >= (0, 15):
        return "torchvision.transforms.v2"
    return ("RandomResizedCrop.get_params + functional.resized_crop/hflip "
            "(torchvision < 0.15 has no transforms.v2)")


class ClipTransform:
    """RandomResizedCrop(size) and RandomHorizontalFlip() drawn once per
    clip (torch's RNG: the worker's, seeded by the DataLoader) and applied
    to every frame of a uint8 (T, 3, H, W) tensor; uint8 (T, 3, size,
    size) out, antialiased."""

    def __init__(self, size):
        self.size = size
        self.v2 = None
        if torchvision_version() >= (0, 15):
            import torchvision
            if hasattr(torchvision, "disable_beta_transforms_warning"):
                torchvision.disable_beta_transforms_warning()  # 0.15, 0.16
            from torchvision.transforms import v2
            # A plain tensor is an image; leading dims (T) share the draw.
            self.v2 = v2.Compose([
                v2.RandomResizedCrop(size, scale=CROP_SCALE, ratio=CROP_RATIO,
                                     antialias=True),
                v2.RandomHorizontalFlip()])

    def __call__(self, video):
        if self.v2 is not None:
            return self.v2(video)
        import torch
        import torchvision.transforms as T
        import torchvision.transforms.functional as F
        top, left, height, width = T.RandomResizedCrop.get_params(
            video, scale=list(CROP_SCALE), ratio=list(CROP_RATIO))
        video = F.resized_crop(video, top, left, height, width,
                               [self.size, self.size], antialias=True)
        if torch.rand(1).item() < 0.5:
            video = F.hflip(video)
        return video


class VideoClipDataset:
    """torch map-style Dataset: item i is one clip of video i, as (uint8 (T,
    3, size, size), label, frames decoded for it)."""

    def __init__(self, samples, frames, stride, sampler, size):
        self.samples = samples
        self.frames = frames
        self.stride = stride
        self.sampler = sampler
        self.transform = ClipTransform(size)
        self.files = {}  # per process (opened lazily after fork)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        import torch
        sample = self.samples[i]
        # Python's `random` is seeded per worker by the DataLoader.
        start, = clip_starts(sample.frames, self.frames, self.stride,
                             self.sampler)
        indices = clip_indices(sample.frames, self.frames, self.stride,
                               start)
        try:
            pixels, decoded = decode_clip(read_member(self.files, sample),
                                          indices)
        except Exception as e:
            raise RuntimeError(f"{sample.name()}: {e}") from e
        video = torch.from_numpy(pixels).permute(0, 3, 1, 2)
        return self.transform(video), sample.label, decoded


def pin_worker(cpus, _):
    os.sched_setaffinity(0, cpus)
    import torch
    torch.set_num_threads(1)


def check_batch(video, labels, args):
    """Raises unless `video` is uint8 (N, T, 3, size, size) and `labels`
    int64 (N)."""
    import torch
    n = video.shape[0]
    want = (n, args.frames, 3, args.size, args.size)
    if (tuple(video.shape) != want or video.dtype != torch.uint8 or
            tuple(labels.shape) != (n,) or labels.dtype != torch.int64):
        raise RuntimeError(f"batch is video {tuple(video.shape)} "
                           f"{video.dtype}, label {tuple(labels.shape)} "
                           f"{labels.dtype}; want video {want} torch.uint8, "
                           f"label ({n},) torch.int64")


def children_cpu(pids):
    """utime + stime of the live processes among `pids`."""
    total = 0.0
    for pid in pids:
        try:
            total += launch.process_cpu_seconds(pid)
        except OSError:
            pass  # exited
    return total


class PeerLoader:
    """The DataLoader, its workers started and warmed up by one untimed
    epoch; run() times epochs; close() stops the workers."""

    def __init__(self, args, samples):
        import torch
        before = set(launch.child_processes(os.getpid()))
        generator = torch.Generator()
        generator.manual_seed(args.seed)
        dataset = VideoClipDataset(samples, args.frames, args.stride,
                                   args.sampler, args.size)
        self.args = args
        self.loader = torch.utils.data.DataLoader(
            dataset, batch_size=args.batch_size, shuffle=True,
            num_workers=args.cores, persistent_workers=True,
            worker_init_fn=functools.partial(pin_worker,
                                             set(range(args.cores))),
            generator=generator)
        start = time.time()
        self.per_epoch, _ = self._epoch()
        # The workers stay alive (idle between epochs), so RUSAGE_CHILDREN
        # never sees them; their CPU time is read from /proc.
        self.workers = sorted(set(launch.child_processes(os.getpid())) -
                              before)
        if len(self.workers) != args.cores:
            raise RuntimeError(f"expected {args.cores} DataLoader workers, "
                               f"found new child processes {self.workers}")
        log(f"DataLoader: warm-up epoch of {self.per_epoch} clips at "
            f"{self.per_epoch / (time.time() - start):.1f} clips/s")

    def _epoch(self):
        clips = decoded = 0
        for video, labels, frames_decoded in self.loader:
            if clips == 0:
                check_batch(video, labels, self.args)
            clips += video.shape[0]
            decoded += int(frames_decoded.sum())
        return clips, decoded

    def run(self, epochs):
        """Whole epochs (no batch the workers prefetched before the clock
        started is counted): clips/s, CPU ms per clip, decoded per
        delivered."""
        self_before = rb.rusage_seconds(resource.RUSAGE_SELF)
        workers_before = children_cpu(self.workers)
        start = time.time()
        clips = decoded = 0
        for _ in range(epochs):
            c, d = self._epoch()
            clips += c
            decoded += d
        seconds = time.time() - start
        workers = children_cpu(self.workers) - workers_before
        main = rb.rusage_seconds(resource.RUSAGE_SELF) - self_before
        return {"clips": clips, "clips_per_s": clips / seconds,
                "cpu_ms": 1e3 * (main + workers) / clips,
                "decoded_per_delivered": decoded /
                (clips * self.args.frames)}

    def close(self):
        """Shuts the workers down and waits for them, so that their CPU time
        moves to RUSAGE_CHILDREN (which LoadMonitor counts as this run's)."""
        workers = set(self.workers)
        del self.loader
        import gc
        gc.collect()
        deadline = time.time() + 10
        while workers & set(launch.child_processes(os.getpid(),
                                                   include_zombies=True)):
            if time.time() > deadline:
                log(f"DataLoader: workers {sorted(workers)} did not exit")
                break
            time.sleep(0.05)


# ---------------------------------------------------------------- Stoker


def stoker_transform(args):
    return f"RandomResizedCrop({args.size})|RandomHorizontalFlip()"


def stoker_fields(args):
    return (f"video={';'.join(VIDEO_EXTENSIONS)}:video:frames={args.frames}:"
            f"stride={args.stride}:sampler={args.sampler}, label=cls:class")


def tree_cpu_seconds(pid):
    """utime + stime of `pid` and its live children."""
    return launch.process_cpu_seconds(pid) + children_cpu(
        launch.child_processes(pid))


class StokerRun:
    """stoker_server (--threads=cores, inheriting this run's CPUs) and a
    stoker.Loader(device="cpu", dtype=uint8) in this process, over
    loopback; one untimed warm-up epoch on creation, run() times epochs."""

    def __init__(self, args, bazel_bin):
        import stoker  # bazel-bin/client/python (rb.find_bazel_bin)
        import torch
        self.args = args
        cmd = [rb.binary(bazel_bin, "server/stoker_server"), "--port=0",
               "--host=127.0.0.1",
               f"--dataset={DATASET}={rb.shard_glob(args.data_dir)}",
               f"--threads={args.cores}", "--log_level=info"
               ] + shlex.split(args.server_flags)
        self.server = rb.Server(cmd)
        try:
            self.loader = stoker.Loader(
                servers=self.server.address, dataset=DATASET,
                batch_size=args.batch_size, seed=args.seed,
                transform=stoker_transform(args), fields=stoker_fields(args),
                dtype=torch.uint8, device="cpu")
            self.epoch = 0
            # Frames the servers decoded and delivered, summed from each
            # batch's info["video"].
            self.decoded = 0
            self.delivered = 0
            start = time.time()
            self.per_epoch = self._epoch()
            log(f"Stoker: warm-up epoch of {self.per_epoch} clips at "
                f"{self.per_epoch / (time.time() - start):.1f} clips/s")
        except BaseException:
            self.log_server()
            self.close()
            raise

    def log_server(self):
        """The end of the server's log (it goes with the server)."""
        log("server log (end):\n" + self.server.log_tail())

    def _epoch(self):
        self.loader.set_epoch(self.epoch)
        self.epoch += 1
        clips = 0
        for batch, info in self.loader.iter_with_info():
            if clips == 0:
                check_batch(batch["video"], batch["label"], self.args)
            clips += batch["video"].shape[0]
            self.decoded += info["video"]["video"]["frames_decoded"]
            self.delivered += info["video"]["video"]["frames_delivered"]
        return clips

    def run(self, epochs):
        try:
            return self._run(epochs)
        except BaseException:
            self.log_server()
            raise

    def _run(self, epochs):
        counts_before = (self.decoded, self.delivered)
        skipped_before = self.loader.stats()["skipped_samples"]
        server_before = tree_cpu_seconds(self.server.process.pid)
        self_before = rb.rusage_seconds(resource.RUSAGE_SELF)
        start = time.time()
        clips = sum(self._epoch() for _ in range(epochs))
        seconds = time.time() - start
        client = rb.rusage_seconds(resource.RUSAGE_SELF) - self_before
        server = tree_cpu_seconds(self.server.process.pid) - server_before
        counts = (self.decoded, self.delivered)
        skipped = self.loader.stats()["skipped_samples"] - skipped_before
        if skipped:
            raise RuntimeError(f"{skipped} clips were skipped (server log: "
                               f"{self.server.log_path})")
        ratio = None
        if counts is not None and counts_before is not None:
            decoded = counts[0] - counts_before[0]
            delivered = counts[1] - counts_before[1]
            ratio = decoded / delivered if delivered else None
        return {"clips": clips, "clips_per_s": clips / seconds,
                "cpu_ms": 1e3 * (server + client) / clips,
                "server_ms": 1e3 * server / clips,
                "client_ms": 1e3 * client / clips,
                "decoded_per_delivered": ratio}

    def close(self):
        loader = getattr(self, "loader", None)
        if loader is not None:
            loader.close()
        self.server.stop()


# ---------------------------------------------------------------- checks


def check_clip_semantics():
    """Failures of clip_indices and clip_starts against worked examples."""
    rng = random.Random(0)
    examples = [
        (clip_indices(10, 4, 3, 0), [0, 3, 6, 9]),
        (clip_indices(5, 4, 3, 0), [0, 3, 4, 4]),  # padded
        (clip_starts(100, 4, 3, "uniform", 3), [0, 45, 90]),
        (clip_starts(100, 4, 3, "uniform", 1), [45]),
        (clip_starts(5, 4, 3, "random", 2), [0, 0]),  # shorter than span
        (sorted(set(clip_starts(12, 4, 3, "random", 200, rng))), [0, 1, 2]),
    ]
    return [f"got {got}, want {want}" for got, want in examples
            if got != want]


def verify_cases(num_frames, keyframes, args, rng):
    """(start, stride) of the clips --verify_decode checks in one video:
    0, around the second and third keyframes, the last start, the uniform
    sampler's 5, 3 random ones, and one longer than the video (padded)."""
    span = clip_span(args.frames, args.stride)
    starts = [0, num_frames - span]
    for k in keyframes[1:3]:
        starts += [k - 2, k - 1, k, k + 1]
    starts += clip_starts(num_frames, args.frames, args.stride, "uniform", 5)
    starts += clip_starts(num_frames, args.frames, args.stride, "random", 3,
                          rng)
    cases = [(s, args.stride) for s in starts if 0 <= s <= num_frames - span]
    pad_stride = num_frames // max(1, args.frames - 1) + 1
    return cases + [(0, pad_stride)]


def verify_video(data, num_frames, args, rng, name):
    """Checks one video's clips; returns (clips, failures, frames decoded,
    frames delivered)."""
    import numpy as np
    full, keyframes = decode_all(data)
    if len(full) != num_frames:
        log(f"verify: {name}: {len(full)} frames decoded, {num_frames} "
            "counted by demuxing")
        return 0, 1, 0, 0
    clips = failures = decoded_total = delivered = 0
    for start, stride in verify_cases(num_frames, keyframes, args, rng):
        indices = clip_indices(num_frames, args.frames, stride, start)
        got, decoded = decode_clip(data, indices)
        same = np.array_equal(got, np.stack([full[i] for i in indices]))
        keyframe = max(k for k in keyframes if k <= indices[0])
        least = max(indices) - keyframe + 1
        clips += 1
        decoded_total += decoded
        delivered += len(indices)
        if not same or decoded != least:
            failures += 1
            log(f"verify: {name} start {start} stride {stride}: frames "
                f"{'equal' if same else 'differ'}; {decoded} frames "
                f"decoded, {least} from the keyframe at {keyframe}")
    return clips, failures, decoded_total, delivered


def verify_decode(args, samples):
    """--verify_decode (see the module docstring): prints one line, returns
    True if every check passed."""
    import torch
    problems = check_clip_semantics()
    for problem in problems:
        log(f"verify: clip semantics: {problem}")
    # The transform's output on a real clip.
    files = {}
    sample = samples[0]
    indices = clip_indices(sample.frames, args.frames, args.stride, 0)
    pixels, _ = decode_clip(read_member(files, sample), indices)
    out = ClipTransform(args.size)(torch.from_numpy(pixels).permute(0, 3, 1,
                                                                   2))
    if (tuple(out.shape) != (args.frames, 3, args.size, args.size) or
            out.dtype != torch.uint8):
        problems.append("transform")
        log(f"verify: the transform gave {tuple(out.shape)} {out.dtype}")
    rng = random.Random(args.seed)
    totals = [0, len(problems), 0, 0]  # clips, failures, decoded, delivered
    videos = samples[:args.verify_videos]
    for sample in videos:
        result = verify_video(read_member(files, sample), sample.frames,
                              args, rng, sample.name())
        totals = [a + b for a, b in zip(totals, result)]
    for f in files.values():
        f.close()
    clips, failures, decoded, delivered = totals
    ok = failures == 0 and clips > 0
    codecs = ", ".join(sorted({s.ext for s in videos}))
    print(f"verify_decode: {'PASS' if ok else 'FAIL'}: {clips} clips of "
          f"{len(videos)} videos ({codecs}), T={args.frames} stride "
          f"{args.stride} and padded, against a full decode of every frame: "
          f"{failures} failures; {decoded / max(1, delivered):.2f} frames "
          "decoded per frame delivered")
    return ok


# ---------------------------------------------------------------- main


class ForeignLoad:
    """rb.LoadMonitor for a step in which this run's children stay alive
    (the DataLoader's workers, the server): their CPU time, read from
    /proc, is this run's own, not foreign."""

    def __init__(self, cpus):
        self.children = list(launch.child_processes(os.getpid()))
        self.children_cpu = children_cpu(self.children)
        self.monitor = rb.LoadMonitor(cpus)

    def stop(self):
        own = children_cpu(self.children) - self.children_cpu
        fraction = self.monitor.stop()
        capacity = (time.time() - self.monitor.start) * len(self.monitor.cpus)
        return max(0.0, fraction - own / capacity)


def corpus_summary(samples):
    import av
    mb = sum(s.size for s in samples) / 1e6
    frames = sum(s.frames for s in samples)
    by_ext = {e: sum(1 for s in samples if s.ext == e)
              for e in VIDEO_EXTENSIONS}
    mix = ", ".join(f"{n} .{e}" for e, n in by_ext.items() if n)
    return (f"{len(samples)} clips ({mix}), {frames} frames, {mb:.1f} MB; "
            f"PyAV {av.__version__}, libavcodec "
            f"{'.'.join(map(str, av.library_versions['libavcodec']))}")


def attempt(name, fn):
    """fn(), or None after logging why it failed (the other loader's
    figures still print)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 (a failed step prints why)
        log(f"{name} failed: {e}")
        return None


def median(results, key):
    values = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(values) if values else None


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0] + " " + __doc__.split("\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n")[3:]))
    p.add_argument("--bazel_bin", default="",
                   help="Folder holding server/stoker_server and "
                   "client/python/stoker (default: bazel-bin next to this "
                   "script or in the current directory).")
    p.add_argument("--data_dir", required=True,
                   help="Folder of video shards (tools/video_shards.py).")
    p.add_argument("--cores", type=int, default=os.cpu_count(),
                   help="CPUs for the whole run (the first N).")
    p.add_argument("--frames", type=int, default=8, help="T, frames per clip")
    p.add_argument("--stride", type=int, default=4,
                   help="source frames between a clip's frames")
    p.add_argument("--sampler", choices=SAMPLERS, default="random")
    p.add_argument("--size", type=int, default=112,
                   help="output side of RandomResizedCrop, in pixels")
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2,
                   help="Epochs per timed run (one clip per video each).")
    p.add_argument("--rounds", type=int, default=3,
                   help="Alternating timed runs of each loader.")
    p.add_argument("--server_flags", default="",
                   help="Extra stoker_server flags.")
    p.add_argument("--skip_stoker", action="store_true",
                   help="The DataLoader alone (no Stoker build needed).")
    p.add_argument("--verify_decode", action="store_true",
                   help="Check the DataLoader's seek-based decode against a "
                   "full decode, then exit (status 1 on a mismatch).")
    p.add_argument("--verify_videos", type=int, default=4,
                   help="Videos --verify_decode checks (the first N).")
    args = p.parse_args()
    if not 1 <= args.cores <= os.cpu_count():
        sys.exit(f"--cores must be in 1..{os.cpu_count()}")
    if min(args.frames, args.stride, args.size, args.batch_size,
           args.epochs, args.rounds) < 1:
        sys.exit("--frames, --stride, --size, --batch_size, --epochs and "
                 "--rounds must be >= 1")
    os.sched_setaffinity(0, set(range(args.cores)))
    shards = rb.list_shards(args.data_dir)
    if not shards:
        sys.exit(f"no .tar shards in {args.data_dir} (tools/video_shards.py "
                 "writes them)")
    samples = index_videos(shards)
    if not samples:
        sys.exit(f"no mp4/webm + cls samples in the shards of {args.data_dir}")
    corpus = corpus_summary(samples)
    log(f"corpus: {corpus}")
    if args.verify_decode:
        sys.exit(0 if verify_decode(args, samples) else 1)
    bazel_bin = None if args.skip_stoker else rb.find_bazel_bin(
        args.bazel_bin)

    # The DataLoader first: its workers fork before the Loader's gRPC
    # threads exist, and stay (persistent) for every round.
    peer = PeerLoader(args, samples)
    stoker_run = None
    try:
        if bazel_bin is not None:
            stoker_run = attempt("Stoker", lambda: StokerRun(args, bazel_bin))
        runs, foreign = run_rounds(args, {"stoker": stoker_run,
                                          "peer": peer})
    finally:
        if stoker_run is not None:
            stoker_run.close()
        peer.close()
    print_report(args, corpus, peer.per_epoch, runs, foreign)


def run_rounds(args, loaders):
    """--rounds rounds of a timed run of each loader in turn ({name: loader
    or None}); returns ({name: [results]}, {name: [foreign load]})."""
    cpus = set(range(args.cores))
    runs = {name: [] for name in loaders}
    foreign = {name: [] for name in loaders}
    for r in range(args.rounds):
        for name, loader in loaders.items():
            if loader is None:
                continue
            load = ForeignLoad(cpus)
            result = attempt(f"round {r} {name}",
                             lambda: loader.run(args.epochs))
            foreign[name].append(load.stop())
            if result is not None:
                log(f"round {r} {name}: {result}")
                runs[name].append(result)
    return runs, foreign


def print_report(args, corpus, per_epoch, runs, foreign):
    import torchvision
    span = clip_span(args.frames, args.stride)
    print(f"\nVideo clips: {corpus}")
    print(f"{args.cores} of {os.cpu_count()} cores, batch {args.batch_size}, "
          f"T={args.frames} stride {args.stride} (span {span}), sampler "
          f"{args.sampler}, {stoker_transform(args)} to uint8; "
          f"{args.epochs} epoch(s) of {per_epoch} clips per run, median of "
          f"{args.rounds} alternating rounds")
    print(f"DataLoader: num_workers={args.cores}, PyAV on one thread per "
          f"worker (seek to keyframe, decode forward), {transform_path()}; "
          f"torchvision {torchvision.__version__}")
    if not args.skip_stoker:
        print(f"Stoker: stoker_server --threads={args.cores} + stoker.Loader"
              f"(device='cpu', dtype=uint8) in this process; fields="
              f"{stoker_fields(args)!r}")
    print()
    print(f"{'loader':<28}{'clips/s':>9}{'CPU-ms/clip':>13}{'server':>9}"
          f"{'client':>9}{'decoded/delivered':>19}")
    rows = [("PyTorch DataLoader + PyAV", runs["peer"])]
    if not args.skip_stoker:
        rows.insert(0, ("Stoker", runs["stoker"]))
    for label, results in rows:
        print(f"{label:<28}"
              f"{rb.fmt(median(results, 'clips_per_s'), '.1f'):>9}"
              f"{rb.fmt(median(results, 'cpu_ms'), '.2f'):>13}"
              f"{rb.fmt(median(results, 'server_ms'), '.2f'):>9}"
              f"{rb.fmt(median(results, 'client_ms'), '.2f'):>9}"
              f"{rb.fmt(median(results, 'decoded_per_delivered'), '.2f'):>19}")
    s_rate = median(runs["stoker"], "clips_per_s")
    p_rate = median(runs["peer"], "clips_per_s")
    if s_rate and p_rate:
        s_cpu, p_cpu = median(runs["stoker"], "cpu_ms"), median(
            runs["peer"], "cpu_ms")
        print(f"Stoker / DataLoader: {s_rate / p_rate:.2f}x the clips/s, "
              f"{p_cpu / s_cpu:.2f}x less CPU per clip")
    medians = {name: statistics.median(v) for name, v in foreign.items() if v}
    print("CPU used on these cores by other processes (median per run): " +
          ", ".join(f"{name} {v:.0%}" for name, v in medians.items()) +
          (" -- the machine was shared; figures are disturbed."
           if any(v > 0.1 for v in medians.values()) else "."))


if __name__ == "__main__":
    main()