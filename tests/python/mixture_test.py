"""Weighted mixtures through stoker.Loader against a real stoker_server
holding three datasets of very different sizes: the proportions hold the
weights, every source goes through its own epochs with each sample once per
source epoch, a run interrupted and resumed (on the same shape, and on
another world size) yields the batches of an uninterrupted one, and bad
mixtures are refused before the first batch.

Run by `bazel test //tests/python:mixture_test`."""

import collections
import hashlib
import math
import os
import re
import subprocess
import unittest
import urllib.request

import stoker
import stoker_testing as st

WEIGHTS = {"train": 0.7, "books": 0.2, "code": 0.1}
SIZES = {"train": 200, "books": 40, "code": 9}
TRANSFORM = "Resize(16)|CenterCrop(16)"
GLOBS = {}
SERVER = None


def setUpModule():
    global SERVER
    GLOBS["train"], _ = st.make_shards("train", num_shards=4,
                                       samples_per_shard=50, min_side=20,
                                       max_side=40)
    GLOBS["books"], _ = st.make_shards("books", num_shards=2,
                                       samples_per_shard=20, min_side=20,
                                       max_side=40)
    GLOBS["code"], _ = st.make_shards("code", num_shards=1,
                                      samples_per_shard=9, min_side=20,
                                      max_side=40)
    SERVER = st.Server(GLOBS["train"], threads=2,
                       flags=[f"--dataset=books={GLOBS['books']}",
                              f"--dataset=code={GLOBS['code']}",
                              "--metrics_port=0"])


def tearDownModule():
    SERVER.kill()


def mixture(**kwargs):
    args = dict(servers=SERVER.address, dataset=dict(WEIGHTS), batch_size=16,
                transform=TRANSFORM, seed=4, device="cpu")
    args.update(kwargs)
    return stoker.Loader(**args)


def samples(loader, batches=None):
    """The next iteration's samples, in order, as (source, key, pixel
    digest) with the batch they came in: [[...], ...]."""
    out = []
    for i, (images, _, info) in enumerate(loader.iter_with_info()):
        names = loader.sources
        out.append([
            (names[s], key,
             hashlib.sha256(image.contiguous().numpy().tobytes()).hexdigest())
            for s, key, image in zip(info["sources"], info["keys"], images)])
        if batches is not None and i + 1 == batches:
            break
    return out


