#!/usr/bin/python3
"""Writes a WebDataset corpus of short video clips made from real photographs.

Each clip is a slow pan and zoom over one camera photo (ffmpeg's zoompan
filter over the photo scaled to twice the frame size and in 4:4:4, so that
the integer window positions zoompan uses move in steps of half an output
pixel), with light temporal noise like a camera sensor's. Per clip, drawn from
--seed: the photo, the frame size (320x240 to 640x480), 25 or 30 frames/s,
a length of --seconds_min..--seconds_max seconds, the zoom (1.0-1.5 at the
start and at the end), the window's path and the noise strength
(0..--max_noise). Codecs alternate over --codecs: h264 (libx264
-preset veryfast -crf 23, B-frames, in .mp4 with the index up front) and
vp9 (libvpx-vp9 realtime -cpu-used 8 -crf 32, in .webm). The keyframe
interval is fixed at 2 s (50 or 60 frames), so a reader that wants frames
in the middle of a clip must seek to a keyframe and decode from there.
Labels are uniform in [0, --num_classes).

Output: --out_dir/video-NNNNN.tar, clips split evenly over --num_shards in
order, each sample a member pair clipNNNNN.mp4 (or .webm) + clipNNNNN.cls
(the class as decimal text), readable by stoker_server and tar. One
summary line: clips, frames, bytes, seconds taken.

The sources: every .jpg/.jpeg/.png under --photos (default: the camera
photos of Debian's mate-backgrounds package,
/usr/share/backgrounds/mate/nature, installed by tools/setup.sh).

    /usr/bin/python3 tools/video_shards.py --out_dir=/tmp/videos
    /usr/bin/python3 tools/video_shards.py --out_dir=/tmp/videos-small \\
        --num_clips=12 --num_shards=2

Every ffmpeg runs on one thread (-threads 1 -filter_threads 1); --jobs of
them run at once (default: one per CPU). The default 64 clips (about
12,700 frames, 10 MB) take about 64 CPU-seconds: 35 s on 2 idle cores.
Deterministic: the same arguments, sources and ffmpeg build give
byte-identical shards, whatever --jobs (ffmpeg runs with -bitexact, so the
containers hold no version strings or random ids).
"""

import argparse
import concurrent.futures
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

# Beside this script: the photo corpus writer's helpers.
from photo_shards import add_member, source_photos

DEFAULT_PHOTOS = "/usr/share/backgrounds/mate/nature"
# Frame sizes (width, height): 4:3 and 16:9 from 240p to 480p.
SIZES = [(320, 240), (426, 240), (480, 270), (480, 360), (640, 360),
         (640, 480)]
FRAME_RATES = [25, 30]
GOP_SECONDS = 2
# zoompan works on the photo scaled to this multiple of the frame size.
OVERSAMPLE = 2
# Zoom factors (1 = the whole scaled photo) at a clip's start and end.
MIN_ZOOM, MAX_ZOOM = 1.0, 1.5
CODECS = {
    # name: (file extension, encoder arguments)
    "h264": ("mp4", ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23",
                     "-sc_threshold", "0", "-movflags", "+faststart",
                     "-f", "mp4"]),
    "vp9": ("webm", ["-c:v", "libvpx-vp9", "-deadline", "realtime",
                     "-cpu-used", "8", "-crf", "32", "-b:v", "0",
                     "-row-mt", "0", "-f", "webm"]),
}


