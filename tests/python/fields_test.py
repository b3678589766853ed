"""stoker.Loader(fields=...) against a real stoker_server (CPU device).

The shards are written here with Python's tarfile and PIL (not with the
project's own shard writer): a JPEG image, a label mask (PNG, mode "L",
random labels from a set unique to the sample), an RGB mask whose channels
are (v, v + 1, v + 2), a caption with non-ASCII (and for one sample invalid
UTF-8) text, JSON and a class per key; one key lacks its masks and another
its class, and one JSON is larger than the room the loader keeps for bytes
values in its pinned buffers. Exact mask geometry is tested in C++
(tests/fields_test.cc); here every mask pixel must be one of its own
sample's labels.

Run by `bazel test //tests/python:fields_test`."""

import io
import json
import os
import random
import tarfile
import unittest

import torch
from PIL import Image

import stoker
import stoker_testing as st

BATCH = 4
SEED = 5
SIZE = 32  # st.TRANSFORM's output
NUM_SHARDS = 2
PER_SHARD = 9
NO_MASK = "sample0004"
NO_CLASS = "sample0011"
INVALID_UTF8 = "sample0007"
# Its batch's payload exceeds the room the loader's pinned buffers keep for
# bytes fields (4 KiB per sample), so it arrives in heap memory instead.
LARGE_JSON = "sample0013"
NUM_CLASSES = 7

FIELDS = ("image=jpg:image, mask=seg.png:mask:skip, caption=txt:text, "
          "meta=json:bytes, label=cls:class")

SOURCES = {}  # key -> dict(labels, caption, json, cls)
SERVER = None


def _encode(image, fmt):
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def write_shards():
    """Writes the shards; returns their glob and fills SOURCES."""
    out_dir = st.temp_dir("fields_shards")
    rng = random.Random(11)
    index = 0
    for shard in range(NUM_SHARDS):
        path = os.path.join(out_dir, f"fields-{shard:02d}.tar")
        with tarfile.open(path, "w") as tar:
            for _ in range(PER_SHARD):
                key = f"sample{index:04d}"
                width, height = rng.randint(40, 110), rng.randint(40, 110)
                pixels = bytes(rng.randrange(256)
                               for _ in range(width * height * 3))
                image = Image.frombytes("RGB", (width, height), pixels)
                # Labels 1 + 10 * index + k: never 0 (the default fill) and
                # never another sample's.
                labels = [1 + 10 * index + k for k in range(4)]
                values = [rng.choice(labels) for _ in range(width * height)]
                mask = Image.frombytes("L", (width, height), bytes(values))
                rgb = Image.frombytes(
                    "RGB", (width, height),
                    bytes(b for v in values for b in (v, v + 1, v + 2)))
                caption = f"légende n°{index}: 日本語 ☕".encode("utf-8")
                if key == INVALID_UTF8:
                    caption = b"bad \xff\xfe utf-8 \xc3"
                meta = {"id": index, "nom": "é"}
                if key == LARGE_JSON:
                    meta["pad"] = "x" * 100000
                meta = json.dumps(meta, ensure_ascii=False).encode("utf-8")
                cls = index % NUM_CLASSES
                members = [(key + ".jpg", _encode(image, "JPEG")),
                           (key + ".txt", caption), (key + ".json", meta)]
                if key != NO_MASK:
                    members.append((key + ".seg.png", _encode(mask, "PNG")))
                    members.append((key + ".rgb.png", _encode(rgb, "PNG")))
                if key != NO_CLASS:
                    members.append((key + ".cls", f"{cls}\n".encode()))
                for name, data in members:
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                SOURCES[key] = dict(labels=set(labels), caption=caption,
                                    json=meta, cls=cls)
                index += 1
    return os.path.join(out_dir, "*.tar")


def setUpModule():
    global SERVER
    SERVER = st.Server(write_shards())


def tearDownModule():
    SERVER.kill()


def make_loader(**kwargs):
    return st.cpu_loader(SERVER, **{"batch_size": BATCH, "seed": SEED,
                                    **kwargs})


def classic_images(epoch, **kwargs):
    """{key: image} of a loader without fields for the same seed and
    epoch."""
    loader = make_loader(**kwargs)
    loader.set_epoch(epoch)
    out = {}
    for images, _, info in loader.iter_with_info():
        for i, key in enumerate(info["keys"]):
            out[key] = images[i]
    loader.close()
    return out


def check_mask(test, mask, key):
    """Every pixel of `mask` (any shape) is one of the sample's labels."""
    values = set(torch.unique(mask).tolist())
    test.assertTrue(values <= SOURCES[key]["labels"],
                    f"{key}: mask values {sorted(values)} not among "
                    f"{sorted(SOURCES[key]['labels'])}")


