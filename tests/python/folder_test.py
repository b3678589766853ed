"""Data as users have it: ImageFolder trees and CSV / JSON-lines file lists
served as they are, and stoker_pack, on trees written with PIL from real
photographs (Debian's mate-backgrounds).

  - an ImageFolder tree gives the samples and class indices of
    torchvision.datasets.ImageFolder on the same tree, in its order, every
    sample exactly once per epoch;
  - bad entries (empty class folder, link loop, non-UTF-8 name, dangling
    link, folder named like an image, corrupt image) are reported, the rest
    served; a tree with nothing servable is an error;
  - a CSV list of image, mask and label gives the same batches (checksums)
    as a JSON-lines list of the same rows and as the shards stoker_pack
    makes of it;
  - stoker_pack killed mid-run and restarted writes the same bytes as an
    uninterrupted run; Python's tarfile reads them, names follow the
    WebDataset key rule;
  - bad rows of a list are reported and left out.

Run by `bazel test //tests/python:folder_test`."""

import csv
import glob
import json
import os
import subprocess
import tarfile
import unittest

import numpy as np
import torch
import torchvision
from PIL import Image

import stoker
import stoker_testing as st

PACK_BIN = os.environ.get("STOKER_PACK_BIN", "")
PHOTOS = sorted(glob.glob("/usr/share/backgrounds/mate/*/*.jpg"))
TRANSFORM = "Resize((40,48))"


def photo(i, side=96):
    """Real photo i (cycled), shrunk so the tests stay quick."""
    with Image.open(PHOTOS[i % len(PHOTOS)]) as im:
        im = im.convert("RGB")
        im.thumbnail((side + 7 * (i % 5), side))
        return im.copy()


def key_of(relative):
    """server/file_samples.h's key rule."""
    parts = [p if p != ".." else "_" for p in relative.split("/")
             if p not in ("", ".")]
    base, _, _ = parts[-1].rpartition(".")
    parts[-1] = (base or parts[-1]).replace(".", "_")
    return "/".join(parts)


def epoch(address, dataset, **kwargs):
    """(keys by sample index, labels by sample index, checksum) of one
    unshuffled epoch."""
    args = dict(servers=address, dataset=dataset, transform=TRANSFORM,
                device="cpu", dtype=torch.uint8, batch_size=7, shuffle=False)
    args.update(kwargs)
    keys, labels = {}, {}
    checksum = stoker.Checksum()
    with stoker.Loader(**args) as loader:
        for images, batch_labels, info in loader.iter_with_info():
            checksum.update(images.permute(0, 2, 3, 1).contiguous().numpy())
            for index, key, label in zip(info["sample_indices"],
                                         info["keys"], info["labels"]):
                assert index not in keys, f"sample {index} delivered twice"
                keys[index] = key
                labels[index] = label
        classes = loader.classes
    return keys, labels, checksum.hex(), classes


def serve(spec, *flags):
    return st.Server(spec, flags=("--index_cache_dir=none", *flags))


def fetch_checksum(server, fields):
    out = st.fetch(server.address, f"--fields={fields}", "--checksum",
                   "--batch_size=5", f"--transform={TRANSFORM}",
                   "--shuffle=false")
    lines = [l for l in out.splitlines() if l.startswith("checksum=")]
    return lines[-1]


def pack(*flags, check=True):
    return subprocess.run([PACK_BIN, *flags], capture_output=True, text=True,
                          check=check)


class ImageFolderTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = os.path.join(st.temp_dir("folder"), "train")
        layout = {
            "cat": ["a.jpg", "b.JPEG", "c.png", "deep/er/d.jpg",
                    "deep/e.jpeg", "two.dots.jpg"],
            "dog": ["x.jpg", "x.png", "notes.txt"],
            "Zebra": ["z1.jpg"],
            "\u00e9mile": ["e.jpg", "f.webp"],
        }
        n = 0
        for cls_name, files in layout.items():
            for name in files:
                path = os.path.join(cls.root, cls_name, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if name.endswith(".txt"):
                    with open(path, "w") as f:
                        f.write("not an image\n")
                    continue
                fmt = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG",
                       "webp": "WEBP"}[name.rsplit(".", 1)[1].lower()]
                photo(n).save(path, fmt)
                n += 1
        cls.server = serve(cls.root)

    def test_samples_and_classes_equal_torchvision(self):
        tv = torchvision.datasets.ImageFolder(self.root)
        keys, labels, _, classes = epoch(self.server.address, "train")
        self.assertEqual(classes, tv.classes)
        self.assertEqual(sorted(keys), list(range(len(tv.samples))))
        for index, (path, target) in enumerate(tv.samples):
            expected = key_of(os.path.relpath(path, self.root))
            # x.jpg and x.png share a key; the later one is made unique.
            self.assertTrue(keys[index] == expected or
                            keys[index].startswith(expected + "_"),
                            (index, keys[index], expected))
            self.assertEqual(labels[index], target, path)
        self.assertEqual(len(set(keys.values())), len(keys))

    def test_pixels_equal_the_same_images_packed(self):
        out = st.temp_dir("folder_packed")
        result = pack(f"--input={self.root}", f"--out_dir={out}",
                      "--shard_samples=4")
        shards = result.stdout.strip().splitlines()[-1]
        # Shards repacked into other shards: the same samples again.
        again = st.temp_dir("folder_repacked")
        repacked = pack(f"--input={shards}", f"--out_dir={again}",
                        "--shard_samples=5").stdout.strip().splitlines()[-1]
        a = epoch(self.server.address, "train")
        for spec in (shards, repacked):
            packed = serve(spec)
            b = epoch(packed.address, "train")
            self.assertEqual(a[0], b[0])
            self.assertEqual(a[1], b[1])
            self.assertEqual(a[2], b[2])
            packed.kill()

    def test_local_loader_over_the_tree(self):
        """The README's path: Loader(shards=FOLDER) starts its own server."""
        tv = torchvision.datasets.ImageFolder(self.root)
        with stoker.Loader(shards=self.root, dataset="train", batch_size=4,
                           transform=TRANSFORM, device="cpu",
                           dtype=torch.uint8, local_cores=1,
                           server_flags=["--index_cache_dir=none"]) as loader:
            self.assertEqual(loader.classes, tv.classes)
            self.assertEqual(loader.dataset_samples, len(tv.samples))
            labels = sorted(int(l) for _, batch in loader for l in batch)
        self.assertEqual(labels, sorted(t for _, t in tv.samples))

    def test_epochs_exactly_once_shuffled(self):
        tv = torchvision.datasets.ImageFolder(self.root)
        for seed in (1, 2):
            keys, _, _, _ = epoch(self.server.address, "train", shuffle=True,
                                  seed=seed)
            self.assertEqual(sorted(keys), list(range(len(tv.samples))))