def scrape_mixture_samples():
    """The server's stoker_mixture_samples_total by dataset."""
    port = SERVER.ports["metrics_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        text = r.read().decode()
    return {m.group(1): int(float(m.group(2))) for m in re.finditer(
        r'^stoker_mixture_samples_total\{dataset="([^"]+)"\} (\S+)$', text,
        re.M)}


def flat(batches):
    return [sample for batch in batches for sample in batch]


class MixtureTest(unittest.TestCase):

    def test_proportions_over_ten_thousand_samples(self):
        with mixture(mixture_epoch_samples=10000, batch_size=250) as ld:
            self.assertEqual(ld.sources, ["train", "books", "code"])
            seen = flat(samples(ld))
            stats = ld.stats()
        self.assertEqual(len(seen), 10000)
        counts = collections.Counter(source for source, _, _ in seen)
        self.assertEqual(stats["samples_by_source"], dict(counts))
        for name, w in WEIGHTS.items():
            # Within four standard deviations of a binomial draw.
            bound = 4 * math.sqrt(10000 * w * (1 - w))
            self.assertLessEqual(abs(counts[name] - 10000 * w), bound, name)
        # Each source goes through its epochs in turn: its picks, cut into
        # runs of its size, are each every one of its samples once.
        for name, size in SIZES.items():
            keys = [key for source, key, _ in seen if source == name]
            epochs = [keys[i:i + size] for i in range(0, len(keys), size)]
            for e, epoch in enumerate(epochs):
                self.assertEqual(len(set(epoch)), len(epoch), (name, e))
                if len(epoch) == size:
                    self.assertEqual(set(epoch), set(epochs[0]), (name, e))
            # Reshuffled between its epochs.
            self.assertNotEqual(epochs[0], epochs[1], name)

    def test_interrupted_runs_resume_exactly_also_on_another_world_size(self):
        with mixture() as whole:
            reference = samples(whole)
            next_epoch = samples(whole)
        self.assertEqual(len(flat(reference)), sum(SIZES.values()))
        # The same shape: exactly the remaining batches.
        with mixture() as first:
            head = samples(first, batches=5)
            state = first.state_dict()
        with mixture() as second:
            second.load_state_dict(state)
            self.assertEqual(samples(second), reference[5:])
            self.assertEqual(samples(second), next_epoch)
        # 2 ranks stop after 3 steps; 3 ranks of batch 10 continue.
        consumed, states = [], []
        for rank in range(2):
            with mixture(rank=rank, world_size=2) as ld:
                consumed += flat(samples(ld, batches=3))
                states.append(ld.state_dict())
        rest, counts = [], []
        for rank in range(3):
            with mixture(rank=rank, world_size=3, batch_size=10) as ld:
                ld.load_state_dict(states)
                batches = samples(ld)
                counts.append(len(batches))
                rest += flat(batches)
        self.assertEqual(len(set(counts)), 1, counts)
        together = collections.Counter(consumed + rest)
        expected = collections.Counter(flat(reference))
        # The same samples with the same pixels, padding aside (fewer
        # than 3 repeats).
        self.assertEqual(set(together), set(expected))
        self.assertLess(sum((together - expected).values()), 3)
        self.assertFalse(expected - together)

    def test_the_server_counts_samples_by_source_for_prometheus(self):
        before = scrape_mixture_samples()
        with mixture() as ld:
            samples(ld)
            counts = ld.stats()["samples_by_source"]
        after = scrape_mixture_samples()
        self.assertEqual(sum(counts.values()), sum(SIZES.values()))
        self.assertEqual(
            {name: after.get(name, 0) - before.get(name, 0)
             for name in SIZES}, counts)

    def test_first_exhausted_ends_before_a_source_repeats(self):
        with mixture(mixture_mode="first_exhausted") as ld:
            for _ in range(2):
                seen = flat(samples(ld))
                keys = [(s, k) for s, k, _ in seen]
                self.assertEqual(len(set(keys)), len(keys))
                code = sum(1 for s, _, _ in seen if s == "code")
                self.assertEqual(code, SIZES["code"])
                self.assertLess(len(seen), 100)

    def test_batch_unit_draws_every_step_from_one_source(self):
        per_rank = []
        for rank in range(2):
            with mixture(mixture_unit="batch", batch_size=4, rank=rank,
                         world_size=2) as ld:
                per_rank.append([{s for s, _, _ in b} for b in samples(ld)])
        for step, (a, b) in enumerate(zip(*per_rank)):
            self.assertEqual(len(a), 1, step)
            self.assertEqual(a, b, step)
        self.assertEqual(len({next(iter(s)) for s in per_rank[0]}), 3)

    def test_sources_with_their_own_transform(self):
        with mixture(dataset={"train": 1, "code": {
                "weight": 1, "transform": "RandomResizedCrop(16)"}}) as ld:
            images, _ = next(iter(ld))
            self.assertEqual(tuple(images.shape[1:]), (3, 16, 16))

    def test_bad_mixtures_are_refused_before_the_first_batch(self):
        cases = [
            (dict(dataset={"train": -1.0}), "weight of mixture source"),
            (dict(dataset={"train": float("nan")}), "must be finite"),
            (dict(dataset={"train": 0}), "must be a finite number > 0"),
            (dict(dataset={}), "non-empty dict"),
            (dict(dataset={"train": 1, "nope": 1}), "unknown dataset 'nope'"),
            (dict(dataset={"train": 1, "code": {
                "weight": 1, "transform": "Resize(8)|CenterCrop(8)"}}),
             "output size"),
            (dict(mixture_mode="sometimes"), "mixture_mode"),
            (dict(mixture_unit="batch", batch_size=16, world_size=2, rank=0),
             "fewer than one unit"),
        ]
        for kwargs, message in cases:
            with self.subTest(kwargs=kwargs):
                with self.assertRaisesRegex(stoker.StokerError, message):
                    with mixture(**kwargs) as ld:
                        next(iter(ld))
        # A mixture's state does not resume another mixture.
        with mixture() as ld:
            next(iter(ld))
            state = ld.state_dict()
        with mixture(dataset={"train": 0.5, "books": 0.4, "code": 0.1}) as ld:
            with self.assertRaisesRegex(ValueError, "the mixture differs"):
                ld.load_state_dict(state)
        with mixture(mixture_unit="batch", batch_size=2) as ld:
            next(iter(ld))
            state = ld.state_dict()
        with mixture(mixture_unit="batch", batch_size=1, world_size=2,
                     rank=0) as ld:
            ld.load_state_dict(state)  # 2 x 1 = 1 x 2: the same unit
            next(iter(ld))
        with mixture(mixture_unit="batch", batch_size=3) as ld:
            with self.assertRaisesRegex(ValueError, "mixture differs"):
                ld.load_state_dict(state)
        # Per batch, only a synchronous job's state continues elastically.
        uneven = []
        for rank in range(2):
            with mixture(mixture_unit="batch", batch_size=2, rank=rank,
                         world_size=2) as ld:
                samples(ld, batches=1 + rank)
                uneven.append(ld.state_dict())
        with mixture(mixture_unit="batch", batch_size=4) as ld:
            with self.assertRaisesRegex(ValueError, "same step"):
                ld.load_state_dict(uneven)
                next(iter(ld))

    def test_stoker_fetch_resumes_a_mixture_on_another_world_size(self):
        # The C++ client: 4 ranks stop after 2 batches and print their
        # cursors; 3 ranks of another batch size continue from all four.
        out_dir = st.temp_dir("fetch-mixture")

        def fetch(name, *flags):
            keys = os.path.join(out_dir, name)
            out = subprocess.run(
                [st.FETCH_BIN, f"--servers={SERVER.address}",
                 "--mixture=train:0.7,books:0.2,code:0.1", "--seed=4",
                 f"--transform={TRANSFORM}", f"--keys_out={keys}", *flags],
                check=True, capture_output=True, text=True).stdout
            with open(keys) as f:
                return out, [line.split()[1] for line in f]

        _, whole = fetch("whole", "--batch_size=500")
        self.assertEqual(len(whole), sum(SIZES.values()))
        self.assertTrue(all("/" in key for key in whole))
        cursors, delivered = [], []
        for rank in range(4):
            out, keys = fetch(f"first{rank}", "--batch_size=6",
                              "--world_size=4", f"--rank={rank}",
                              "--stop_after_batches=2")
            cursors.append(re.search(r"^cursor=(\S+)$", out, re.M).group(1))
            delivered += keys
        self.assertEqual(len(delivered), 48)
        for rank in range(3):
            out, keys = fetch(f"second{rank}", "--batch_size=7",
                              "--world_size=3", f"--rank={rank}",
                              f"--resume_from={' '.join(cursors)}")
            self.assertRegex(out, r"sources: train=\d+ books=\d+ code=\d+")
            delivered += keys
        together = collections.Counter(delivered)
        expected = collections.Counter(whole)
        self.assertFalse(expected - together)
        self.assertLess(sum((together - expected).values()), 3)

    def test_local_servers_serve_a_mixture(self):
        with stoker.Loader(dataset=dict(WEIGHTS), shards=dict(GLOBS),
                           batch_size=32, transform=TRANSFORM, seed=4,
                           device="cpu") as local:
            got = samples(local)
        with mixture(batch_size=32) as remote:
            self.assertEqual(got, samples(remote))


if __name__ == "__main__":
    unittest.main()
