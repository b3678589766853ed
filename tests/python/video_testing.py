"""Videos for video_test.py: small clips encoded with ffmpeg (one thread,
-bitexact), copies of them that are damaged or whose headers lie, and the
reference decode with PyAV that the server's frames are compared with."""

import io
import random
import struct
import subprocess
from typing import NamedTuple

import av
import numpy as np
from PIL import Image, ImageOps

FFMPEG = "/usr/bin/ffmpeg"
FFPROBE = "/usr/bin/ffprobe"
# Camera photos (Debian's mate-backgrounds, installed by tools/setup.sh).
PHOTOS = "/usr/share/backgrounds/mate/nature"

# Encoder arguments by codec; every encoder and filter runs on one thread.
H264 = ["-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-bf", "2",
        "-pix_fmt", "yuv420p", "-movflags", "+faststart", "-f", "mp4"]
# Lossless: every frame of a still picture decodes to the same pixels.
H264_LOSSLESS = ["-c:v", "libx264", "-preset", "veryfast", "-qp", "0",
                 "-pix_fmt", "yuv444p", "-f", "mp4"]
VP9 = ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8",
       "-crf", "32", "-b:v", "0", "-row-mt", "0", "-pix_fmt", "yuv420p",
       "-f", "webm"]
MPEG4_AVI = ["-c:v", "mpeg4", "-q:v", "5", "-f", "avi"]


def photo(name, width, height, path):
    """Writes the photo `name` (a file of PHOTOS) cropped to the aspect
    ratio and scaled to width x height, as a PNG at `path`."""
    with Image.open(f"{PHOTOS}/{name}") as image:
        fitted = ImageOps.fit(image.convert("RGB"), (width, height),
                              Image.LANCZOS)
    fitted.save(path)
    return path


def pan_source(photo_path, width, height, fps, seconds=None):
    """ffmpeg input and filter: a width x height window moving right and
    down over the photo (40 and 20 pixels a second), endless or `seconds`
    long."""
    length = [] if seconds is None else ["-t", str(seconds)]
    return (["-loop", "1", "-framerate", str(fps), *length, "-i", photo_path],
            f"crop={width}:{height}:x='t*40':y='t*20'")


def still_source(photo_path, fps):
    """ffmpeg input and filter: the photo, unchanged, in every frame."""
    return ["-loop", "1", "-framerate", str(fps), "-i", photo_path], "null"


def testsrc_source(width, height, fps):
    """ffmpeg input and filter: testsrc2 (moving colour bars and a
    counter)."""
    return (["-f", "lavfi", "-i", f"testsrc2=size={width}x{height}:"
             f"rate={fps}"], "null")


def encode(path, source, codec, frames, gop=10, extra=()):
    """Encodes `frames` frames of `source` (from the *_source functions;
    None: all the inputs give) with `codec`'s arguments, a keyframe at
    least every `gop` frames."""
    inputs, video_filter = source
    limit = [] if frames is None else ["-frames:v", str(frames)]
    subprocess.run(
        [FFMPEG, "-nostdin", "-v", "error", "-y", "-filter_threads", "1",
         *inputs, "-vf", video_filter, *limit, "-g", str(gop),
         "-threads", "1", *codec, *extra, "-bitexact", path],
        check=True)
    with open(path, "rb") as f:
        return f.read()


class Reference(NamedTuple):
    """A video decoded by PyAV: every frame in presentation order."""
    frames: list  # (H, W, 3) uint8 RGB, frame.to_ndarray(format="rgb24")
    times: list  # each frame's presentation time, seconds
    keyframes: list  # indices of the frames marked as keyframes
    fps: float  # the stream's average frame rate


def decode_reference(data):
    """Decodes every frame of the video `data` with PyAV; its RGB
    conversion is the one the server makes (swscale, bilinear)."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        frames, times, keyframes = [], [], []
        for frame in container.decode(stream):
            if frame.key_frame:
                keyframes.append(len(frames))
            frames.append(frame.to_ndarray(format="rgb24"))
            times.append(float(frame.time))
        if times != sorted(times):
            raise AssertionError("PyAV gave frames out of order")
        return Reference(frames, times, keyframes,
                         float(stream.average_rate))


def psnr(a, b):
    """PSNR in dB of two uint8 arrays of one shape (inf when equal)."""
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def probe(path):
    """ffprobe's view of `path`'s first video stream (its fields as text)
    and what ffprobe logged (warnings included)."""
    result = subprocess.run(
        [FFPROBE, "-v", "warning", "-select_streams", "v:0", "-show_entries",
         "stream=width,height,nb_frames", "-of", "default=noprint_wrappers=1",
         path], capture_output=True, text=True)
    fields = dict(line.split("=", 1) for line in result.stdout.splitlines()
                  if "=" in line)
    return fields, result.stderr


# --- Hostile inputs --------------------------------------------------------


def _riff_chunk(data, fourcc):
    """Offset of the payload of the first RIFF chunk `fourcc` in `data`."""
    at = data.find(fourcc)
    if at < 0:
        raise AssertionError(f"no {fourcc!r} chunk")
    return at + 8


def _put_u32(data, offset, value):
    data[offset:offset + 4] = struct.pack("<I", value)


def avi_claiming(avi, width=None, height=None, frames=None):
    """A copy of the AVI `avi` whose headers claim another frame size
    (avih dwWidth / dwHeight and the video strf's biWidth / biHeight) or
    frame count (avih dwTotalFrames and the video strh's dwLength); the
    stream itself is unchanged."""
    data = bytearray(avi)
    avih = _riff_chunk(data, b"avih")
    strh = _riff_chunk(data, b"strh")
    strf = _riff_chunk(data, b"strf")
    if data[strh:strh + 4] != b"vids":
        raise AssertionError("the first stream is not the video")
    if width is not None:
        _put_u32(data, avih + 32, width)
        _put_u32(data, strf + 4, width)
    if height is not None:
        _put_u32(data, avih + 36, height)
        _put_u32(data, strf + 8, height)
    if frames is not None:
        _put_u32(data, avih + 16, frames)
        _put_u32(data, strh + 32, frames)
    return bytes(data)


def _mp4_boxes(data):
    """{type: (start, end)} of the top-level boxes of an MP4."""
    boxes = {}
    at = 0
    while at + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        if size == 1:
            size = struct.unpack(">Q", data[at + 8:at + 16])[0]
        elif size == 0:
            size = len(data) - at
        boxes.setdefault(kind.decode("latin-1"), (at, at + size))
        at += size
    return boxes


def mp4_truncated(mp4):
    """The first half of `mp4`, whose index (moov) is up front: the header
    promises frames that are not there."""
    boxes = _mp4_boxes(mp4)
    if boxes["moov"][0] > boxes["mdat"][0]:
        raise AssertionError("the moov is not before the mdat (+faststart)")
    return mp4[:len(mp4) // 2]


def mp4_scrambled(mp4, seed):
    """A copy of `mp4` whose mdat's middle third is random bytes: the
    header and the first keyframe are intact, what follows is garbage."""
    start, end = _mp4_boxes(mp4)["mdat"]
    with av.open(io.BytesIO(mp4)) as container:
        first = next(container.demux(video=0))
        first_end = first.pos + first.size
    third = (end - start) // 3
    if not first_end <= start + third:
        raise AssertionError("the first keyframe reaches the damaged part")
    rng = random.Random(seed)
    data = bytearray(mp4)
    data[start + third:start + 2 * third] = rng.randbytes(third)
    return bytes(data)


def noise(size, seed):
    """`size` random bytes."""
    return random.Random(seed).randbytes(size)
