"""tools/photo_shards.py: the real-photo benchmark corpus (run with
/usr/bin/python3; needs Debian's mate-backgrounds photos and PIL)."""

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest

from PIL import Image

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                    "tools", "photo_shards.py")


def write(out_dir, *extra):
    subprocess.run([sys.executable, TOOL, f"--out_dir={out_dir}",
                    "--num_shards=2", "--samples_per_shard=6", "--jobs=2",
                    "--min_side=96", "--max_side=160", *extra],
                   check=True, stdout=subprocess.DEVNULL)
    return sorted(os.path.join(out_dir, n) for n in os.listdir(out_dir))


def digest(paths):
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


class PhotoShardsTest(unittest.TestCase):

    def setUp(self):
        base = os.environ.get("TEST_TMPDIR") or tempfile.gettempdir()
        self.dir = tempfile.mkdtemp(prefix="photo_shards_", dir=base)

    def test_writes_webdataset_pairs_of_decodable_photos(self):
        paths = write(os.path.join(self.dir, "a"))
        self.assertEqual([os.path.basename(p) for p in paths],
                         ["photos-00000.tar", "photos-00001.tar"])
        keys = []
        for path in paths:
            with tarfile.open(path) as tar:
                members = tar.getmembers()
                self.assertEqual(len(members), 12)
                for jpg, cls in zip(members[::2], members[1::2]):
                    key = jpg.name[:-len(".jpg")]
                    self.assertEqual(jpg.name, key + ".jpg")
                    self.assertEqual(cls.name, key + ".cls")
                    keys.append(key)
                    label = int(tar.extractfile(cls).read())
                    self.assertTrue(0 <= label < 1000)
                    image = Image.open(io.BytesIO(tar.extractfile(jpg).read()))
                    self.assertEqual(image.format, "JPEG")
                    self.assertEqual(image.mode, "RGB")
                    self.assertTrue(96 <= min(image.size) <= 160, image.size)
                    image.load()  # the whole entropy-coded stream decodes
        self.assertEqual(len(set(keys)), 12)

    def test_same_arguments_give_identical_bytes_and_other_seeds_differ(self):
        a = digest(write(os.path.join(self.dir, "a")))
        b = digest(write(os.path.join(self.dir, "b")))
        c = digest(write(os.path.join(self.dir, "c"), "--seed=1"))
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

    def test_refuses_a_folder_without_photos(self):
        empty = os.path.join(self.dir, "empty")
        os.makedirs(empty)
        r = subprocess.run([sys.executable, TOOL, f"--out_dir={self.dir}/x",
                            f"--photos={empty}"], capture_output=True,
                           text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no .jpg/.jpeg/.png photos", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