def clip_plan(index, args, num_photos):
    """Everything about clip `index` that --seed decides, as a dict."""
    rng = random.Random(args.seed * 1_000_003 + index)
    codecs = args.codecs.split(",")
    width, height = SIZES[rng.randrange(len(SIZES))]
    fps = FRAME_RATES[rng.randrange(len(FRAME_RATES))]
    frames = max(2, round(rng.uniform(args.seconds_min, args.seconds_max) *
                          fps))
    ends = []
    for _ in range(2):  # start and end of the move
        zoom = rng.uniform(MIN_ZOOM, MAX_ZOOM)
        half = 0.5 / zoom  # half the window, as a fraction of the photo
        ends.append((zoom, rng.uniform(half, 1 - half),
                     rng.uniform(half, 1 - half)))
    return {
        "key": f"clip{index:05d}",
        "photo": rng.randrange(num_photos),
        "codec": codecs[index % len(codecs)],
        "width": width, "height": height, "fps": fps, "frames": frames,
        "ends": ends,
        "noise": rng.randint(0, args.max_noise),
        "noise_seed": rng.randrange(1 << 30),
        "label": rng.randrange(args.num_classes),
    }


def filter_graph(plan):
    """The -vf chain: photo -> zoompan clip of plan["frames"] frames.

    The window's zoom and centre (fractions of the photo) move linearly
    from plan["ends"][0] to [1]. A centre that keeps the window inside the
    photo at both ends keeps it inside all the way: the half-width 0.5/zoom
    is convex along the move, the centre linear."""
    (z0, x0, y0), (z1, x1, y1) = plan["ends"]
    w, h, n = plan["width"], plan["height"], plan["frames"]
    sw, sh = w * OVERSAMPLE, h * OVERSAMPLE
    p = f"(on/{n - 1})"
    zoom = f"{z0:.6f}+{z1 - z0:.6f}*{p}"
    x = f"({x0:.6f}+{x1 - x0:.6f}*{p})*iw-iw/zoom/2"
    y = f"({y0:.6f}+{y1 - y0:.6f}*{p})*ih-ih/zoom/2"
    chain = [
        f"scale={sw}:{sh}:force_original_aspect_ratio=increase:"
        "flags=bicubic",
        f"crop={sw}:{sh}",
        # 4:4:4, so zoompan's window moves in 1-pixel (not 2-pixel) steps.
        "format=yuv444p",
        f"zoompan=z='{zoom}':x='{x}':y='{y}':d={n}:s={w}x{h}:"
        f"fps={plan['fps']}",
    ]
    if plan["noise"] > 0:
        chain.append(f"noise=alls={plan['noise']}:allf=t:"
                     f"all_seed={plan['noise_seed']}")
    chain.append("format=yuv420p")
    return ",".join(chain)


def encode_clip(plan, photo, ffmpeg, scratch):
    """Runs one ffmpeg; returns (plan, the encoded file's bytes)."""
    ext, codec_args = CODECS[plan["codec"]]
    gop = GOP_SECONDS * plan["fps"]
    path = os.path.join(scratch, f"{plan['key']}.{ext}")
    cmd = [ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
           "-threads", "1", "-filter_threads", "1", "-i", photo,
           "-vf", filter_graph(plan), "-frames:v", str(plan["frames"]),
           "-threads", "1", "-g", str(gop), "-keyint_min", str(gop),
           "-pix_fmt", "yuv420p", "-map_metadata", "-1",
           "-fflags", "+bitexact", "-flags:v", "+bitexact"
           ] + codec_args + [path]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"ffmpeg failed on {plan['key']} "
                           f"({plan['codec']}, {os.path.basename(photo)}):\n"
                           f"{' '.join(cmd)}\n{result.stderr[-2000:]}")
    with open(path, "rb") as f:
        data = f.read()
    os.remove(path)
    return plan, data


