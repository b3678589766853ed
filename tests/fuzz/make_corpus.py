#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into corpus/<target>/.

Deterministic: the same Pillow, zlib and protoc give the same bytes. Run with
Debian's interpreter (it has Pillow) from anywhere:
    /usr/bin/python3 tests/fuzz/make_corpus.py
Files it does not write (crash reproducers added by hand) are left alone.
"""

import io
import os
import subprocess
import tarfile
import tempfile

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- image: 8 parameter bytes (see image_fuzz.cc), then the image ---------

def picture(mode, w, h):
    im = Image.new("RGB", (w, h))
    im.putdata([((x * 37) % 256, (y * 53) % 256, ((x + y) * 19) % 256)
                for y in range(h) for x in range(w)])
    return im.convert(mode)


def encode(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


# Pillow 9.4 cannot write restart markers; libjpeg can (restart every MCU).
RESTART_ENCODER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <jpeglib.h>
int main(void) {
  int w, h;
  if (scanf("%d %d ", &w, &h) != 2) return 1;
  unsigned char* rgb = malloc(3 * w * h);
  if (fread(rgb, 3, w * h, stdin) != (size_t)(w * h)) return 1;
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, stdout);
  c.image_width = w;
  c.image_height = h;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  c.restart_interval = 1;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = rgb + 3 * w * c.next_scanline;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  return 0;
}
"""


def restart_jpeg(im):
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "restart.c")
        exe = os.path.join(tmp, "restart")
        with open(src, "w") as f:
            f.write(RESTART_ENCODER)
        subprocess.run(["cc", "-O1", "-o", exe, src, "-ljpeg"], check=True)
        header = b"%d %d\n" % im.size
        return subprocess.run([exe], input=header + im.tobytes(),
                              stdout=subprocess.PIPE, check=True).stdout


def image_corpus():
    # out w, out h, box x (start, span), box y (start, span), flags, shape.
    whole = bytes([15, 15, 0, 255, 0, 255, 0b111, 0b0001])
    crop = bytes([5, 9, 40, 120, 90, 200, 0b011, 0b0100])
    up = bytes([63, 40, 10, 30, 5, 20, 0b110, 0b1010])
    edge = bytes([7, 3, 128, 255, 60, 255, 0b101, 0b1111])
    jpegs = {
        "jpeg_420": encode(picture("RGB", 37, 29), "JPEG", quality=80),
        "jpeg_444": encode(picture("RGB", 16, 16), "JPEG", subsampling=0),
        "jpeg_422": encode(picture("RGB", 33, 8), "JPEG", subsampling=1),
        "jpeg_progressive": encode(picture("RGB", 40, 23), "JPEG",
                                   progressive=True, quality=60),
        "jpeg_gray": encode(picture("L", 9, 9), "JPEG"),
        "jpeg_cmyk": encode(picture("CMYK", 8, 12), "JPEG"),
        "jpeg_restart": restart_jpeg(picture("RGB", 48, 20)),
        "jpeg_exif": encode(picture("RGB", 12, 20), "JPEG",
                            exif=b"Exif\x00\x00MM\x00\x2a\x00\x00\x00\x08"
                                 b"\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01"
                                 b"\x00\x06\x00\x00\x00\x00\x00\x00"),
    }
    full = jpegs["jpeg_420"]
    jpegs["jpeg_truncated"] = full[: len(full) * 2 // 3]
    jpegs["jpeg_trailing"] = full + b"\x00trailing\xff\xd9junk"
    others = {
        "png_rgb": encode(picture("RGB", 11, 7), "PNG"),
        "png_rgba": encode(picture("RGBA", 6, 6), "PNG"),
        "png_gray16": encode(picture("L", 5, 9).convert("I"), "PNG"),
        "png_palette": encode(picture("P", 10, 4), "PNG"),
        "png_1bit": encode(picture("1", 13, 3), "PNG"),
        "png_interlaced": encode(picture("RGB", 9, 9), "PNG", interlace=1),
        "bmp": encode(picture("RGB", 5, 5), "BMP"),
        "ppm": encode(picture("RGB", 4, 3), "PPM"),
        "webp": encode(picture("RGB", 8, 8), "WEBP", lossless=True),
    }
    # Found by the fuzzer: PNM sizes up to 2^40 each made the probe's
    # width * height overflow int64 (2^32 x 2^32 wraps to 0 pixels, under
    # any limit).
    others["repro_pnm_pixel_overflow"] = b"P6\n4294967296 4294967296\n255\n"
    # Found by the fuzzer: CMYK and YCCK JPEGs went to OpenCV, which ignores
    # libjpeg's suspension at the end of the data and returned rows of
    # uninitialised memory for a JPEG cut short; this one ends after its scan
    # header.
    cmyk = encode(picture("CMYK", 64, 16), "JPEG")
    sos = cmyk.index(b"\xff\xda")
    write("image", "repro_truncated_cmyk_jpeg",
          whole + cmyk[:sos + 2 + cmyk[sos + 3] + 2])
    params = [whole, crop, up, edge]
    for i, (name, data) in enumerate(sorted({**jpegs, **others}.items())):
        write("image", name, params[i % len(params)] + data)
    # The same JPEG under every parameter set.
    for i, p in enumerate(params):
        write("image", f"jpeg_444_params{i}", p + jpegs["jpeg_444"])


# ---- shard_reader: whole tar files ------------------------------------------

def tar_bytes(members, fmt=tarfile.USTAR_FORMAT, pax_headers=None):
    """members: (name, data or None for a directory, type) tuples."""
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt,
                      pax_headers=pax_headers) as t:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
            else:
                if kind == tarfile.SYMTYPE:
                    info.linkname = "a.jpg"
                t.addfile(info)
        end = t.offset
    # Keep the two zero blocks, drop tarfile's padding to a 10 KiB record.
    return b.getvalue()[: end + 1024]


