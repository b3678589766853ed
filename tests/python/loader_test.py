"""stoker.Loader against real stoker_server processes (CPU device).

Run by `bazel test //tests/python:loader_test` (run_python_test.sh starts
/usr/bin/python3 with the built package on PYTHONPATH)."""

import json
import os
import signal
import threading
import unittest

import numpy as np
import torch

import stoker
import stoker_testing as st

BATCH = 8
SEED = 3
SAMPLES = 60  # 3 shards x 20
BATCHES = 8   # ceil(60 / 8)

GLOB = None
LABELS = None
SERVER = None


def setUpModule():
    global GLOB, LABELS, SERVER
    GLOB, LABELS = st.make_shards("shards")
    assert len(LABELS) == SAMPLES
    SERVER = Server()


def tearDownModule():
    SERVER.kill()


def Server():
    return st.Server(GLOB)


def make_loader(servers=None, **kwargs):
    args = dict(servers=SERVER.address if servers is None else servers,
                dataset="train",
                batch_size=BATCH, transform=st.TRANSFORM, seed=SEED,
                device="cpu")
    args.update(kwargs)
    return stoker.Loader(**args)


def add_to_checksum(checksum, images, labels, info):
    """What stoker_fetch --checksum digests: uint8 NHWC pixels, int32
    labels, int64 sample indices (see client/checksum.h)."""
    checksum.update(images.permute(0, 2, 3, 1).contiguous().numpy())
    checksum.update(labels.to(torch.int32).numpy())
    checksum.update(np.asarray(info["sample_indices"], dtype=np.int64))


def epoch_keys(loader):
    """Iterates one epoch; returns its keys in order."""
    keys = []
    for _, _, info in loader.iter_with_info():
        keys.extend(info["keys"])
    return keys


def batch_digests(loader, limit=None):
    """(keys, per-batch checksum hex) of up to `limit` batches of the next
    iteration (uint8 loaders)."""
    out = []
    for i, (images, labels, info) in enumerate(loader.iter_with_info()):
        c = stoker.Checksum()
        add_to_checksum(c, images, labels, info)
        out.append((tuple(info["keys"]), c.hex()))
        if limit is not None and i + 1 == limit:
            break
    return out