def parse_args():
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Example: /usr/bin/python3 tools/video_shards.py "
        "--out_dir=/tmp/videos --num_clips=12")
    p.add_argument("--out_dir", required=True)
    p.add_argument("--photos", default=DEFAULT_PHOTOS,
                   help="directory of source photographs")
    p.add_argument("--num_clips", type=int, default=64)
    p.add_argument("--num_shards", type=int, default=4)
    p.add_argument("--seconds_min", type=float, default=5,
                   help="shortest clip, in seconds")
    p.add_argument("--seconds_max", type=float, default=10,
                   help="longest clip, in seconds")
    p.add_argument("--codecs", default="h264,vp9",
                   help="comma-separated, used in turn: h264 (.mp4), "
                   "vp9 (.webm)")
    p.add_argument("--max_noise", type=int, default=4,
                   help="strongest temporal noise (ffmpeg noise=alls), "
                   "0 for none")
    p.add_argument("--num_classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=os.cpu_count(),
                   help="ffmpeg processes at once (each on one thread)")
    p.add_argument("--ffmpeg", default=shutil.which("ffmpeg") or
                   "/usr/bin/ffmpeg")
    args = p.parse_args()
    if not 1 <= args.num_shards <= args.num_clips:
        sys.exit("video_shards: need 1 <= --num_shards <= --num_clips")
    if not 0.1 <= args.seconds_min <= args.seconds_max:
        sys.exit("video_shards: need 0.1 <= --seconds_min <= --seconds_max")
    if args.num_classes < 1 or args.max_noise < 0 or args.jobs < 1:
        sys.exit("video_shards: need --num_classes >= 1, --max_noise >= 0, "
                 "--jobs >= 1")
    unknown = set(args.codecs.split(",")) - set(CODECS)
    if unknown or not args.codecs:
        sys.exit(f"video_shards: --codecs takes a comma-separated list of "
                 f"{', '.join(CODECS)}; got {args.codecs!r}")
    if not os.access(args.ffmpeg, os.X_OK):
        sys.exit(f"video_shards: no ffmpeg at {args.ffmpeg!r} (apt-get "
                 "install ffmpeg, or pass --ffmpeg)")
    return args


def write_shards(args, plans, paths):
    """Encodes the clips (--jobs at once) and writes them in order into the
    shards; returns (frames, bytes, {codec: clips})."""
    frames = nbytes = 0
    counts = {name: 0 for name in CODECS}
    scratch = tempfile.mkdtemp(prefix="video-shards-")
    # Threads suffice: the work is in the ffmpeg processes. map() keeps
    # the clips in order, so the shards do not depend on --jobs.
    pool = concurrent.futures.ThreadPoolExecutor(args.jobs)
    try:
        clips = pool.map(lambda plan: encode_clip(
            plan, paths[plan["photo"]], args.ffmpeg, scratch), plans)
        for shard in range(args.num_shards):
            first = shard * len(plans) // args.num_shards
            end = (shard + 1) * len(plans) // args.num_shards
            path = os.path.join(args.out_dir, f"video-{shard:05d}.tar")
            # Renamed when complete: a failed run leaves no partial shard.
            partial = path + ".partial"
            with tarfile.open(partial, "w",
                              format=tarfile.USTAR_FORMAT) as tar:
                for _ in range(first, end):
                    plan, data = next(clips)
                    ext = CODECS[plan["codec"]][0]
                    add_member(tar, f"{plan['key']}.{ext}", data)
                    add_member(tar, f"{plan['key']}.cls",
                         str(plan["label"]).encode())
                    frames += plan["frames"]
                    nbytes += len(data)
                    counts[plan["codec"]] += 1
            os.replace(partial, path)
    except RuntimeError as e:
        os.remove(partial)
        sys.exit(f"video_shards: {e}")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return frames, nbytes, counts


def main():
    args = parse_args()
    paths = source_photos(args.photos)
    if not paths:
        sys.exit(f"video_shards: no .jpg/.jpeg/.png photos under "
                 f"{args.photos} (install Debian's mate-backgrounds or pass "
                 "--photos)")
    os.makedirs(args.out_dir, exist_ok=True)
    start = time.time()
    plans = [clip_plan(i, args, len(paths)) for i in range(args.num_clips)]
    frames, nbytes, counts = write_shards(args, plans, paths)
    mix = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
    print(f"video_shards: {args.num_clips} clips ({mix}) from {len(paths)} "
          f"photos, {frames} frames, {nbytes} bytes "
          f"({nbytes / args.num_clips / 1e3:.0f} kB per clip), in "
          f"{args.num_shards} shards under {args.out_dir}, "
          f"{time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
