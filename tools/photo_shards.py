#!/usr/bin/python3
"""Writes an ImageNet-like WebDataset corpus cut from real photographs.

Synthetic images decode faster than camera photos (less high-frequency
detail, smoother entropy-coded data), so benchmarks that must tell the truth
use this corpus. Each sample is a random crop of one source photo (30-100% of
its area, aspect 3:4..4:3, a random horizontal flip), resized so that its
shorter side is in [--min_side, --max_side] (ImageNet's median image is about
500x375) and saved as a baseline JPEG of quality in [--min_quality,
--max_quality], 4:2:0 subsampled like most camera and web JPEGs. Labels are
uniform in [0, --num_classes). Output: --out_dir/photos-NNNNN.tar, each
member pair <key>.jpg + <key>.cls, readable by stoker_server and tar.

The sources: every .jpg/.jpeg/.png under --photos (default: the camera
photos of Debian's mate-backgrounds package,
/usr/share/backgrounds/mate/nature, installed by tools/setup.sh).

    /usr/bin/python3 tools/photo_shards.py --out_dir=/tmp/photos \\
        --num_shards=8 --samples_per_shard=500

Deterministic: the same arguments and sources give byte-identical shards.
"""

import argparse
import io
import multiprocessing
import os
import random
import sys
import tarfile

DEFAULT_PHOTOS = "/usr/share/backgrounds/mate/nature"


def source_photos(directory):
    paths = []
    for root, _, names in os.walk(directory):
        for name in names:
            if name.lower().endswith((".jpg", ".jpeg", ".png")):
                paths.append(os.path.join(root, name))
    return sorted(paths)


_sources = None


def _load_sources(paths):
    global _sources
    from PIL import Image
    _sources = [Image.open(p).convert("RGB") for p in paths]


def _sample(args):
    """(key, jpeg bytes, label) of sample `index`."""
    index, seed, min_side, max_side, min_q, max_q, num_classes = args
    from PIL import Image
    rng = random.Random(seed * 1_000_003 + index)
    photo = _sources[rng.randrange(len(_sources))]
    width, height = photo.size
    for _ in range(20):
        area = width * height * rng.uniform(0.3, 1.0)
        aspect = rng.uniform(3 / 4, 4 / 3)
        w = int(round((area * aspect) ** 0.5))
        h = int(round((area / aspect) ** 0.5))
        if w <= width and h <= height:
            break
    else:
        w, h = width, height
    x = rng.randrange(width - w + 1)
    y = rng.randrange(height - h + 1)
    crop = photo.crop((x, y, x + w, y + h))
    if rng.random() < 0.5:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    short = rng.randint(min_side, max_side)
    scale = short / min(w, h)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    crop = crop.resize(size, Image.Resampling.BICUBIC, reducing_gap=3.0)
    out = io.BytesIO()
    crop.save(out, "JPEG", quality=rng.randint(min_q, max_q), subsampling=2)
    return f"{index:08d}", out.getvalue(), rng.randrange(num_classes)


def add_member(tar, name, data):
    """Adds a regular file (mode 644, mtime 0: shards are reproducible)."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out_dir", required=True)
    p.add_argument("--photos", default=DEFAULT_PHOTOS,
                   help="directory of source photographs")
    p.add_argument("--num_shards", type=int, default=8)
    p.add_argument("--samples_per_shard", type=int, default=500)
    p.add_argument("--min_side", type=int, default=333)
    p.add_argument("--max_side", type=int, default=500)
    p.add_argument("--min_quality", type=int, default=90)
    p.add_argument("--max_quality", type=int, default=96)
    p.add_argument("--num_classes", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    args = p.parse_args()
    if args.num_shards < 1 or args.samples_per_shard < 1:
        sys.exit("photo_shards: --num_shards and --samples_per_shard must be "
                 ">= 1")
    if not 1 <= args.min_side <= args.max_side:
        sys.exit("photo_shards: need 1 <= --min_side <= --max_side")
    if not 1 <= args.min_quality <= args.max_quality <= 100:
        sys.exit("photo_shards: need 1 <= --min_quality <= --max_quality "
                 "<= 100")
    paths = source_photos(args.photos)
    if not paths:
        sys.exit(f"photo_shards: no .jpg/.jpeg/.png photos under "
                 f"{args.photos} (install Debian's mate-backgrounds or pass "
                 "--photos)")
    os.makedirs(args.out_dir, exist_ok=True)
    total = args.num_shards * args.samples_per_shard
    work = [(i, args.seed, args.min_side, args.max_side, args.min_quality,
             args.max_quality, args.num_classes) for i in range(total)]
    nbytes = 0
    with multiprocessing.Pool(max(1, args.jobs), _load_sources,
                              (paths,)) as pool:
        samples = pool.imap(_sample, work, chunksize=16)
        for shard in range(args.num_shards):
            path = os.path.join(args.out_dir, f"photos-{shard:05d}.tar")
            with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
                for _ in range(args.samples_per_shard):
                    key, jpeg, label = next(samples)
                    add_member(tar, key + ".jpg", jpeg)
                    add_member(tar, key + ".cls", str(label).encode())
                    nbytes += len(jpeg)
    print(f"photo_shards: {total} JPEGs from {len(paths)} photos, "
          f"{nbytes / total / 1e3:.0f} kB each on average, in "
          f"{args.num_shards} shards under {args.out_dir}")


if __name__ == "__main__":
    main()