def reg(name, data):
    return (name, data, tarfile.REGTYPE)


def checksum(header):
    h = bytearray(header)
    h[148:156] = b" " * 8
    return bytes(h[:148]) + b"%06o\x00 " % sum(h) + bytes(h[156:])


def shard_corpus():
    jpg = b"\xff\xd8\xff\xe0 tiny \xff\xd9"
    write("shard_reader", "ustar_two_samples", tar_bytes([
        reg("a.cls", b"3\n"), reg("a.jpg", jpg),
        reg("b.png", b"\x89PNG fake"), reg("b.cls", b" 12 "),
    ]))
    long_dir = "train/" + "d" * 90 + "/"
    write("shard_reader", "ustar_prefix", tar_bytes([
        reg(long_dir + "n01440764_10026.JPEG", jpg),
        reg(long_dir + "n01440764_10026.cls", b"0"),
    ]))
    long_name = "x" * 120
    write("shard_reader", "gnu_longname", tar_bytes([
        reg(long_name + ".jpg", jpg), reg(long_name + ".cls", b"7\n"),
        reg("short.jpeg", jpg), reg("short.cls", b"2147483647"),
    ], fmt=tarfile.GNU_FORMAT))
    write("shard_reader", "pax_longname_global", tar_bytes([
        reg("p/" + "y" * 150 + ".png", b"\x89PNG"),
        reg("p/" + "y" * 150 + ".cls", b"5"),
    ], fmt=tarfile.PAX_FORMAT, pax_headers={"comment": "global"}))
    write("shard_reader", "odd_members", tar_bytes([
        ("dir", None, tarfile.DIRTYPE),
        ("dir/link.jpg", None, tarfile.SYMTYPE),
        reg("dir/.hidden.jpg", jpg), reg("noext", b"1"),
        reg("c.txt", b"ignored"), reg("c.jpg", jpg), reg("c.cls", b"1"),
        reg("c.jpg", jpg),  # duplicate image
        reg("d.jpg", b""), reg("d.cls", b"4"),  # empty image
        reg("e.jpg", jpg),  # no label
        reg("f.cls", b"9"),  # no image
        reg("g.jpg", jpg), reg("g.cls", b"1" * 80),  # label too long
        reg("h.JPG", jpg), reg("h.CLS", b"-1"),  # bad label text
    ]))
    ok = tar_bytes([reg("a.jpg", jpg), reg("a.cls", b"1\n"),
                    reg("b.jpg", jpg * 40), reg("b.cls", b"2\n")])
    write("shard_reader", "truncated_in_data", ok[:512 * 5 + 100])
    write("shard_reader", "no_end_marker", ok[:-1024])
    bad = bytearray(ok)
    bad[512 * 4 + 148] ^= 0x11  # corrupt the third header's checksum
    write("shard_reader", "bad_second_checksum", bytes(bad))
    write("shard_reader", "empty_archive", b"\x00" * 1024)
    # Resynchronisation after damage: archives joined with cat(1), a zeroed
    # header, and a corrupt header in front of a member that is itself a tar.
    write("shard_reader", "concatenated", ok + tar_bytes([
        reg("c.jpg", jpg), reg("c.cls", b"3\n")]))
    zeroed = bytearray(ok)
    zeroed[512 * 2:512 * 3] = bytes(512)
    write("shard_reader", "zeroed_header", bytes(zeroed))
    nested = tar_bytes([reg("n.jpg", jpg), reg("n.cls", b"1")])
    outer = bytearray(tar_bytes([reg("a.jpg", jpg), reg("a.cls", b"0"),
                                 reg("inner.tar", nested),
                                 reg("b.jpg", jpg), reg("b.cls", b"2")]))
    outer[512 * 4 + 124] = ord("x")  # unparsable size field of inner.tar
    outer[512 * 4:512 * 5] = checksum(bytes(outer[512 * 4:512 * 5]))
    write("shard_reader", "tar_in_tar_bad_size", bytes(outer))
    # Found by the fuzzer: a corrupt long-name record drops the member it
    # names; when that member's data ends the file short of a whole block,
    # the CorruptRegion ran past the end of the file (skipped_bytes too).
    lost = bytearray(tar_bytes([reg("a.jpg", jpg), reg("a.cls", b"0"),
                                reg("x" * 120 + ".jpg", b"zz")],
                               fmt=tarfile.GNU_FORMAT))
    lost[512 * 4 + 148] ^= 0x01  # the 'L' header's checksum
    with open(os.path.join(HERE, "corpus", "shard_reader",
                           "repro_region_past_end_of_file"),
              "wb") as f:
        f.write(bytes(lost[:512 * 7 + 2]))
    # GNU base-256 size field on the first member.
    base256 = bytearray(tar_bytes([reg("z.jpg", jpg), reg("z.cls", b"8")],
                                  fmt=tarfile.GNU_FORMAT))
    base256[124:136] = b"\x80" + (len(jpg)).to_bytes(11, "big")
    base256[:512] = checksum(bytes(base256[:512]))
    write("shard_reader", "gnu_base256_size", bytes(base256))