class FieldsTest(unittest.TestCase):

    def test_dict_of_fields_matches_the_sources_once_per_epoch(self):
        loader = make_loader(fields=FIELDS, dtype=torch.uint8)
        self.assertEqual(loader.fields,
                         ["image", "mask", "caption", "meta", "label"])
        for epoch in range(2):
            # Held to the end of the epoch: each batch's values must
            # survive the reuse of the loader's buffers.
            batches = list(loader.iter_with_info())
            self.assertEqual(loader.epoch, epoch)
            classic = classic_images(epoch, dtype=torch.uint8)
            seen = []
            skipped = set()
            for fields, info in batches:
                self.assertIsInstance(fields, dict)
                self.assertEqual(list(fields),
                                 ["image", "mask", "caption", "meta", "label"])
                keys = info["keys"]
                n = len(keys)
                image, mask = fields["image"], fields["mask"]
                self.assertEqual(image.dtype, torch.uint8)
                self.assertEqual(tuple(image.shape), (n, 3, SIZE, SIZE))
                self.assertEqual(mask.dtype, torch.uint8)
                self.assertEqual(mask.device.type, "cpu")
                self.assertEqual(tuple(mask.shape), (n, SIZE, SIZE))
                self.assertTrue(mask.is_contiguous())
                label = fields["label"]
                self.assertEqual(label.dtype, torch.int64)
                self.assertEqual(tuple(label.shape), (n,))
                self.assertEqual(label.tolist(),
                                 [SOURCES[k]["cls"] for k in keys])
                self.assertEqual(info["labels"], label.tolist())
                self.assertEqual(len(fields["caption"]), n)
                self.assertEqual(len(fields["meta"]), n)
                for i, key in enumerate(keys):
                    check_mask(self, mask[i], key)
                    caption = fields["caption"][i]
                    self.assertIsInstance(caption, str)
                    self.assertEqual(
                        caption, SOURCES[key]["caption"].decode(
                            "utf-8", "surrogateescape"))
                    self.assertEqual(
                        caption.encode("utf-8", "surrogateescape"),
                        SOURCES[key]["caption"])
                    self.assertIsInstance(fields["meta"][i], bytes)
                    self.assertEqual(fields["meta"][i], SOURCES[key]["json"])
                    self.assertTrue(torch.equal(image[i], classic[key]), key)
                seen.extend(keys)
                skipped.update(s["key"] for s in info["skipped"])
            # The key without a mask is left out (skip), the one without a
            # class too (error policy: a bad sample, skipped and reported);
            # every other sample comes exactly once.
            expected = sorted(set(SOURCES) - {NO_MASK, NO_CLASS})
            self.assertEqual(sorted(seen), expected)
            self.assertEqual(skipped, {NO_MASK, NO_CLASS})
        self.assertEqual(loader.stats()["skipped_samples"], 4)
        loader.close()

    def test_text_keeps_invalid_utf8_with_surrogateescape(self):
        loader = make_loader(fields="image=jpg:image, caption=txt:text, "
                             "raw=txt:bytes")
        found = False
        for fields in loader:
            for caption, raw in zip(fields["caption"], fields["raw"]):
                self.assertEqual(caption.encode("utf-8", "surrogateescape"),
                                 raw)
                if raw == SOURCES[INVALID_UTF8]["caption"]:
                    found = True
                    self.assertIn("\udcff", caption)
        self.assertTrue(found)

    def test_tuple_in_the_order_asked_with_float_images(self):
        fields = ("label=cls:class:empty, caption=txt:text, "
                  "image=jpg:image, mask=seg.png:mask:empty:fill=255")
        loader = make_loader(fields=fields, fields_as_tuple=True)
        loader.set_epoch(1)
        classic = classic_images(1)  # float32, ImageNet mean / std
        seen = set()
        for item, info in loader.iter_with_info():
            self.assertIsInstance(item, tuple)
            self.assertEqual(len(item), 4)
            label, caption, image, mask = item
            self.assertEqual(image.dtype, torch.float32)
            self.assertIsInstance(caption, list)
            for i, key in enumerate(info["keys"]):
                seen.add(key)
                if key == NO_MASK:
                    # Kept under `empty`: the mask is all fill.
                    self.assertTrue(bool((mask[i] == 255).all()))
                else:
                    check_mask(self, mask[i], key)
                if key == NO_CLASS:
                    self.assertEqual(label[i].item(), -1)
                else:
                    self.assertEqual(label[i].item(), SOURCES[key]["cls"])
                if key in classic:  # the classic request skips NO_CLASS
                    self.assertTrue(torch.equal(image[i], classic[key]), key)
            self.assertEqual(info["skipped"], [])
        self.assertEqual(seen, set(SOURCES))

    def test_multichannel_masks_are_channel_first(self):
        for channels_last in (False, True):
            loader = make_loader(
                fields="image=jpg:image, rgb=rgb.png:mask:skip:channels=3",
                dtype=torch.uint8, channels_last=channels_last)
            for fields in loader:
                mask = fields["rgb"]
                n = fields["image"].shape[0]
                self.assertEqual(tuple(mask.shape), (n, 3, SIZE, SIZE))
                self.assertEqual(
                    mask.is_contiguous(memory_format=torch.channels_last),
                    channels_last)
                self.assertEqual(mask.is_contiguous(), not channels_last)
                self.assertTrue(torch.equal(mask[:, 1], mask[:, 0] + 1))
                self.assertTrue(torch.equal(mask[:, 2], mask[:, 0] + 2))
            loader.close()

    def test_random_erasing_leaves_masks_alone(self):
        fields = "image=jpg:image, mask=seg.png:mask:skip"
        plain = make_loader(fields=fields)
        erased = make_loader(fields=fields, random_erasing=1.0)
        erased_batches = 0
        for a, (b, info) in zip(plain, erased.iter_with_info()):
            self.assertTrue(torch.equal(a["mask"], b["mask"]))
            if any(box is not None for box in info["erase"]):
                self.assertFalse(torch.equal(a["image"], b["image"]))
                erased_batches += 1
        self.assertGreater(erased_batches, 0)

    def test_mixing_uses_the_first_class_field(self):
        loader = make_loader(fields="image=jpg:image, label=cls:class, "
                             "caption=txt:text", mixup_alpha=0.4,
                             num_classes=NUM_CLASSES)
        for fields, info in loader.iter_with_info():
            n = len(info["keys"])
            label = fields["label"]
            self.assertEqual(label.dtype, torch.float32)
            self.assertEqual(tuple(label.shape), (n, NUM_CLASSES))
            self.assertTrue(torch.allclose(label.sum(1), torch.ones(n)))
            self.assertEqual(info["labels"],
                             [SOURCES[k]["cls"] for k in info["keys"]])
            self.assertIn("mix", info)

    def test_stoker_fetch_writes_the_fields_out(self):
        out = st.temp_dir("fields_out")
        # The class may be missing (written as -1); the mask may not.
        fields = FIELDS.replace("label=cls:class", "label=cls:class:empty")
        st.fetch(SERVER.address, f"--fields={fields}", f"--fields_out={out}",
                 f"--transform={st.TRANSFORM}", "--batch_size=4",
                 "--epochs=1")
        written = os.listdir(os.path.join(out, "0"))
        delivered = {k for k in SOURCES if k != NO_MASK}
        for key in SOURCES:
            files = {f for f in written if f.startswith(key + ".")}
            if key not in delivered:
                self.assertEqual(files, set(), key)  # skipped: no mask
                continue
            self.assertEqual(files, {f"{key}.image.ppm", f"{key}.mask.pgm",
                                     f"{key}.caption", f"{key}.meta",
                                     f"{key}.label"}, key)

            def read(name):
                with open(os.path.join(out, "0", f"{key}.{name}"), "rb") as f:
                    return f.read()

            self.assertEqual(read("caption"), SOURCES[key]["caption"])
            self.assertEqual(read("meta"), SOURCES[key]["json"])
            self.assertEqual(read("label"), b"-1\n" if key == NO_CLASS
                             else f"{SOURCES[key]['cls']}\n".encode())
            self.assertTrue(read("mask.pgm").startswith(b"P5\n32 32\n255\n"))
            self.assertEqual(len(read("image.ppm")),
                             len(b"P6\n32 32\n255\n") + 32 * 32 * 3)

    def test_resume_with_the_same_fields(self):
        loader = make_loader(fields=FIELDS)
        full = [info["keys"] for _, info in loader.iter_with_info()]
        loader.set_epoch(0)
        it = loader.iter_with_info()
        next(it)
        next(it)
        state = loader.state_dict()
        resumed = make_loader(fields=FIELDS)
        resumed.load_state_dict(state)
        rest = [info["keys"] for _, info in resumed.iter_with_info()]
        self.assertEqual(rest, full[2:])
        # Other fields are another plan: the state is refused, as it is for
        # a loader without fields.
        for other in (make_loader(fields="image=jpg:image, label=cls:class"),
                      make_loader()):
            with self.assertRaisesRegex(ValueError, "the fields differ"):
                other.load_state_dict(state)

    def test_bad_fields_are_value_errors_naming_the_field(self):
        for fields, why in (
                ("image=jpg:image, mask=seg.png:blob", "mask"),
                ("image=jpg:image, m=seg.png:mask:channels=9", "'m'"),
                ("image=jpg", "image"),
                ("image=jpg:image, x=txt:text, x=json:bytes", "'x'"),
                ("m=seg.png:mask, t=txt:text", "no image field"),
                (7, "fields must be a str")):
            with self.assertRaises(ValueError, msg=fields) as caught:
                make_loader(fields=fields)
            self.assertIn(why, str(caught.exception), fields)
        with self.assertRaisesRegex(ValueError, "needs fields"):
            make_loader(fields_as_tuple=True)
        # What only the server checks fails the first iteration, also as a
        # ValueError naming the field.
        loader = make_loader(fields="a=jpg:image, b=png:image",
                             unavailable_timeout=5)
        with self.assertRaises(ValueError) as caught:
            next(iter(loader))
        self.assertIn("'b'", str(caught.exception))

    def test_views_of_one_decode_are_converted_like_the_image(self):
        fields = ("global=jpg:image:repeats=2, local=jpg:image:transform="
                  "RandomResizedCrop(16)|RandomHorizontalFlip():repeats=3, "
                  "label=cls:class")
        raw = make_loader(fields=fields, dtype=torch.uint8)
        mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
        normalized = make_loader(fields=fields, channels_last=True,
                                 mean=mean, std=std)
        classic = classic_images(0, dtype=torch.uint8)
        m = torch.tensor(mean, dtype=torch.float64).view(1, 1, 3, 1, 1)
        s = torch.tensor(std, dtype=torch.float64).view(1, 1, 3, 1, 1)
        batches = 0
        for (a, info), b in zip(raw.iter_with_info(), normalized):
            batches += 1
            n = len(info["keys"])
            g, l = a["global"], a["local"]
            self.assertEqual(tuple(g.shape), (n, 2, 3, SIZE, SIZE))
            self.assertEqual(tuple(l.shape), (n, 3, 3, 16, 16))
            self.assertEqual(g.dtype, torch.uint8)
            for i, key in enumerate(info["keys"]):
                # The first view of the first image field has the geometry
                # of a request without fields' image (not always its bytes:
                # the views' shared decode may use a finer DCT scale), so
                # it is close to it; a misplaced view or channel of these
                # noise images would be off by about 85 on average. Every
                # view has its own parameters.
                diff = (g[i, 0].to(torch.int32) - classic[key]).abs()
                self.assertLess(diff.to(torch.float32).mean().item(), 8, key)
                self.assertFalse(torch.equal(g[i, 0], g[i, 1]), key)
                self.assertFalse(torch.equal(l[i, 0], l[i, 1]), key)
            for name, views in (("global", g), ("local", l)):
                got = b[name]
                self.assertEqual(got.dtype, torch.float32)
                self.assertEqual(got.shape, views.shape)
                self.assertTrue(got.flatten(0, 1).is_contiguous(
                    memory_format=torch.channels_last))
                expected = (views.to(torch.float64) / 255 - m) / s
                self.assertLess(
                    (got.to(torch.float64) - expected).abs().max().item(),
                    1e-6)
            self.assertEqual(a["label"].tolist(),
                             [SOURCES[k]["cls"] for k in info["keys"]])
        self.assertEqual(batches, len(raw))
        for kwargs in (dict(random_erasing=0.5),
                       dict(mixup_alpha=0.2, num_classes=NUM_CLASSES)):
            with self.assertRaisesRegex(ValueError, "image"):
                make_loader(fields=fields, **kwargs)

    def test_mixing_with_masks_or_without_a_class_is_refused(self):
        with self.assertRaisesRegex(ValueError,
                                    "MixUp/CutMix do not apply to masks"):
            make_loader(fields=FIELDS, cutmix_alpha=1.0,
                        num_classes=NUM_CLASSES)
        with self.assertRaisesRegex(ValueError, "need a class field"):
            make_loader(fields="image=jpg:image, caption=txt:text",
                        mixup_alpha=0.2, num_classes=NUM_CLASSES)

    def test_without_fields_batches_are_unchanged(self):
        loader = make_loader(dtype=torch.uint8)
        self.assertIsNone(loader.fields)
        for images, labels in loader:
            self.assertEqual(images.dtype, torch.uint8)
            self.assertEqual(labels.dtype, torch.int64)


if __name__ == "__main__":
    unittest.main()