class BadFolderTest(unittest.TestCase):

    def test_bad_entries_are_reported_and_the_rest_served(self):
        root = os.path.join(st.temp_dir("badfolder"), "train")
        os.makedirs(os.path.join(root, "empty"))
        os.makedirs(os.path.join(root, "good", "sub"))
        for i, name in enumerate(["a.jpg", "b.jpg", "sub/c.jpg"]):
            photo(i).save(os.path.join(root, "good", name), "JPEG")
        # A link back up (a loop), a dangling link, a folder named like an
        # image (a folder to torchvision too), a name that is not UTF-8, a
        # corrupt image.
        os.symlink("..", os.path.join(root, "good", "sub", "loop"))
        os.symlink("nowhere.jpg", os.path.join(root, "good", "gone.jpg"))
        os.makedirs(os.path.join(root, "good", "folder.jpg"))
        with open(os.path.join(root, "good").encode() + b"/\xff\xfe.jpg",
                  "wb") as f:
            photo(3).save(f, "JPEG")
        with open(os.path.join(root, "good", "corrupt.jpg"), "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 this is not a JPEG")
        with open(os.path.join(root, "good", "labels.xml"), "w") as f:
            f.write("<not an image/>")
        server = serve(root)
        with open(server.log_path) as f:
            log = f.read()
        self.assertIn("class folder without images", log)
        self.assertIn("a link back to a folder above it", log)
        self.assertIn("not UTF-8", log)
        self.assertIn("1 file without an image extension", log)
        # The dangling link keeps its index, as torchvision's would, and
        # fails when read; so does the corrupt image. The rest is served.
        keys, _, _, _ = epoch(server.address, "train")
        out = st.fetch(server.address, "--batch_size=4",
                       f"--transform={TRANSFORM}")
        self.assertIn("images=3 ", out)
        self.assertEqual(sorted(keys.values()),
                         ["good/a", "good/b", "good/sub/c"])
        server.process.poll()
        self.assertIsNone(server.process.returncode)
        server.kill()

    def test_nothing_servable_is_an_error(self):
        root = os.path.join(st.temp_dir("emptyfolder"), "train")
        os.makedirs(os.path.join(root, "empty"))
        result = subprocess.run(
            [st.SERVER_BIN, "--port=0", f"--dataset=train={root}",
             "--index_cache_dir=none"], capture_output=True, text=True,
            timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("holds no image", result.stdout + result.stderr)


class ListTest(unittest.TestCase):
    FIELDS = "image=jpg:image, mask=mask.png:mask, label=cls:class"

    @classmethod
    def setUpClass(cls):
        cls.dir = st.temp_dir("lists")
        rows = []
        for i in range(9):
            im = photo(i)
            name = f"img/{i:02d}.jpg"
            os.makedirs(os.path.join(cls.dir, "img"), exist_ok=True)
            os.makedirs(os.path.join(cls.dir, "masks"), exist_ok=True)
            im.save(os.path.join(cls.dir, name), "JPEG")
            mask = Image.fromarray(
                (np.arange(im.width * im.height).reshape(im.height, im.width)
                 % 7).astype(np.uint8), "L")
            mask.save(os.path.join(cls.dir, f"masks/{i:02d}.png"))
            rows.append({"image": name, "mask": f"masks/{i:02d}.png",
                         "label": str(i % 3),
                         "caption": f"photo {i}, \"quoted\""})
        cls.csv = os.path.join(cls.dir, "train.csv")
        with open(cls.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        cls.jsonl = os.path.join(cls.dir, "train.jsonl")
        with open(cls.jsonl, "w") as f:
            for r in rows:
                r = dict(r, label=int(r["label"]))
                f.write(json.dumps(r) + "\n")
        cls.rows = rows

    def test_csv_jsonl_and_packed_shards_give_the_same_batches(self):
        out = st.temp_dir("list_packed")
        # stoker.pack runs the same binary.
        shards = stoker.pack(self.csv, out, shard_samples=4)
        self.assertEqual(shards, out + "/shard-{000000..000002}.tar")
        with self.assertRaises(stoker.InvalidArgumentError) as refused:
            stoker.pack(self.csv, out, shard_samples=5)
        self.assertIn("holds a pack of another dataset", str(refused.exception))
        sums = []
        for spec in (self.csv, self.jsonl, shards):
            server = serve(spec)
            sums.append(fetch_checksum(server, self.FIELDS))
            server.kill()
        self.assertEqual(sums[0], sums[1])
        self.assertEqual(sums[0], sums[2])
        # And the captions and labels travel as the list says.
        with tarfile.open(os.path.join(out, "shard-000000.tar")) as tar:
            names = tar.getnames()
            self.assertEqual(names[:4], ["img/00.jpg", "img/00.mask.png",
                                         "img/00.cls", "img/00.caption.txt"])
            caption = tar.extractfile("img/00.caption.txt").read().decode()
            self.assertEqual(caption, self.rows[0]["caption"])

    def test_local_loader_with_fields_over_the_list(self):
        """The README's CSV path: a dict of image, mask and label."""
        with stoker.Loader(shards=self.csv, dataset="train", batch_size=4,
                           transform=TRANSFORM, device="cpu",
                           dtype=torch.uint8, local_cores=1, shuffle=False,
                           fields=self.FIELDS,
                           server_flags=["--index_cache_dir=none"]) as loader:
            self.assertEqual(loader.classes, [])
            batches = list(loader)
        self.assertEqual(sum(b["label"].shape[0] for b in batches), 9)
        first = batches[0]
        self.assertEqual(tuple(first["image"].shape), (4, 3, 40, 48))
        self.assertEqual(first["mask"].shape[0], 4)
        self.assertEqual(first["label"].tolist(),
                         [int(r["label"]) for r in self.rows[:4]])

    def test_bad_rows_are_reported_and_left_out(self):
        path = os.path.join(self.dir, "bad.csv")
        with open(path, "wb") as f:
            f.write(b"image,label\n")
            f.write(b"img/00.jpg,0\n")
            f.write(b"img/01.jpg,1,extra\n")        # wrong field count
            f.write(b"img/missing.jpg,2\n")         # missing file
            f.write(b"\"img/02.jpg,1\n")            # quote never closed
            f.write(b"img/03.jpg,1\r\n")            # CRLF is fine
        server = serve(path)
        with open(server.log_path) as f:
            log = f.read()
        # Counted by kind, each with its first example.
        self.assertRegex(log, r"1 note: 3 fields, the header has 2 "
                              r"\(the first: \S*bad.csv:3\)")
        self.assertRegex(log, r"1 sample that cannot be read: No such file "
                              r"or directory \(the first: img/missing ")
        self.assertRegex(log, r"1 note: a quoted field is never closed "
                              r"\(the first: \S*bad.csv:5\)")
        keys, labels, _, _ = epoch(server.address, "train")
        self.assertEqual(sorted(keys.values()), ["img/00", "img/03"])
        server.kill()

    def test_a_list_without_an_image_column_is_refused(self):
        path = os.path.join(self.dir, "noimage.jsonl")
        with open(path, "w") as f:
            f.write('{"label": 1}\n')
        result = subprocess.run(
            [st.SERVER_BIN, "--port=0", f"--dataset=train={path}",
             "--index_cache_dir=none"], capture_output=True, text=True,
            timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("no image column", result.stdout + result.stderr)


class PackTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.root = os.path.join(st.temp_dir("packsrc"), "train")
        for i in range(24):
            d = os.path.join(cls.root, f"class{i % 3}")
            os.makedirs(d, exist_ok=True)
            photo(i, side=64).save(os.path.join(d, f"img{i:03d}.jpg"), "JPEG")

    def tree(self, out):
        files = {}
        for name in sorted(os.listdir(out)):
            with open(os.path.join(out, name), "rb") as f:
                files[name] = f.read()
        return files

    def test_killed_and_restarted_equals_uninterrupted(self):
        flags = [f"--input={self.root}", "--shard_samples=4",
                 "--shuffle_seed=7"]
        whole = st.temp_dir("pack_whole")
        pack(*flags, f"--out_dir={whole}", "--threads=2")
        broken = st.temp_dir("pack_broken")
        # One thread: shards 0 and 1 are finished, shard 2 half-written.
        killed = pack(*flags, f"--out_dir={broken}", "--threads=1",
                      "--testing_kill_after_samples=10", check=False)
        self.assertEqual(killed.returncode, -9)
        self.assertTrue(any(n.endswith(".partial")
                            for n in os.listdir(broken)))
        resumed = pack(*flags, f"--out_dir={broken}", "--threads=2")
        self.assertIn("shards=6 kept=2 samples=24 ", resumed.stdout)
        for name in os.listdir(broken):
            self.assertFalse(name.endswith(".partial"), name)
        self.assertEqual(self.tree(broken), self.tree(whole))

        # Python's tarfile reads every shard; names are <key>.<ext> with
        # no '.' in the key's last part; every sample has jpg and cls.
        samples = {}
        for name in sorted(os.listdir(whole)):
            if not name.endswith(".tar"):
                continue
            self.assertIn(name + ".idx", os.listdir(whole))
            with tarfile.open(os.path.join(whole, name)) as tar:
                for member in tar.getmembers():
                    self.assertTrue(member.isfile())
                    base = member.name.rsplit("/", 1)[-1]
                    key = member.name[:len(member.name) - len(base)] + \
                        base.split(".", 1)[0]
                    samples.setdefault(key, set()).add(base.split(".", 1)[1])
        self.assertEqual(len(samples), 24)
        self.assertTrue(all(exts == {"jpg", "cls"}
                            for exts in samples.values()))

    def test_another_pack_in_the_same_folder_is_refused(self):
        out = st.temp_dir("pack_twice")
        pack(f"--input={self.root}", f"--out_dir={out}")
        again = pack(f"--input={self.root}", f"--out_dir={out}",
                     "--shuffle_seed=3", check=False)
        self.assertEqual(again.returncode, 2)
        self.assertIn("holds a pack of another dataset, with other options",
                      again.stderr)

    def test_bad_flags(self):
        for flags, message in [
                ([], "give what to pack"),
                ([f"--input={self.root}"], "give the output folder"),
                ([f"--input={self.root}", "--out_dir=/tmp/x",
                  "--shard_bytes=12Q"], "--shard_bytes must be a size"),
                ([f"--input={self.root}/nope", "--out_dir=/tmp/x"],
                 "nope")]:
            result = pack(*flags, check=False)
            self.assertNotEqual(result.returncode, 0, flags)
            self.assertIn(message, result.stderr, flags)


if __name__ == "__main__":
    unittest.main()