# ---- transform_spec: text, and two wire pipelines ---------------------------

def protoc_encode(message, text):
    return subprocess.run(
        ["protoc", "--proto_path=" + os.path.join(ROOT, "proto"),
         "--encode=stoker.v1." + message, "stoker.proto"],
        input=text.encode(), stdout=subprocess.PIPE, check=True).stdout


def transform_corpus():
    texts = [
        "RandomResizedCrop(224)|RandomHorizontalFlip()",
        "RandomResizedCrop((160, 192), scale=(0.35, 1), ratio=(3/4, 4/3))",
        "RandomResizedCrop((64, 48), ratio=(0.5, 2.0), interpolation=bicubic)",
        "RandomResizedCrop(size=(32, 32), scale=(1e-3, 0.5))",
        " Resize(256) | CenterCrop(224) ",
        "Resize((128, 96), interpolation=InterpolationMode.NEAREST)",
        "Resize((7, 9))|RandomHorizontalFlip(p=0.25)|RandomVerticalFlip()",
        "CenterCrop(size=16)|RandomHorizontalFlip(1)",
        "RandomCrop(32, padding=4)|RandomHorizontalFlip()",
        "RandomCrop((24, 20), padding=(1, 2, 3, 4), pad_if_needed=True, "
        "fill=(1, 2, 3))",
        "RandomResizedCrop(224)|TrivialAugmentWide()|RandomRotation(30)",
        "RandomResizedCrop(224, interpolation=bicubic)|RandomHorizontalFlip()"
        "|RandAugment(num_ops=2, magnitude=9, interpolation=bicubic)",
        "RandomResizedCrop(96)|ColorJitter(0.4, 0.4, 0.4, 0.1)"
        "|RandomGrayscale(p=0.2)|GaussianBlur(23, sigma=(0.1, 2.0))"
        "|RandomSolarize(128, p=0.2)",
        "RandomAffine(10, translate=(0.1, 0.2), scale=(0.9, 1.1), "
        "shear=(-5, 5, -3, 3))|CenterCrop(40)",
        "AutoAugment()|RandomEqualize()|RandomPosterize(4)|RandomInvert()"
        "|RandomAutocontrast()|RandomAdjustSharpness(2)|Resize((16, 16))",
        "Resize(256)",
        "CenterCrop(0)",
        "Bogus(1)",
    ]
    for i, t in enumerate(texts):
        write("transform_spec", f"text_{i:02d}", t.encode())
    write("transform_spec", "wire_crop_flip", protoc_encode(
        "TransformPipeline",
        'steps { op: "RandomResizedCrop" args { name: "size" numbers: 24 '
        'numbers: 32 tuple: true } args { name: "scale" numbers: 0.1 '
        'numbers: 0.9 tuple: true } } '
        'steps { op: "RandomHorizontalFlip" args { name: "p" numbers: 0.5 } }'))
    write("transform_spec", "wire_resize_center", protoc_encode(
        "TransformPipeline",
        'steps { op: "Resize" args { name: "size" numbers: 40 } } '
        'steps { op: "CenterCrop" args { name: "size" numbers: 32 '
        'numbers: 30 tuple: true } }'))


