"""Video fields (role video) of stoker.Loader against real stoker_server
processes (CPU device).

setUpModule encodes small clips with ffmpeg on one thread (see
video_testing.py), all 160x120 with a keyframe at least every 10 frames:
pans over two camera photos in H.264 (MP4, B-frames) and VP9 (WebM), colour
bars in H.264 at 30 frames/s, a still photo in lossless H.264 and a 5-frame
VP9 clip. PyAV decodes each of them as the reference. A second dataset
holds good clips (H.264, VP9, MPEG-4 in AVI) beside hostile ones: an AVI
whose header claims frames of 100000x100000, an AVI claiming a million
frames, an MP4 cut in half, an MP4 whose stream after the first keyframe
is overwritten with random bytes, and random bytes named .mp4.

What is checked: with a transform that leaves frames alone, every delivered
frame equals PyAV's decode of the frame the sampler's rule names, byte for
byte (the server converts to RGB with the same swscale call), and frame
times and rates equal PyAV's; after a resize, frames are within 35 dB PSNR
of torchvision's Resize of PyAV's frames; a clip's random crop, flip and
colour jitter are drawn once for all its frames; two servers (one and two
worker threads) give the same bytes for a seed, and a resumed loader the
rest of the epoch; short videos are padded, looped or skipped; hostile
videos and videos over the server's limits are skipped and reported while
the server goes on serving; bad video field specs are ValueErrors naming
the field; float output is normalized and video_layout="CTHW" is a view;
the decoder seeks to the keyframe before each clip rather than decoding
frames twice or from the start.

Run by `bazel test //tests/python:video_test`, or by hand as
run_python_test.sh does (/usr/bin/python3 with torch, torchvision and
PyAV; /usr/bin/ffmpeg)."""

import io
import math
import os
import shutil
import subprocess
import tarfile
import unittest

import av
import numpy as np
import torch
import torchvision
from PIL import Image

import stoker
import stoker_testing as st
import video_testing as vt

WIDTH, HEIGHT = 160, 120
FPS = 25
GOP = 10
# Crops the whole frame: the frames come out as decoded.
IDENTITY = f"CenterCrop(({HEIGHT}, {WIDTH}))"
RANDOM_VIEW = ("RandomResizedCrop(48)|RandomHorizontalFlip()|"
               "ColorJitter(brightness=0.4)")
BATCH = 2
SEED = 7
SHORT = "short_vp9"
SHORT_FRAMES = 5
STILL = "still"

# Three clips of 4 frames 3 apart (span 10), placed by the uniform sampler.
UNIFORM = ("video=mp4;webm:video:frames=4:stride=3:clips=3:sampler=uniform, "
           "label=cls:class")

WORK_DIR = None
CLIPS_GLOB = None
HOSTILE_DIR = None
HOSTILE_GLOB = None
# key -> dict(ext, label, data)
CLIPS = {}
HOSTILE = {}
GOOD_HOSTILE_KEYS = ("good_h264", "good_vp9", "good_avi")
REFERENCE = {}  # key of CLIPS -> vt.Reference
SERVER = None
HOSTILE_SERVER = None


