"""A million samples served from sidecar indexes (issue 33): one epoch
through one server and through three, every sample exactly once, in the
same order; the servers index the shards from their sidecars (written by
stoker_index) and hold a few bytes of their own memory per sample.

The samples are tiny (tools/tiny_shards.py: a 16x16 JPEG and a label,
2.5 KB each, 2.5 GB in all) and cropped to 8x8, so an epoch costs about
10 s of two cores. Run by `bazel test //tests/python:million_test`."""

import os
import shutil
import subprocess
import sys
import unittest

import stoker_testing as st

sys.path.insert(0, os.path.join(
    os.environ["TEST_SRCDIR"], os.environ.get("TEST_WORKSPACE", "stoker"),
    "tools"))
import tiny_shards  # noqa: E402

SAMPLES = 1000000
SHARDS = 100
INDEX_BIN = os.environ.get("STOKER_INDEX_BIN", "")


def rss_anon(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon")


def fetch_keys(servers, out_dir, name):
    """The epoch's keys in delivery order, through stoker_fetch."""
    keys_out = os.path.join(out_dir, name)
    subprocess.run(
        [st.FETCH_BIN, f"--servers={','.join(servers)}", "--dataset=train",
         "--batch_size=1000", "--transform=CenterCrop(8)", "--in_order",
         "--seed=3", f"--keys_out={keys_out}"],
        check=True, stdout=subprocess.DEVNULL)
    with open(keys_out) as f:
        return [line.split(" ", 1)[1].rstrip("\n") for line in f]


class MillionTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = st.temp_dir("million")
        cls.glob = tiny_shards.write(os.path.join(cls.dir, "shards"),
                                     SAMPLES, SHARDS, processes=2)
        shards = sorted(p for p in os.listdir(os.path.join(cls.dir, "shards"))
                        if p.endswith(".tar"))
        subprocess.run([INDEX_BIN, "--threads=2"] +
                       [os.path.join(cls.dir, "shards", p) for p in shards],
                       check=True, stdout=subprocess.DEVNULL)
        cls.expected = set()
        first = 0
        for s in range(SHARDS):
            count = SAMPLES // SHARDS
            cls.expected.update(f"s{s}/{i}" for i in range(first, first + count))
            first += count

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def check_epoch(self, keys):
        self.assertEqual(len(keys), SAMPLES)
        self.assertEqual(len(set(keys)), SAMPLES, "a sample came twice")
        self.assertEqual(set(keys), self.expected)
        # Shuffled: not in dataset order.
        self.assertNotEqual(keys[:1000], sorted(keys[:1000]))

    def test_one_and_three_servers_deliver_every_sample_once_alike(self):
        one = st.Server(self.glob, threads=2)
        try:
            log = open(one.log_path).read()
            self.assertIn(f"{SHARDS} from sidecars", log)
            # The server's own memory: its index holds 4 bytes per sample
            # (the records are in a mapped file); before the compact index
            # it held about 330, over 300 MB here.
            memory = rss_anon(one.process.pid)
            print(f"server RssAnon with {SAMPLES} samples: "
                  f"{memory / 2**20:.1f} MB", file=sys.stderr)
            self.assertLess(memory, 200 * 2**20)
            keys = fetch_keys([one.address], self.dir, "one.keys")
        finally:
            one.kill()
        self.check_epoch(keys)

        three = [st.Server(self.glob, threads=1) for _ in range(3)]
        try:
            spread = fetch_keys([s.address for s in three], self.dir,
                                "three.keys")
        finally:
            for s in three:
                s.kill()
        self.assertEqual(spread, keys)


if __name__ == "__main__":
    unittest.main()