# ---- data_service: StreamBatchesRequest -------------------------------------

def step(op, **args):
    """A TransformStep in protobuf text form; tuples become tuple args."""
    parts = []
    for name, value in args.items():
        if isinstance(value, str):
            parts.append(f'args {{ name: "{name}" word: "{value}" }}')
        elif isinstance(value, tuple):
            numbers = " ".join(f"numbers: {v}" for v in value)
            parts.append(f'args {{ name: "{name}" {numbers} tuple: true }}')
        else:
            parts.append(f'args {{ name: "{name}" numbers: {value} }}')
    return f'steps {{ op: "{op}" {" ".join(parts)} }}'


def data_service_corpus():
    flip = ("transform { " + step("RandomResizedCrop", size=(16, 12)) + " " +
            step("RandomHorizontalFlip", p=0.5) + " }")
    center = ("transform { " + step("Resize", size=20) + " " +
              step("CenterCrop", size=8) + " }")
    augment = ("transform { " + step("RandomResizedCrop", size=12,
                                     interpolation="bicubic") + " " +
               step("TrivialAugmentWide") + " " +
               step("ColorJitter", brightness=0.4, hue=(-0.1, 0.1)) + " }")
    requests = {
        "basic": f'plan {{ dataset: "tiny" {flip} batch_size: 2 seed: 1 '
                 f'world_size: 1 shuffle: true }}',
        "range": f'plan {{ dataset: "tiny" {center} batch_size: 3 seed: 9 '
                 f'epoch: 4 world_size: 1 }} start_batch: 1 end_batch: 2',
        "augment": f'plan {{ dataset: "tiny" {augment} batch_size: 2 seed: 3 '
                   f'world_size: 1 }}',
        "fail_policy": f'plan {{ dataset: "tiny" {center} batch_size: 8 '
                       f'world_size: 1 }} bad_sample_policy: '
                       f'BAD_SAMPLE_POLICY_FAIL',
        "ranks": f'plan {{ dataset: "tiny" {flip} batch_size: 1 rank: 2 '
                 f'world_size: 3 shuffle: true drop_last: true }}',
        "fingerprint": f'plan {{ dataset: "tiny" {flip} batch_size: 1 '
                       f'world_size: 1 }} expected_fingerprint: '
                       f'"0123456789abcdef"',
        "unknown_dataset": f'plan {{ dataset: "imagenet" {flip} '
                           f'batch_size: 1 world_size: 1 }}',
        "too_large": 'plan { dataset: "tiny" transform { ' +
                     step("CenterCrop", size=512) + ' } batch_size: 4 '
                     'world_size: 1 }',
        "over_budget": 'plan { dataset: "tiny" transform { ' +
                       step("CenterCrop", size=480) + ' } '
                       'batch_size: 1 world_size: 1 }',
        "bad_range": f'plan {{ dataset: "tiny" {center} batch_size: 1 '
                     f'world_size: 1 }} start_batch: 5 end_batch: 3',
        "bad_policy": f'plan {{ dataset: "tiny" {center} batch_size: 1 '
                      f'world_size: 1 }} bad_sample_policy: 7',
        "no_transform": 'plan { dataset: "tiny" batch_size: 1 world_size: 1 }',
        "zero_batch": f'plan {{ dataset: "tiny" {center} world_size: 1 }}',
        "fields": f'plan {{ dataset: "tiny" {flip} batch_size: 2 '
                  f'world_size: 1 '
                  f'fields {{ name: "image" extensions: "jpg" '
                  f'extensions: "png" role: FIELD_ROLE_IMAGE }} '
                  f'fields {{ name: "mask" extensions: "seg.png" '
                  f'role: FIELD_ROLE_MASK missing: MISSING_POLICY_EMPTY '
                  f'channels: 1 fill: 255 }} '
                  f'fields {{ name: "label" extensions: "cls" '
                  f'role: FIELD_ROLE_CLASS }} '
                  f'fields {{ name: "raw" extensions: "cls" '
                  f'role: FIELD_ROLE_BYTES missing: MISSING_POLICY_SKIP }} }}',
        "views": f'plan {{ dataset: "tiny" {flip} batch_size: 2 '
                 f'world_size: 1 '
                 f'fields {{ name: "global" extensions: "jpg" '
                 f'extensions: "png" role: FIELD_ROLE_IMAGE repeats: 2 }} '
                 f'fields {{ name: "local" extensions: "jpg" '
                 f'extensions: "png" role: FIELD_ROLE_IMAGE repeats: 3 '
                 f'transform {{ ' + step("RandomResizedCrop", size=6) +
                 f' }} }} }}',
        "fields_no_image": f'plan {{ dataset: "tiny" {flip} batch_size: 2 '
                           f'world_size: 1 fields {{ name: "m" '
                           f'extensions: "png" role: FIELD_ROLE_MASK }} }}',
        "elastic": f'plan {{ dataset: "tiny" {flip} batch_size: 2 '
                   f'world_size: 2 rank: 1 consumed_prefix: 3 '
                   f'consumed_positions: 5 consumed_positions: 6 }}',
        "mixture": f'plan {{ {flip} batch_size: 2 world_size: 1 seed: 4 '
                   f'sources {{ dataset: "tiny" weight: 0.5 }} '
                   f'mixture_mode: MIXTURE_MODE_FIRST_EXHAUSTED '
                   f'mixture_epoch_samples: 7 }}',
        "mixture_batch": f'plan {{ {flip} batch_size: 2 world_size: 2 '
                         f'sources {{ dataset: "tiny" weight: 2 '
                         f'{center} }} mixture_unit: MIXTURE_UNIT_BATCH '
                         f'consumed_prefix: 4 epoch: 3 }}',
    }
    for name, text in requests.items():
        write("data_service", name,
              protoc_encode("StreamBatchesRequest", text))


