"""Elastic resume through stoker.Loader against a real stoker_server: a job
of 4 ranks saves part-way through an epoch and a job of another shape (3 or
6 ranks, another batch size) continues it; every sample of the epoch is
delivered exactly once in total, each new rank gets as many batches, the
samples look exactly as an uninterrupted run's, and the next epoch is what a
fresh job of the new shape gets.

Run by `bazel test //tests/python:elastic_test`."""

import hashlib
import unittest

import stoker
import stoker_testing as st

SEED = 5
SAMPLES = 60  # 3 shards x 20
GLOB = None
SERVER = None


def setUpModule():
    global GLOB, SERVER
    GLOB, labels = st.make_shards("elastic")
    assert len(labels) == SAMPLES
    SERVER = st.Server(GLOB)


def tearDownModule():
    SERVER.kill()


def loader(world, rank, batch):
    return stoker.Loader(servers=SERVER.address, dataset="train",
                         batch_size=batch, transform=st.TRANSFORM, seed=SEED,
                         rank=rank, world_size=world, device="cpu")


def digest(image):
    return hashlib.sha256(image.contiguous().numpy().tobytes()).hexdigest()


def take(ld, batches=None):
    """Iterates the loader's next epoch (at most `batches` batches):
    ([keys per batch], {key: pixel digest})."""
    keys, pixels = [], {}
    it = ld.iter_with_info()
    for i, (images, _, info) in enumerate(it):
        keys.append(list(info["keys"]))
        for key, image in zip(info["keys"], images):
            pixels[key] = digest(image)
        if batches is not None and i + 1 == batches:
            break
    return keys, pixels


class ElasticTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        # The uninterrupted reference: every sample's pixels in epoch 0.
        with loader(1, 0, SAMPLES) as whole:
            _, cls.reference = take(whole)
        assert len(cls.reference) == SAMPLES

    def first_job(self, stop_at):
        """4 ranks of batch 3 (5 batches each); rank r stops after
        stop_at(r) batches. Returns (delivered keys, every rank's state)."""
        delivered, states = [], []
        for rank in range(4):
            with loader(4, rank, 3) as ld:
                keys, pixels = take(ld, stop_at(rank))
                self.assertEqual(len(keys), stop_at(rank))
                for key, d in pixels.items():
                    self.assertEqual(d, self.reference[key], key)
                delivered += [k for batch in keys for k in batch]
                states.append(ld.state_dict())
        return delivered, states

    def second_job(self, world, batch, state):
        """A job of `world` ranks continuing from `state`: (keys delivered,
        batches per rank, next-epoch keys per rank)."""
        delivered, counts, next_epoch = [], [], []
        for rank in range(world):
            with loader(world, rank, batch) as ld:
                ld.load_state_dict(state)
                keys, pixels = take(ld)
                for key, d in pixels.items():
                    self.assertEqual(d, self.reference[key], key)
                delivered += [k for b in keys for k in b]
                counts.append(len(keys))
                next_epoch.append(take(ld)[0])
        return delivered, counts, next_epoch

    def fresh_epoch_one(self, world, batch):
        out = []
        for rank in range(world):
            with loader(world, rank, batch) as ld:
                ld.set_epoch(1)
                out.append(take(ld)[0])
        return out

    def test_synchronous_job_resumes_on_other_shapes(self):
        first, states = self.first_job(lambda rank: 2)
        self.assertEqual(len(first), 24)
        for world, batch in ((3, 3), (6, 3), (4, 5), (2, 7)):
            with self.subTest(world=world, batch=batch):
                # Any one rank's state describes a synchronous job.
                second, counts, next_epoch = self.second_job(
                    world, batch, states[1])
                self.assertEqual(len(set(counts)), 1, counts)
                together = first + second
                self.assertEqual(sorted(set(together)),
                                 sorted(self.reference))
                # Exactly once, padding aside (fewer than `world` repeats,
                # and none of the first job's samples).
                self.assertLess(len(together) - SAMPLES, world)
                self.assertFalse(set(first) & set(second[:36]))
                self.assertEqual(next_epoch,
                                 self.fresh_epoch_one(world, batch))

    def test_ranks_at_different_steps_give_every_state(self):
        first, states = self.first_job(lambda rank: 1 + rank)
        self.assertEqual(len(first), 3 * (1 + 2 + 3 + 4))
        second, counts, _ = self.second_job(3, 4, states)
        self.assertEqual(len(set(counts)), 1, counts)
        together = first + second
        self.assertEqual(sorted(set(together)), sorted(self.reference))
        self.assertLess(len(together) - SAMPLES, 3)
        self.assertFalse(set(first) & set(second[:SAMPLES - len(first)]))

    def test_a_rank_that_finished_the_epoch_counts_too(self):
        # Rank 3 went through its 5 batches; its state is between epochs
        # but carries the cursor it ended with.
        first, states = self.first_job(lambda rank: 5 if rank == 3 else 2)
        self.assertIsNone(states[3]["cursor"])
        self.assertEqual(states[3]["epoch"], 1)
        self.assertIn("ended", states[3])
        second, counts, _ = self.second_job(3, 3, states)
        self.assertEqual(len(set(counts)), 1, counts)
        together = first + second
        self.assertEqual(sorted(set(together)), sorted(self.reference))
        self.assertLess(len(together) - SAMPLES, 3)

    def test_a_pending_resume_is_saved_and_loaded_again(self):
        first, states = self.first_job(lambda rank: 1 + rank % 2)
        with loader(3, 1, 4) as direct:
            direct.load_state_dict(states)
            expected = take(direct)[0]
        with loader(3, 1, 4) as ld:
            ld.load_state_dict(states)
            again = ld.state_dict()  # before iterating: the pending resume
            self.assertIsInstance(again["cursor"], list)
        with loader(3, 1, 4) as ld:
            ld.load_state_dict(again)
            self.assertEqual(take(ld)[0], expected)

    def test_same_shape_resumes_exactly_and_other_plans_are_refused(self):
        _, states = self.first_job(lambda rank: 2)
        with loader(4, 2, 3) as ld:
            ld.load_state_dict(states[2])
            it = ld.iter_with_info()
            # The epoch's batch indices are kept: 5 of which 2 were yielded.
            self.assertEqual(len(it), 5)
            keys = [list(info["keys"]) for _, _, info in it]
        with loader(4, 2, 3) as ld:
            self.assertEqual(take(ld)[0][2:], keys)
        # Another rank's state on this shape is a synchronous job's: rank
        # 0 continues after the 2 steps all ranks took.
        with loader(4, 0, 3) as ld:
            ld.load_state_dict(states[2])
            it = ld.iter_with_info()
            self.assertEqual(len(it), 3)
            resumed = [list(info["keys"]) for _, _, info in it]
        with loader(4, 0, 3) as ld:
            self.assertEqual(take(ld)[0][2:], resumed)
        other = stoker.Loader(servers=SERVER.address, dataset="train",
                              batch_size=3, transform=st.TRANSFORM,
                              seed=SEED + 1, rank=0, world_size=3,
                              device="cpu")
        with other:
            with self.assertRaisesRegex(ValueError, "seed: 5 in the state, 6"):
                other.load_state_dict(states[0])
            with self.assertRaisesRegex(ValueError, "different epochs"):
                bad = dict(states[1], epoch=1, cursor=None)
                ld = loader(3, 0, 3)
                try:
                    ld.load_state_dict([states[0], bad])
                finally:
                    ld.close()


if __name__ == "__main__":
    unittest.main()