def write_shard(path, samples):
    """A tar of each sample's video (KEY.EXT) and class (KEY.cls)."""
    with tarfile.open(path, "w") as tar:
        for key, sample in samples.items():
            label = f"{sample['label']}\n".encode()
            for name, data in ((f"{key}.{sample['ext']}", sample["data"]),
                               (f"{key}.cls", label)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def make_clips(work):
    """Fills CLIPS and REFERENCE."""
    garden = vt.photo("Garden.jpg", 2 * WIDTH, 2 * HEIGHT, f"{work}/a.png")
    storm = vt.photo("Storm.jpg", 2 * WIDTH, 2 * HEIGHT, f"{work}/b.png")
    bird = vt.photo("LadyBird.jpg", WIDTH, HEIGHT, f"{work}/c.png")
    specs = [
        ("pan_h264", "mp4", vt.pan_source(garden, WIDTH, HEIGHT, FPS),
         vt.H264, 50),
        ("pan_vp9", "webm", vt.pan_source(storm, WIDTH, HEIGHT, FPS),
         vt.VP9, 50),
        ("bars_h264", "mp4", vt.testsrc_source(WIDTH, HEIGHT, 30), vt.H264,
         45),
        (STILL, "mp4", vt.still_source(bird, FPS), vt.H264_LOSSLESS, 50),
        (SHORT, "webm", vt.testsrc_source(WIDTH, HEIGHT, FPS), vt.VP9,
         SHORT_FRAMES),
    ]
    for label, (key, ext, source, codec, frames) in enumerate(specs):
        data = vt.encode(f"{work}/{key}.{ext}", source, codec, frames, GOP)
        CLIPS[key] = dict(ext=ext, label=label, data=data)
        REFERENCE[key] = vt.decode_reference(data)
        if len(REFERENCE[key].frames) != frames:
            raise AssertionError(f"{key}: PyAV decodes "
                                 f"{len(REFERENCE[key].frames)} frames")


def make_hostile(work):
    """Fills HOSTILE: three good clips and five bad ones, written to `work`
    too (for ffprobe)."""
    bars = vt.testsrc_source(96, 64, FPS)
    good = {
        "good_h264": ("mp4", vt.encode(f"{work}/g.mp4", bars, vt.H264, 25)),
        "good_vp9": ("webm", vt.encode(
            f"{work}/g.webm", vt.pan_source(f"{WORK_DIR}/a.png", 96, 64, FPS),
            vt.VP9, 25)),
        "good_avi": ("avi", vt.encode(f"{work}/g.avi", bars, vt.MPEG4_AVI,
                                      25)),
    }
    h264 = good["good_h264"][1]
    avi = good["good_avi"][1]
    bad = {
        "huge": ("avi", vt.avi_claiming(avi, width=100000, height=100000)),
        "endless": ("avi", vt.avi_claiming(avi, frames=1000000)),
        "truncated": ("mp4", vt.mp4_truncated(h264)),
        "scrambled": ("mp4", vt.mp4_scrambled(h264, seed=1)),
        "noise": ("mp4", vt.noise(20000, seed=2)),
    }
    for label, (key, (ext, data)) in enumerate({**good, **bad}.items()):
        HOSTILE[key] = dict(ext=ext, label=label, data=data)
        with open(f"{work}/{key}.{ext}", "wb") as f:
            f.write(data)


def setUpModule():
    global WORK_DIR, CLIPS_GLOB, HOSTILE_DIR, HOSTILE_GLOB, SERVER
    global HOSTILE_SERVER
    WORK_DIR = st.temp_dir("video")
    make_clips(WORK_DIR)
    write_shard(f"{WORK_DIR}/clips-00.tar", CLIPS)
    CLIPS_GLOB = f"{WORK_DIR}/clips-*.tar"
    HOSTILE_DIR = st.temp_dir("video_hostile")
    make_hostile(HOSTILE_DIR)
    write_shard(f"{HOSTILE_DIR}/hostile-00.tar", HOSTILE)
    HOSTILE_GLOB = f"{HOSTILE_DIR}/hostile-*.tar"
    SERVER = start_server(CLIPS_GLOB)
    HOSTILE_SERVER = start_server(HOSTILE_GLOB)


_started = []


def start_server(glob, flags=(), threads=1):
    """An st.Server that tearDownModule stops if the test does not."""
    server = st.Server(glob, threads=threads, flags=flags)
    _started.append(server)
    return server


def stop_server(server):
    """Kills the server and removes its log (idempotent)."""
    server.kill()
    shutil.rmtree(os.path.dirname(server.log_path), ignore_errors=True)


def tearDownModule():
    for server in _started:
        stop_server(server)
    for path in (WORK_DIR, HOSTILE_DIR):
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def make_loader(server, fields, transform=IDENTITY, **kwargs):
    args = dict(servers=server.address, dataset="train", batch_size=BATCH,
                transform=transform, seed=SEED, device="cpu",
                dtype=torch.uint8, fields=fields, unavailable_timeout=10)
    args.update(kwargs)
    return stoker.Loader(**args)


class Epoch:
    """What one epoch of a loader delivered, by sample key."""

    def __init__(self, loader, epoch=None):
        self.clips = {}  # key -> (clips, T, 3, H, W) uint8 tensor
        self.times = {}  # key -> frame times, clip by clip
        self.fps = {}
        self.labels = {}
        self.skipped = {}  # key -> reason
        self.batches = []  # (keys, video tensor) per batch
        self.frames_decoded = []  # per batch
        if epoch is not None:
            loader.set_epoch(epoch)
        for fields, info in loader.iter_with_info():
            self.add(fields, info)

    def add(self, fields, info):
        for skipped in info["skipped"]:
            self.skipped[skipped["key"]] = skipped["reason"]
        keys = info["keys"]
        video = fields["video"]
        self.batches.append((keys, video.clone()))
        if not keys:  # every sample of the batch was skipped
            return
        meta = info["video"]["video"]
        self.frames_decoded.append(meta["frames_decoded"])
        per_clip = video if video.dim() == 6 else video.unsqueeze(1)
        clips, frames = per_clip.shape[1:3]
        if meta["frames_delivered"] != len(keys) * clips * frames:
            raise AssertionError(f"frames_delivered {meta} for {keys}")
        for i, key in enumerate(keys):
            if key in self.clips:
                raise AssertionError(f"{key} delivered twice")
            self.clips[key] = per_clip[i].clone()
            self.times[key] = meta["frame_times"][i]
            self.fps[key] = meta["fps"][i]
            self.labels[key] = fields["label"][i].item()


def rgb(frame):
    """A delivered (3, H, W) frame as PyAV's (H, W, 3) array."""
    return frame.permute(1, 2, 0).numpy()


def offsets(frames, stride=1, fps=None, video_fps=None):
    """A clip's frames relative to its start: `stride` apart, or with
    fps=F at round(k * video_fps / F)."""
    if fps is not None:
        return [math.floor(k * video_fps / fps + 0.5) for k in range(frames)]
    return [k * stride for k in range(frames)]


def uniform_clips(num_frames, clip, clips, short="pad"):
    """The source frame of each frame of each clip under sampler=uniform
    (clip: offsets()); short videos padded or looped."""
    span = clip[-1] + 1
    if num_frames < span:
        wrap = ((lambda i: min(i, num_frames - 1)) if short == "pad"
                else (lambda i: i % num_frames))
        return [[wrap(i) for i in clip]] * clips
    room = num_frames - span
    starts = ([room * c // (clips - 1) for c in range(clips)] if clips > 1
              else [room // 2])
    return [[start + i for i in clip] for start in starts]


class VideoTest(unittest.TestCase):

    def assert_frames_equal_pyav(self, epoch, sources, references=None):
        """For each key of `sources`: every delivered frame equals PyAV's
        frame sources[key][c][t] (references[key], by default REFERENCE's),
        with its time; the video's rate is PyAV's."""
        mismatches = []
        for key, clips in sources.items():
            self.assertIn(key, epoch.clips, epoch.skipped.get(key))
            ref = (references or REFERENCE)[key]
            got = epoch.clips[key]
            self.assertEqual(tuple(got.shape[:2]),
                             (len(clips), len(clips[0])), key)
            self.assertAlmostEqual(epoch.fps[key], ref.fps, delta=1e-9,
                                   msg=key)
            for c, clip in enumerate(clips):
                for t, index in enumerate(clip):
                    where = f"{key} clip {c} frame {t} (source frame {index})"
                    frame = rgb(got[c, t])
                    if not np.array_equal(frame, ref.frames[index]):
                        diff = np.abs(frame.astype(np.int16) -
                                      ref.frames[index]).max()
                        mismatches.append(f"{where}: max |diff| {diff}")
                    self.assertAlmostEqual(
                        epoch.times[key][c * len(clip) + t], ref.times[index],
                        delta=1e-6, msg=where)
        self.assertEqual(mismatches, [])

    def check_exact(self, fields, transform, rule, clips):
        """One epoch of `fields` with `transform`: every video delivered,
        its frames those that rule(reference) names (a list of clips of
        source frame indices), equal to PyAV's."""
        with make_loader(SERVER, fields, transform) as loader:
            epoch = Epoch(loader)
        self.assertEqual(epoch.skipped, {})
        self.assertEqual(sorted(epoch.clips), sorted(CLIPS))
        self.assertEqual(epoch.labels,
                         {k: s["label"] for k, s in CLIPS.items()})
        _, video = epoch.batches[0]
        self.assertEqual(video.dim(), 6 if clips > 1 else 5)
        self.assertEqual(tuple(video.shape[-3:]), (3, HEIGHT, WIDTH))
        sources = {k: rule(REFERENCE[k]) for k in CLIPS}
        self.assert_frames_equal_pyav(epoch, sources)
        for decoded, (keys, _) in zip(epoch.frames_decoded, epoch.batches):
            needed = sum(len({i for c in sources[k] for i in c})
                         for k in keys)
            self.assertGreaterEqual(decoded, needed, keys)
        return sources

    def test_frames_equal_pyav_byte_for_byte(self):
        # Three clips of frames 3 apart.
        sources = self.check_exact(
            UNIFORM, IDENTITY,
            lambda ref: uniform_clips(len(ref.frames), offsets(4, stride=3),
                                      clips=3),
            clips=3)
        # The pad rule kept the short clip in its 5 frames.
        self.assertEqual(sources[SHORT], [[0, 3, 4, 4]] * 3)
        # One clip at 15 frames/s of videos at 25 and 30.
        self.check_exact(
            "video=mp4;webm:video:frames=5:fps=15:sampler=uniform, "
            "label=cls:class", IDENTITY,
            lambda ref: uniform_clips(
                len(ref.frames), offsets(5, fps=15, video_fps=ref.fps),
                clips=1),
            clips=1)

    def test_a_fields_own_transform_replaces_the_loaders(self):
        # The loader's transform would make 32x32 frames.
        self.check_exact(
            "video=mp4;webm:video:frames=4:stride=3:clips=3:sampler=uniform:"
            f"transform={IDENTITY}, label=cls:class",
            "RandomResizedCrop(32)",
            lambda ref: uniform_clips(len(ref.frames), offsets(4, stride=3),
                                      clips=3),
            clips=3)

    def test_resize_is_within_35_db_of_torchvision(self):
        size = (64, 96)
        resize = torchvision.transforms.Resize(size)
        with make_loader(SERVER, UNIFORM, f"Resize({size})") as loader:
            epoch = Epoch(loader)
        self.assertEqual(epoch.skipped, {})
        worst = (math.inf, None)
        for key in CLIPS:
            ref = REFERENCE[key]
            sources = uniform_clips(len(ref.frames), offsets(4, stride=3), 3)
            got = epoch.clips[key]
            self.assertEqual(tuple(got.shape), (3, 4, 3) + size)
            for c, clip in enumerate(sources):
                for t, index in enumerate(clip):
                    expected = np.asarray(
                        resize(Image.fromarray(ref.frames[index])))
                    worst = min(worst, (vt.psnr(rgb(got[c, t]), expected),
                                        f"{key} clip {c} frame {t}"))
        self.assertGreaterEqual(worst[0], 35, worst)

    def test_one_draw_of_geometry_and_colour_per_clip(self):
        still = REFERENCE[STILL].frames
        self.assertTrue(all(np.array_equal(f, still[0]) for f in still),
                        "the lossless still video's frames differ")
        fields = ("video=mp4;webm:video:frames=4:stride=3:clips=3, "
                  "label=cls:class")
        with make_loader(SERVER, fields, RANDOM_VIEW) as loader:
            for epoch_index in range(2):
                clips = Epoch(loader, epoch_index).clips[STILL]
                self.assertEqual(tuple(clips.shape), (3, 4, 3, 48, 48))
                for c in range(3):
                    for t in range(1, 4):
                        self.assertTrue(torch.equal(clips[c, t], clips[c, 0]),
                                        f"epoch {epoch_index} clip {c}")
                    for other in range(c):
                        self.assertFalse(torch.equal(clips[c], clips[other]),
                                         f"epoch {epoch_index} clips "
                                         f"{other} and {c}")
        # On moving pictures: a clip's frames are all flipped or none is.
        flips = set()
        with make_loader(SERVER, UNIFORM,
                         f"{IDENTITY}|RandomHorizontalFlip()") as loader:
            for epoch_index in range(2):
                epoch = Epoch(loader, epoch_index)
                for key, got in epoch.clips.items():
                    ref = REFERENCE[key]
                    sources = uniform_clips(len(ref.frames),
                                            offsets(4, stride=3), 3)
                    for c, clip in enumerate(sources):
                        seen = set()
                        for t, index in enumerate(clip):
                            frame = rgb(got[c, t])
                            if np.array_equal(frame, ref.frames[index]):
                                seen.add(False)
                            elif np.array_equal(frame,
                                                ref.frames[index][:, ::-1]):
                                seen.add(True)
                            else:
                                self.fail(f"{key} clip {c} frame {t} is "
                                          "neither the frame nor its mirror")
                        self.assertEqual(len(seen), 1, f"{key} clip {c}")
                        flips |= seen
        self.assertEqual(flips, {False, True})

    def test_same_bytes_from_two_servers_and_after_a_resume(self):
        fields = ("video=mp4;webm:video:frames=4:stride=2:clips=2, "
                  "label=cls:class")
        twin = start_server(CLIPS_GLOB, threads=2)
        self.addCleanup(stop_server, twin)

        def epoch(server, seed=SEED):
            with make_loader(server, fields, RANDOM_VIEW, seed=seed) as loader:
                return Epoch(loader)

        first, second, other = epoch(SERVER), epoch(twin), epoch(SERVER, 8)
        self.assertEqual(sorted(first.clips), sorted(CLIPS))
        starts = set()
        for key in CLIPS:
            self.assertTrue(torch.equal(first.clips[key], second.clips[key]),
                            key)
            self.assertEqual(first.times[key], second.times[key], key)
            self.assertFalse(torch.equal(first.clips[key], other.clips[key]),
                             key)
            ref = REFERENCE[key]
            for c in range(2):
                times = first.times[key][4 * c:4 * c + 4]
                index = [round((t - ref.times[0]) * ref.fps) for t in times]
                if key == SHORT:  # 5 frames < span 7: padded
                    self.assertEqual(index, [0, 2, 4, 4])
                    continue
                self.assertEqual(index, [index[0] + 2 * k for k in range(4)],
                                 key)
                self.assertTrue(0 <= index[0] <= len(ref.frames) - 7, key)
                starts.add(index[0])
        self.assertGreater(len(starts), 1, "the random sampler never moved")

        # Resume after the first batch: the rest of the epoch, same bytes.
        with make_loader(SERVER, fields, RANDOM_VIEW) as loader:
            it = loader.iter_with_info()
            next(it)
            state = loader.state_dict()
        with make_loader(SERVER, fields, RANDOM_VIEW) as resumed:
            resumed.load_state_dict(state)
            rest = Epoch(resumed)
        self.assertEqual([k for k, _ in rest.batches],
                         [k for k, _ in first.batches[1:]])
        for (keys, a), (_, b) in zip(rest.batches, first.batches[1:]):
            self.assertTrue(torch.equal(a, b), keys)

    def test_short_videos_are_padded_looped_or_skipped(self):
        base = ("video=mp4;webm:video:frames=4:stride=2:sampler=uniform"
                "{}, label=cls:class")
        clip = offsets(4, stride=2)  # span 7 > SHORT_FRAMES
        for policy, option, indices in (("pad", ":short=pad", [0, 2, 4, 4]),
                                        ("default", "", [0, 2, 4, 4]),
                                        ("loop", ":short=loop", [0, 2, 4, 1])):
            with self.subTest(policy=policy), \
                    make_loader(SERVER, base.format(option)) as loader:
                epoch = Epoch(loader)
                self.assertEqual(epoch.skipped, {})
                rule = "loop" if policy == "loop" else "pad"
                self.assertEqual(
                    uniform_clips(SHORT_FRAMES, clip, 1, rule), [indices])
                sources = {k: uniform_clips(len(REFERENCE[k].frames), clip, 1,
                                            rule) for k in CLIPS}
                self.assert_frames_equal_pyav(epoch, sources)
        with make_loader(SERVER, base.format(":short=skip")) as loader:
            epoch = Epoch(loader)
        self.assertEqual(sorted(epoch.clips), sorted(set(CLIPS) - {SHORT}))
        self.assertEqual(list(epoch.skipped), [SHORT])
        self.assertIn("shorter than a clip", epoch.skipped[SHORT])

    def test_hostile_videos_are_skipped_and_the_server_goes_on(self):
        fields, header = vt.probe(f"{HOSTILE_DIR}/huge.avi")
        # FFmpeg reads the claim from the header (and refuses to open a
        # decoder for it); the stream info it reports comes from the
        # MPEG-4 bitstream, which still says 96x64.
        self.assertIn("100000x100000", header)
        fields, _ = vt.probe(f"{HOSTILE_DIR}/endless.avi")
        self.assertEqual(fields["nb_frames"], "1000000")
        with av.open(f"{HOSTILE_DIR}/endless.avi") as container:
            self.assertEqual(container.streams.video[0].frames, 1000000)

        reasons = {
            "huge": r"100000x100000 .* over the limit",
            "endless": r"over the limit",
            "truncated": r"does not decode|does not read|ends before|corrupt",
            "scrambled": r"does not decode|does not read|ends before|corrupt",
            "noise": r"not a video",
        }
        # Every frame of the 1-second clips.
        fields = "video=mp4;webm;avi:video:frames=25, label=cls:class"
        for epoch_index in range(2):
            with make_loader(HOSTILE_SERVER, fields, "Resize((32, 48))",
                             batch_size=3) as loader:
                epoch = Epoch(loader, epoch_index)
            self.assertEqual(sorted(epoch.clips), sorted(GOOD_HOSTILE_KEYS))
            self.assertEqual(sorted(epoch.skipped), sorted(reasons))
            for key, pattern in reasons.items():
                self.assertRegex(epoch.skipped[key],
                                 f"^field 'video': video: .*({pattern})")
            for key in GOOD_HOSTILE_KEYS:
                self.assertEqual(tuple(epoch.clips[key].shape),
                                 (1, 25, 3, 32, 48))
                self.assertEqual(epoch.labels[key], HOSTILE[key]["label"])
        self.assertIsNone(HOSTILE_SERVER.process.poll())

    def test_videos_over_the_servers_limits_are_skipped(self):
        limited = start_server(CLIPS_GLOB, flags=["--video_max_frames=48"])
        self.addCleanup(stop_server, limited)
        with make_loader(limited, UNIFORM) as loader:
            epoch = Epoch(loader)
        long = {k for k, ref in REFERENCE.items() if len(ref.frames) > 48}
        self.assertEqual(long, {"pan_h264", "pan_vp9", STILL})
        self.assertEqual(sorted(epoch.skipped), sorted(long))
        for key in long:
            self.assertIn("50 frames, over the limit of 48",
                          epoch.skipped[key])
        self.assertEqual(sorted(epoch.clips), sorted(set(CLIPS) - long))

    def test_bad_video_fields_are_value_errors_naming_the_field(self):
        for fields, name in (
                ("clip=mp4:video", "'clip'"),
                ("clip=mp4:video:frames=0", "'clip'"),
                ("clip=mp4:video:frames=4:sampler=bogus", "'clip'"),
                ("clip=mp4:video:frames=4:short=never", "'clip'"),
                ("clip=mp4:video:frames=4:fps=0", "'clip'"),
                ("clip=mp4:video:frames=4:speed=2", "'clip'"),
                # Checked by the server: the first iteration raises.
                ("clip=mp4:video:frames=4:empty", "'clip'"),
                ("clip=mp4:video:frames=4, img=jpg:image", "'img'"),
                ("img=jpg:image, clip=mp4:video:frames=4", "'clip'"),
                ("clip=mp4:video:frames=4, other=webm:video:frames=4",
                 "'other'"),
                ("clip=mp4:video:frames=4, m=png:mask", "'m'")):
            with self.subTest(fields=fields):
                with self.assertRaises(ValueError) as caught:
                    with make_loader(SERVER, fields) as loader:
                        next(iter(loader))
                self.assertIsInstance(caught.exception,
                                      stoker.InvalidArgumentError)
                self.assertIn(name, str(caught.exception))
        with self.assertRaisesRegex(ValueError, "video_layout"):
            make_loader(SERVER, UNIFORM, video_layout="THWC")

    def test_float_frames_are_normalized_and_cthw_is_a_view(self):
        fields = UNIFORM.replace("frames=4:stride=3", "frames=3:stride=4")
        mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
        with make_loader(SERVER, fields) as raw, \
                make_loader(SERVER, fields, dtype=torch.float32, mean=mean,
                            std=std, video_layout="CTHW") as normalized:
            batches = 0
            for a, (b, info) in zip(raw, normalized.iter_with_info()):
                batches += 1
                n = len(info["keys"])
                video = b["video"]
                self.assertEqual(video.dtype, torch.float32)
                self.assertEqual(tuple(video.shape),
                                 (n, 3, 3, 3, HEIGHT, WIDTH))
                # (N, clips, C, T, H, W) over (N, clips, T, C, H, W) memory.
                self.assertTrue(video.movedim(-4, -3).is_contiguous())
                m = torch.tensor(mean, dtype=torch.float64).view(3, 1, 1, 1)
                s = torch.tensor(std, dtype=torch.float64).view(3, 1, 1, 1)
                expected = (a["video"].movedim(-3, -4).to(torch.float64) /
                            255 - m) / s
                self.assertLess(
                    (video.to(torch.float64) - expected).abs().max().item(),
                    1e-6)
            self.assertEqual(batches, len(raw))

    def test_decoder_seeks_to_the_keyframe_before_each_clip(self):
        # The decoder header's promise: seek to the keyframe at or before
        # each wanted frame when that skips decoding, so one sample never
        # decodes more than the frames from the keyframe before each clip
        # to the clip's end.
        with make_loader(SERVER, UNIFORM, batch_size=1,
                         shuffle=False) as loader:
            epoch = Epoch(loader)
        excess = []
        for (keys, _), decoded in zip(epoch.batches, epoch.frames_decoded):
            (key,) = keys
            ref = REFERENCE[key]
            needed = set()
            for clip in uniform_clips(len(ref.frames), offsets(4, stride=3),
                                      3):
                keyframe = max(k for k in ref.keyframes if k <= clip[0])
                needed.update(range(keyframe, clip[-1] + 1))
            if decoded > len(needed):
                excess.append(f"{key}: {decoded} frames decoded, "
                              f"{len(needed)} needed of {len(ref.frames)}")
        self.assertEqual(excess, [])

    def test_a_webm_whose_audio_outlasts_the_video(self):
        # Matroska gives no per-stream frame count or duration; the video
        # has 50 frames however long the file's other streams are.
        work = st.temp_dir("video_audio")
        self.addCleanup(shutil.rmtree, work, True)
        inputs, video_filter = vt.pan_source(f"{WORK_DIR}/b.png", WIDTH,
                                             HEIGHT, FPS, seconds=2)
        source = (inputs + ["-f", "lavfi", "-i",
                            "sine=frequency=440:duration=3"], video_filter)
        data = vt.encode(f"{work}/a.webm", source, vt.VP9, None,
                         extra=["-c:a", "libopus"])
        with av.open(io.BytesIO(data)) as container:
            self.assertGreater(container.duration / 1e6, 2.9)
        ref = vt.decode_reference(data)
        self.assertEqual(len(ref.frames), 50)
        write_shard(f"{work}/audio-00.tar",
                    {"with_audio": dict(ext="webm", label=0, data=data)})
        server = start_server(f"{work}/audio-*.tar")
        self.addCleanup(stop_server, server)
        with make_loader(server, UNIFORM) as loader:
            epoch = Epoch(loader)
        self.assertEqual(epoch.skipped, {})
        self.assert_frames_equal_pyav(
            epoch, {"with_audio": uniform_clips(50, offsets(4, stride=3), 3)},
            references={"with_audio": ref})


    def test_cut_videos_count_from_their_first_frame(self):
        # A segment of `ffmpeg -f segment` starts at a later time (Matroska
        # gives its start only in its packets, its DURATION tag is an end
        # time), and `-ss 0.5 -c copy` leaves an MP4 edit list whose sample
        # count includes frames that are never shown.
        work = st.temp_dir("video_cut")
        self.addCleanup(shutil.rmtree, work, True)
        whole = vt.encode(f"{work}/whole.mp4",
                          vt.pan_source(f"{WORK_DIR}/b.png", WIDTH, HEIGHT,
                                        FPS, seconds=3), vt.H264, None)
        subprocess.run(
            [vt.FFMPEG, "-nostdin", "-v", "error", "-y", "-i",
             f"{work}/whole.mp4", "-c", "copy", "-f", "segment",
             "-segment_time", "1", "-segment_format", "matroska",
             f"{work}/seg-%d.mkv"], check=True)
        subprocess.run(
            [vt.FFMPEG, "-nostdin", "-v", "error", "-y", "-ss", "0.5", "-i",
             f"{work}/whole.mp4", "-c", "copy", f"{work}/trimmed.mp4"],
            check=True)
        samples, references, clips = {}, {}, {}
        for key, path, ext in (("segment", f"{work}/seg-1.mkv", "webm"),
                               ("trimmed", f"{work}/trimmed.mp4", "mp4")):
            with open(path, "rb") as f:
                data = f.read()
            references[key] = vt.decode_reference(data)
            frames = len(references[key].frames)
            self.assertGreater(frames, 10, key)
            samples[key] = dict(ext=ext, label=0, data=data)
            clips[key] = uniform_clips(frames, offsets(4, stride=3), 3)
        self.assertGreater(references["segment"].times[0], 0.5)
        self.assertLess(len(references["trimmed"].frames),
                        len(vt.decode_reference(whole).frames))
        write_shard(f"{work}/cut-00.tar", samples)
        server = start_server(f"{work}/cut-*.tar")
        self.addCleanup(stop_server, server)
        with make_loader(server, UNIFORM) as loader:
            epoch = Epoch(loader)
        self.assertEqual(epoch.skipped, {})
        self.assert_frames_equal_pyav(epoch, clips, references=references)


if __name__ == "__main__":
    unittest.main()