# ---- shard_index_file: 8-byte shard size, then the sidecar index ----------

def shard_index_corpus():
    def index(shard_size, text):
        encoded = subprocess.run(
            ["protoc", "--proto_path=" + os.path.join(ROOT, "proto"),
             "--encode=stoker.index.v1.ShardIndexFile", "shard_index.proto"],
            input=text.encode(), stdout=subprocess.PIPE, check=True).stdout
        return shard_size.to_bytes(8, "little") + encoded

    member = 'members {{ extension: "{}" offset: {} size: {} }}'
    two = (
        'version: 1 shard_size: 4096 shard_name: "a.tar" '
        'samples { key: "a" image_offset: 512 image_size: 600 format: 0 '
        'label_offset: 1536 label_size: 2 ' + member.format("jpg", 512, 600) +
        ' ' + member.format("cls", 1536, 2) + ' } '
        'samples { key: "b" image_offset: 2560 image_size: 100 format: 1 '
        'label_offset: -1 defect: "no label member" ' +
        member.format("png", 2560, 100) + ' ' +
        member.format("seg.png", 3072, 90) + ' }')
    write("shard_index_file", "two_samples", index(4096, two))
    write("shard_index_file", "damaged", index(8192, (
        'version: 1 shard_size: 8192 truncation: "cut" damaged_samples: 1 '
        'corrupt_regions { offset: 1024 size: 512 reason: "bad checksum" } '
        'samples { key: "x" image_offset: 2048 image_size: 10 '
        'label_offset: 3072 label_size: 3 defect: "truncated shard: cut" '
        'damage: "truncated shard: cut" ' + member.format("jpg", 2048, 10) +
        ' }')))
    write("shard_index_file", "wrong_size", index(100, two))
    write("shard_index_file", "outside", index(4096, two.replace(
        "size: 90", "size: 9000")))
    write("shard_index_file", "empty_shard", index(0, "version: 1"))