class LoaderTest(unittest.TestCase):

    def test_uint8_batches_match_the_cli(self):
        keys_path = os.path.join(st.temp_dir("cli"), "keys")
        out = st.fetch(SERVER.address, f"--batch_size={BATCH}",
                       f"--seed={SEED}", f"--transform={st.TRANSFORM}",
                       "--epochs=2", "--checksum", f"--keys_out={keys_path}")
        cli_checksum = [l for l in out.splitlines()
                        if l.startswith("checksum=")][0][len("checksum="):]
        with open(keys_path) as f:
            cli_keys = [tuple(line.split()) for line in f]

        loader = make_loader(dtype=torch.uint8, channels_last=True)
        checksum = stoker.Checksum()
        keys = []
        for epoch in range(2):
            sizes = []
            for images, labels, info in loader.iter_with_info():
                self.assertEqual(info["epoch"], epoch)
                self.assertEqual(images.dtype, torch.uint8)
                self.assertEqual(images.device.type, "cpu")
                n = images.shape[0]
                sizes.append(n)
                self.assertEqual(tuple(images.shape), (n, 3, 32, 32))
                self.assertTrue(
                    images.is_contiguous(memory_format=torch.channels_last))
                self.assertEqual(labels.dtype, torch.int64)
                self.assertEqual(tuple(labels.shape), (n,))
                self.assertEqual(labels.tolist(),
                                 [LABELS[k] for k in info["keys"]])
                add_to_checksum(checksum, images, labels, info)
                keys.extend((str(epoch), k) for k in info["keys"])
            self.assertEqual(sizes, [8] * 7 + [4])
        self.assertEqual(keys, cli_keys)
        self.assertEqual(checksum.hex(), cli_checksum)

    def test_float_dtypes_and_layouts_normalize_the_uint8_pixels(self):
        mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
        def first_batches(**kwargs):
            loader = make_loader(mean=mean, std=std, **kwargs)
            loader.set_epoch(1)
            return [images.clone() for images, _ in loader]

        raw = first_batches(dtype=torch.uint8)
        f32 = first_batches(dtype=torch.float32)
        f32_nhwc = first_batches(dtype=torch.float32, channels_last=True)
        f16 = first_batches(dtype=torch.float16)
        bf16 = first_batches(dtype=torch.bfloat16, channels_last=True)
        m = torch.tensor(mean, dtype=torch.float64).view(1, 3, 1, 1)
        s = torch.tensor(std, dtype=torch.float64).view(1, 3, 1, 1)
        self.assertEqual(len(raw), BATCHES)
        for u8, a, b, h, bf in zip(raw, f32, f32_nhwc, f16, bf16):
            self.assertFalse(u8.is_contiguous(memory_format=torch.channels_last))
            self.assertTrue(a.is_contiguous())
            self.assertEqual(a.dtype, torch.float32)
            expected = (u8.to(torch.float64) / 255 - m) / s
            self.assertLess((a.to(torch.float64) - expected).abs().max().item(),
                            1e-6)
            self.assertTrue(b.is_contiguous(memory_format=torch.channels_last))
            self.assertTrue(torch.equal(a, b))
            self.assertEqual(h.dtype, torch.float16)
            self.assertTrue(torch.equal(h, a.to(torch.float16)))
            self.assertEqual(bf.dtype, torch.bfloat16)
            self.assertTrue(bf.is_contiguous(memory_format=torch.channels_last))
            self.assertTrue(torch.equal(bf, a.to(torch.bfloat16)))

    def test_every_sample_once_per_epoch(self):
        expected = sorted(LABELS)
        for in_order in (True, False):
            loader = make_loader(in_order=in_order, prefetch=3,
                                 batches_per_request=1)
            for _ in range(3):
                keys = epoch_keys(loader)
                self.assertEqual(sorted(keys), expected, f"in_order={in_order}")
        # Two ranks split the epoch between them.
        shares = [epoch_keys(make_loader(rank=r, world_size=2)) for r in (0, 1)]
        self.assertEqual(len(shares[0]), SAMPLES // 2)
        self.assertEqual(sorted(shares[0] + shares[1]), expected)

    def test_state_dict_round_trip_mid_epoch_equals_an_uninterrupted_run(self):
        reference = make_loader(dtype=torch.uint8)
        uninterrupted = batch_digests(reference) + batch_digests(reference)

        first = make_loader(dtype=torch.uint8)
        part1 = batch_digests(first, limit=3)
        state = json.loads(json.dumps(first.state_dict()))
        self.assertEqual(state["epoch"], 0)
        self.assertIsNotNone(state["cursor"])
        first.close()

        second = make_loader(dtype=torch.uint8)
        second.load_state_dict(state)
        self.assertEqual(second.state_dict(), state)
        part2 = batch_digests(second)
        self.assertEqual(second.epoch, 0)
        part3 = batch_digests(second)
        self.assertEqual(second.epoch, 1)
        self.assertEqual(len(part2), BATCHES - 3)
        self.assertEqual(part1 + part2 + part3, uninterrupted)
        # After a complete epoch the state names the next one.
        self.assertEqual(second.state_dict()["epoch"], 2)
        self.assertIsNone(second.state_dict()["cursor"])

        # A loader with another plan refuses the state.
        other = make_loader(dtype=torch.uint8, seed=SEED + 1)
        with self.assertRaisesRegex(ValueError, "plan"):
            other.load_state_dict(state)

    def test_state_dict_between_epochs_is_refused_by_another_plan(self):
        first = make_loader(seed=1)
        for _ in first:
            pass
        state = first.state_dict()
        self.assertIsNone(state["cursor"])
        first.close()
        for kwargs, named in ((dict(seed=7), "seed: 1 in the state, 7 here"),
                              (dict(transform="RandomResizedCrop(24)"),
                               "transform differs")):
            with self.subTest(kwargs=kwargs):
                other = make_loader(**kwargs)
                with self.assertRaisesRegex(ValueError, named):
                    other.load_state_dict(state)
                other.close()
        # A state without its plan id is refused too; the same plan takes it.
        same = make_loader(seed=1)
        with self.assertRaisesRegex(ValueError, "plan_id"):
            same.load_state_dict({k: v for k, v in state.items()
                                  if k != "plan_id"})
        same.load_state_dict(state)
        self.assertEqual(same.state_dict(), state)
        same.close()

    def test_wrapping_in_a_torch_data_loader_says_how_to_use_it(self):
        import pickle

        loader = make_loader()
        for workers in (0, 2):
            with self.subTest(num_workers=workers):
                wrapped = torch.utils.data.DataLoader(
                    loader, batch_size=None, num_workers=workers)
                with self.assertRaises(TypeError) as ctx:
                    next(iter(wrapped))
                self.assertIn("stoker.Loader is itself the data loader",
                              str(ctx.exception))
                self.assertIn("set_epoch", str(ctx.exception))
        with self.assertRaisesRegex(TypeError, "itself the data loader"):
            pickle.dumps(loader)
        # The loader itself still works.
        self.assertEqual(len(epoch_keys(loader)), SAMPLES)
        loader.close()

    def test_unreachable_server_warnings_are_thinned_with_a_count(self):
        import subprocess
        import sys

        port = st.unused_port()
        script = ("import stoker\n"
                  "try:\n"
                  f"    stoker.Loader(servers='127.0.0.1:{port}', "
                  "dataset='train', device='cpu', unavailable_timeout=6)\n"
                  "except stoker.UnavailableError:\n"
                  "    print('unavailable')\n")
        result = subprocess.run([sys.executable, "-c", script],
                                capture_output=True, text=True, timeout=120)
        # spdlog's default logger writes to stdout.
        output = result.stdout + result.stderr
        self.assertIn("unavailable", result.stdout, output)
        lines = [line for line in output.splitlines()
                 if f"[warning] UNAVAILABLE: server 127.0.0.1:{port}" in line]
        # Retried with doubling delays (about 7 tries in 6 s), logged at the
        # 1st, 2nd and 4th: not a line every 200 ms (30 lines).
        self.assertGreaterEqual(len(lines), 3, output)
        self.assertLessEqual(len(lines), 4, output)
        self.assertIn("(4 times so far)", output)

    def test_state_dict_after_breaking_out_and_after_set_epoch(self):
        loader = make_loader()
        for i, _ in enumerate(loader):
            if i == 1:
                break
        state = loader.state_dict()
        self.assertEqual(stoker._stoker.parse_cursor(state["cursor"])
                         ["next_batch"], 2)
        loader.set_epoch(5)
        self.assertEqual(loader.state_dict()["epoch"], 5)
        self.assertIsNone(loader.state_dict()["cursor"])

    def test_set_epoch_changes_the_order(self):
        loader = make_loader()
        loader.set_epoch(0)
        e0 = epoch_keys(loader)
        loader.set_epoch(1)
        e1 = epoch_keys(loader)
        loader.set_epoch(0)
        self.assertEqual(epoch_keys(loader), e0)
        self.assertNotEqual(e0, e1)
        self.assertEqual(sorted(e0), sorted(e1))
        # Without set_epoch, iterations count epochs up from 0.
        fresh = make_loader()
        self.assertEqual(epoch_keys(fresh), e0)
        self.assertEqual(fresh.epoch, 0)
        self.assertEqual(epoch_keys(fresh), e1)
        self.assertEqual(fresh.epoch, 1)

    def test_new_iteration_abandons_the_previous_one(self):
        loader = make_loader()
        old = iter(loader)
        next(old)
        new = iter(loader)
        self.assertEqual(loader.epoch, 1)
        with self.assertRaisesRegex(RuntimeError, "stale"):
            next(old)
        self.assertEqual(sum(1 for _ in new), BATCHES)
        self.assertGreaterEqual(loader.stats()["rebuilds"], 1)

    def test_len_follows_rank_world_size_and_drop_last(self):
        self.assertEqual(len(make_loader()), BATCHES)
        self.assertEqual(len(make_loader(drop_last=True)), SAMPLES // BATCH)
        self.assertEqual(len(make_loader(rank=1, world_size=2)), 4)
        self.assertEqual(len(make_loader(rank=1, world_size=2,
                                         drop_last=True)), 3)
        saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
        try:
            os.environ["RANK"], os.environ["WORLD_SIZE"] = "1", "2"
            loader = make_loader()
            self.assertEqual((loader.rank, loader.world_size), (1, 2))
            self.assertEqual(len(loader), 4)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_stats_report_every_stage(self):
        loader = make_loader(dtype=torch.uint8)
        for _ in loader:
            pass
        stats = loader.stats()
        self.assertEqual(stats["batches"], BATCHES)
        self.assertEqual(stats["samples"], SAMPLES)
        self.assertEqual(stats["network_bytes"], SAMPLES * 32 * 32 * 3)
        self.assertEqual(stats["skipped_samples"], 0)
        self.assertEqual(stats["stream_failures"], 0)
        self.assertEqual(stats["reissued_batches"], 0)
        for key in ("server_read_s", "server_decode_s", "server_transform_s"):
            self.assertGreater(stats[key], 0, key)
        self.assertGreaterEqual(stats["client_wait_s"], 0)
        self.assertEqual(stats["batches_by_server"], {SERVER.address: BATCHES})

    def test_every_batch_of_an_epoch_can_be_kept(self):
        # Like a DataLoader: list(loader) keeps every batch, with far more
        # batches than output_slots, and each keeps its own values.
        reference = make_loader()
        expected = [(x.clone(), y.clone()) for x, y in reference]
        loader = make_loader(output_slots=2)
        kept = list(loader)
        self.assertEqual(len(kept), BATCHES)
        self.assertGreater(BATCHES, 2)
        for (x, y), (ex, ey) in zip(kept, expected):
            self.assertTrue(torch.equal(x, ex))
            self.assertTrue(torch.equal(y, ey))
        # Keeping only the labels (collecting targets) works too.
        targets = torch.cat([y for _, y in make_loader(output_slots=2)])
        self.assertTrue(torch.equal(targets, torch.cat([y for _, y in expected])))
        # The tensors are independent: writing one changes no other.
        kept[0][0].zero_()
        self.assertTrue(torch.equal(kept[1][0], expected[1][0]))

    def test_bad_arguments_raise_value_error(self):
        cases = [
            (dict(batch_size=0), "batch_size"),
            (dict(dtype=torch.int32), "dtype"),
            (dict(device="tpu"), "device"),
            (dict(transform="Blur(3)"), "transform"),
            (dict(transform="Resize(64)"), "transform"),
            (dict(servers="nohost"), "host:port"),
            (dict(servers=[]), "servers"),
            (dict(mean=(0.5, 0.5)), "mean"),
            (dict(std=(0.2, 0.0, 0.2)), "std"),
            (dict(rank=2, world_size=2), "rank"),
            (dict(prefetch=0), "prefetch"),
            (dict(unavailable_timeout=0), "unavailable_timeout"),
            (dict(seed=-1), "seed"),
            (dict(output_slots=0), "output_slots"),
        ]
        for kwargs, needle in cases:
            with self.subTest(kwargs=kwargs):
                with self.assertRaises(ValueError) as ctx:
                    make_loader(**kwargs)
                self.assertIsInstance(ctx.exception, stoker.StokerError)
                self.assertIn(needle, str(ctx.exception))
                self.assertEqual(ctx.exception.code, "INVALID_ARGUMENT")

        with self.assertRaises(LookupError) as ctx:
            make_loader(dataset="nope")
        self.assertIsInstance(ctx.exception, stoker.NotFoundError)
        self.assertIn("nope", str(ctx.exception))

        loader = make_loader()
        for state in ({}, {"version": 1, "epoch": -1, "cursor": None},
                      {"version": 1, "epoch": 0, "cursor": "garbage"}):
            with self.subTest(state=state):
                with self.assertRaises(ValueError):
                    loader.load_state_dict(state)
        # States and cursors of Stoker before the constant-memory orders.
        old = loader.state_dict()
        old["version"] = 2
        with self.assertRaisesRegex(stoker.FailedPreconditionError,
                                    "older Stoker"):
            loader.load_state_dict(old)
        old["version"] = 3
        old["cursor"] = "stoker-cursor-v2;plan=0123456789abcdef;epoch=0"
        with self.assertRaisesRegex(stoker.FailedPreconditionError,
                                    "Fisher-Yates"):
            loader.load_state_dict(old)
        with self.assertRaises(ValueError):
            loader.set_epoch(-1)
        loader.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            iter(loader)

    @unittest.skipIf(torch.cuda.is_available(), "this machine has a GPU")
    def test_cuda_without_gpu_fails_with_a_hint(self):
        with self.assertRaisesRegex(stoker.FailedPreconditionError, "cpu"):
            make_loader(device="cuda")

    def test_unreachable_servers_raise_unavailable(self):
        with self.assertRaises(stoker.UnavailableError) as ctx:
            make_loader(servers=f"127.0.0.1:{st.unused_port()}",
                        unavailable_timeout=0.5)
        self.assertEqual(ctx.exception.code, "UNAVAILABLE")

    def test_dead_server_raises_instead_of_hanging(self):
        server = Server()
        # At most about output_slots + prefetch + 2 batches are ready ahead
        # of the consumer; the epoch (15 batches of 4) is much longer.
        loader = make_loader(servers=server.address, batch_size=4,
                             unavailable_timeout=1, stall_timeout=0.5,
                             prefetch=1, batches_per_request=1,
                             output_slots=2)
        it = iter(loader)
        next(it)
        server.kill()
        with self.assertRaises(stoker.UnavailableError):
            for _ in it:
                pass
        # The position is still known; a new server continues from it.
        state = loader.state_dict()
        self.assertIsNotNone(state["cursor"])

    def test_ctrl_c_interrupts_a_blocked_wait_and_the_epoch_resumes(self):
        reference = epoch_keys(make_loader(batch_size=4))
        server = Server()
        # As above: the batches ready ahead run out long before the epoch.
        loader = make_loader(servers=server.address, batch_size=4, prefetch=1,
                             batches_per_request=1, output_slots=2,
                             stall_timeout=60, unavailable_timeout=120)
        keys = []
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            it = loader.iter_with_info()
            keys.extend(next(it)[2]["keys"])
            server.pause()
            timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
            timer.start()
            with self.assertRaises(KeyboardInterrupt):
                for _, _, info in it:
                    keys.extend(info["keys"])
            timer.join()
        finally:
            signal.signal(signal.SIGINT, previous)
            server.resume()
        state = loader.state_dict()
        self.assertIsNotNone(state["cursor"])
        loader.load_state_dict(state)
        keys.extend(epoch_keys(loader))
        self.assertEqual(keys, reference)
        server.kill()


if __name__ == "__main__":
    unittest.main(verbosity=2)
