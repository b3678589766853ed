#!/usr/bin/env python3
"""Writes WebDataset shards of many tiny samples, fast: for the web-scale
index benchmark (bench/index_bench.py) and the million-sample test.

    python3 tools/tiny_shards.py --out_dir=/tmp/tiny --samples=1000000 \\
        --shards=100

Each sample is "<key>.jpg" (one small real JPEG, the same 668 bytes for
every sample: 16x16 pixels) and "<key>.cls" (its label, the sample's number
modulo 1000); keys are "s<shard>/<number>", numbered across the dataset,
so a sample's key says its global index. Shards are "tiny-NNNNNN.tar" (ustar
headers written directly, 2.5 KB per sample). Shards already there
with the right size are kept, so a rerun only finishes what is missing.
Standard library only (the JPEG is embedded).
"""

import argparse
import multiprocessing
import os
import sys

# A 16x16 colour JPEG (quality 50) made by tools/make_sample_shards.
JPEG = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d"
    "0e1211101318281a181616183123251d283a333d3c3933383740485c4e4044574537"
    "38506d51575f626768673e4d71797064785c656763ffdb0043011112121815182f1a"
    "1a2f6342384263636363636363636363636363636363636363636363636363636363"
    "63636363636363636363636363636363636363636363ffc000110800100010030122"
    "00021101031101ffc4001f0000010501010101010100000000000000000102030405"
    "060708090a0bffc400b5100002010303020403050504040000017d01020300041105"
    "122131410613516107227114328191a1082342b1c11552d1f02433627282090a1617"
    "18191a25262728292a3435363738393a434445464748494a535455565758595a6364"
    "65666768696a737475767778797a838485868788898a92939495969798999aa2a3a4"
    "a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1"
    "e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffc4001f0100030101010101010101"
    "010000000000000102030405060708090a0bffc400b5110002010204040304070504"
    "0400010277000102031104052131061241510761711322328108144291a1b1c10923"
    "3352f0156272d10a162434e125f11718191a262728292a35363738393a4344454647"
    "48494a535455565758595a636465666768696a737475767778797a82838485868788"
    "898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6"
    "c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9faffda00"
    "0c03010002110311003f008ad18ba1d8338a592524ec9132a3b555b1bd112ed41926"
    "a699cc92127a9f4ae7c141bacdb4734da4d35b9fffd9")

BLOCK = 512


def _header(name, size):
    h = bytearray(BLOCK)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[148:156] = b"        "
    h[156] = ord("0")
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def _member(name, data):
    pad = (-len(data)) % BLOCK
    return _header(name, len(data)) + data + b"\0" * pad


def shard_path(out_dir, shard):
    return os.path.join(out_dir, "tiny-%06d.tar" % shard)


def shard_bytes(per_shard, images=True):
    """Size of a shard of `per_shard` samples."""
    sample = 2 * BLOCK
    if images:
        sample += BLOCK + BLOCK * ((len(JPEG) + BLOCK - 1) // BLOCK)
    return per_shard * sample + 2 * BLOCK


def _write_shard(job):
    out_dir, shard, first, count, images = job
    path = shard_path(out_dir, shard)
    if (os.path.exists(path) and
            os.path.getsize(path) == shard_bytes(count, images)):
        return
    parts = []
    for i in range(first, first + count):
        key = b"s%d/%d" % (shard, i)
        if images:
            parts.append(_member(key + b".jpg", JPEG))
        parts.append(_member(key + b".cls", b"%d" % (i % 1000)))
    parts.append(b"\0" * (2 * BLOCK))
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(b"".join(parts))
    os.replace(tmp, path)


def write(out_dir, samples, shards, processes=None, images=True):
    """Writes `samples` samples in `shards` shards (equal, the first ones
    one larger when they do not divide); returns the shards' glob. Without
    `images`, samples have only their label (1 KB each; for requests of
    the label field alone)."""
    os.makedirs(out_dir, exist_ok=True)
    jobs = []
    first = 0
    for s in range(shards):
        count = samples // shards + (1 if s < samples % shards else 0)
        jobs.append((out_dir, s, first, count, images))
        first += count
    with multiprocessing.Pool(processes) as pool:
        for _ in pool.imap_unordered(_write_shard, jobs):
            pass
    return os.path.join(out_dir, "tiny-*.tar")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--samples", type=int, default=1000000)
    parser.add_argument("--shards", type=int, default=100)
    args = parser.parse_args()
    if args.samples < 1 or not 1 <= args.shards <= args.samples:
        sys.exit("tiny_shards: need samples >= shards >= 1")
    print(write(args.out_dir, args.samples, args.shards))


if __name__ == "__main__":
    main()