# ---- video: 4 parameter bytes (see video_fuzz.cc), then the video ---------


def video_corpus():
    """Tiny clips (32x24, 12 frames, a keyframe every 4) in every demuxer
    and codec the decoder allows; Debian's ffmpeg makes them."""
    encodings = {
        "h264_mp4": ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-f", "mp4"],
        "h264_faststart_mp4": ["-c:v", "libx264", "-pix_fmt", "yuv420p",
                               "-movflags", "+faststart", "-f", "mp4"],
        "hevc_mkv": ["-c:v", "libx265", "-pix_fmt", "yuv420p",
                     "-x265-params", "log-level=none", "-f", "matroska"],
        "vp9_webm": ["-c:v", "libvpx-vp9", "-pix_fmt", "yuv420p",
                     "-deadline", "realtime", "-f", "webm"],
        "vp8_webm": ["-c:v", "libvpx", "-f", "webm"],
        "av1_mkv": ["-c:v", "libaom-av1", "-cpu-used", "8", "-f", "matroska"],
        "mpeg4_avi": ["-c:v", "mpeg4", "-f", "avi"],
    }
    params = [bytes([3, 1, 0, 15]), bytes([7, 2, 64, 31]),
              bytes([0, 0, 200, 0])]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, args) in enumerate(sorted(encodings.items())):
            out = os.path.join(tmp, name)
            subprocess.run(
                ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                 "testsrc2=size=32x24:rate=10:duration=1.2", "-g", "4",
                 "-threads", "1", "-fflags", "+bitexact", "-flags:v",
                 "+bitexact", *args, out], check=True)
            with open(out, "rb") as f:
                write("video", name, params[i % len(params)] + f.read())


def main():
    video_corpus()
    image_corpus()
    shard_corpus()
    shard_index_corpus()
    transform_corpus()
    data_service_corpus()


if __name__ == "__main__":
    main()
