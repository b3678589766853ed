"""stoker.Loader's batch augmentations (random erasing, MixUp / CutMix) on
the CPU device, against real stoker_server processes, checked against
torchvision's erase and a direct torch computation of timm's MixUp / CutMix
with the parameters the loader reports in iter_with_info's info.

Run by `bazel test //tests/python:batch_ops_test`."""

import unittest

import torch
import torchvision.transforms.functional as TF

import stoker
import stoker_testing as st

BATCH = 8
SEED = 5
SMOOTHING = 0.1

LABELS = None
NUM_CLASSES = None
SERVER = None


def setUpModule():
    global LABELS, NUM_CLASSES, SERVER
    glob, LABELS = st.make_shards("batch_ops_shards")
    NUM_CLASSES = max(LABELS.values()) + 1
    SERVER = st.Server(glob)


def tearDownModule():
    SERVER.kill()


def make_loader(**kwargs):
    return st.cpu_loader(SERVER, **{"batch_size": BATCH, "seed": SEED,
                                    **kwargs})


def epochs(loader, count=1):
    """(images, labels, info) of `count` epochs, cloned."""
    out = []
    for _ in range(count):
        out.extend((x.clone(), y.clone(), info)
                   for x, y, info in loader.iter_with_info())
    return out


def smoothed_one_hot(labels, num_classes, smoothing):
    """timm's one_hot(target, num_classes, on_value, off_value)."""
    off = smoothing / num_classes
    on = 1.0 - smoothing + off
    return torch.full((labels.shape[0], num_classes), off,
                      dtype=torch.float32).scatter_(1, labels.view(-1, 1), on)


class BatchOpsTest(unittest.TestCase):

    def test_erasing_equals_torchvision_erase_with_the_reported_boxes(self):
        value = (0.5, -1.0, 2.0)
        for dtype, channels_last in ((torch.float32, False),
                                     (torch.bfloat16, True)):
            with self.subTest(dtype=dtype, channels_last=channels_last):
                kwargs = dict(dtype=dtype, channels_last=channels_last)
                plain = epochs(make_loader(**kwargs))
                erased = epochs(make_loader(
                    random_erasing=dict(p=0.5, value=value), **kwargs))
                self.assertEqual(len(plain), len(erased))
                boxes = 0
                for (x, y, _), (ex, ey, info) in zip(plain, erased):
                    self.assertTrue(torch.equal(y, ey))
                    self.assertEqual(len(info["erase"]), x.shape[0])
                    expected = x.clone()
                    for i, box in enumerate(info["erase"]):
                        if box is None:
                            continue
                        boxes += 1
                        top, left, h, w = box
                        # torchvision's get_params: h < H and w < W.
                        self.assertLess(h, x.shape[2])
                        self.assertLess(w, x.shape[3])
                        expected[i] = TF.erase(
                            expected[i], top, left, h, w,
                            torch.tensor(value)[:, None, None])
                    self.assertTrue(torch.equal(ex, expected))
                # p=0.5 over 60 samples: some erased, some not.
                self.assertGreater(boxes, 10)
                self.assertLess(boxes, 50)

    def test_random_erasing_fills_the_box_with_standard_normal_noise(self):
        plain = epochs(make_loader())
        erased = epochs(make_loader(random_erasing=dict(
            p=1.0, value="random", scale=(0.1, 0.3))))
        noise = []
        for (x, _, _), (ex, _, info) in zip(plain, erased):
            inside = torch.zeros_like(x, dtype=torch.bool)
            for i, box in enumerate(info["erase"]):
                if box is not None:
                    top, left, h, w = box
                    inside[i, :, top:top + h, left:left + w] = True
            self.assertTrue(torch.equal(ex[~inside], x[~inside]))
            noise.append(ex[inside])
        noise = torch.cat(noise).double()
        self.assertGreater(noise.numel(), 10000)
        self.assertLess(abs(noise.mean().item()), 0.05)
        self.assertLess(abs(noise.std().item() - 1), 0.05)

    def test_mixup_and_cutmix_equal_a_direct_torch_computation(self):
        plain = epochs(make_loader(), count=2)
        mixed = epochs(make_loader(
            random_erasing=0.0, mixup_alpha=0.8, cutmix_alpha=1.0,
            label_smoothing=SMOOTHING, num_classes=NUM_CLASSES), count=2)
        self.assertEqual(len(plain), len(mixed))
        modes = set()
        for (x, y, _), (mx, my, info) in zip(plain, mixed):
            mix = info["mix"]
            modes.add(mix["mode"])
            self.assertEqual(mix["partner"], "flip")
            self.assertEqual(info["labels"], y.tolist())
            a = torch.tensor(mix["weights"][0], dtype=torch.float32)
            b = torch.tensor(mix["weights"][1], dtype=torch.float32)
            self.assertEqual(a.item(), torch.tensor(mix["lam"]).float().item())
            self.assertEqual(b.item(),
                             torch.tensor(1 - mix["lam"]).float().item())
            if mix["mode"] == "mixup":
                # timm: x.mul_(lam).add_(x.flip(0).mul_(1 - lam)).
                expected = x * a + x.flip(0) * b
                self.assertIsNone(mix["box"])
            elif mix["mode"] == "cutmix":
                y0, y1, x0, x1 = mix["box"]
                height, width = x.shape[2:]
                self.assertEqual(
                    mix["lam"], 1 - (y1 - y0) * (x1 - x0) / (height * width))
                expected = x.clone()
                expected[:, :, y0:y1, x0:x1] = x.flip(0)[:, :, y0:y1, x0:x1]
            else:
                self.fail(f"unexpected mode {mix['mode']} with mix_prob 1")
            self.assertTrue(torch.equal(mx, expected), mix)
            # timm's mixup_target.
            self.assertEqual(my.dtype, torch.float32)
            self.assertEqual(tuple(my.shape), (x.shape[0], NUM_CLASSES))
            y1h = smoothed_one_hot(y, NUM_CLASSES, SMOOTHING)
            y2h = smoothed_one_hot(y.flip(0), NUM_CLASSES, SMOOTHING)
            self.assertTrue(torch.equal(my, y1h * a + y2h * b))
            self.assertTrue(torch.allclose(my.sum(1), torch.ones(x.shape[0]),
                                           atol=1e-5))
        self.assertEqual(modes, {"mixup", "cutmix"})

    def test_half_precision_mixes_in_float32_and_rounds_once(self):
        plain = epochs(make_loader(dtype=torch.float16, channels_last=True))
        mixed = epochs(make_loader(dtype=torch.float16, channels_last=True,
                                   mixup_alpha=0.8, num_classes=NUM_CLASSES))
        for (x, _, _), (mx, _, info) in zip(plain, mixed):
            self.assertEqual(info["mix"]["mode"], "mixup")
            self.assertTrue(mx.is_contiguous(memory_format=torch.channels_last))
            a, b = (torch.tensor(w, dtype=torch.float32)
                    for w in info["mix"]["weights"])
            expected = (x.float() * a + x.flip(0).float() * b).half()
            self.assertTrue(torch.equal(mx, expected))

    def test_erasing_happens_before_mixing(self):
        plain = epochs(make_loader())
        erased = epochs(make_loader(random_erasing=dict(p=0.7, value=3.0)))
        both = epochs(make_loader(random_erasing=dict(p=0.7, value=3.0),
                                  mixup_alpha=0.8, cutmix_alpha=1.0,
                                  num_classes=NUM_CLASSES))
        for (x, _, _), (ex, _, einfo), (bx, _, binfo) in zip(plain, erased,
                                                              both):
            self.assertEqual(einfo["erase"], binfo["erase"])
            mix = binfo["mix"]
            a, b = (torch.tensor(w, dtype=torch.float32)
                    for w in mix["weights"])
            if mix["mode"] == "mixup":
                expected = ex * a + ex.flip(0) * b
            else:
                y0, y1, x0, x1 = mix["box"]
                expected = ex.clone()
                expected[:, :, y0:y1, x0:x1] = ex.flip(0)[:, :, y0:y1, x0:x1]
            self.assertTrue(torch.equal(bx, expected))

    def test_augmentations_are_deterministic_and_survive_a_resume(self):
        kwargs = dict(random_erasing=dict(p=0.5, value="random"),
                      mixup_alpha=0.8, cutmix_alpha=1.0,
                      num_classes=NUM_CLASSES)
        reference = epochs(make_loader(**kwargs), count=2)
        again = epochs(make_loader(**kwargs), count=2)
        for (x, y, i), (ax, ay, ai) in zip(reference, again):
            self.assertTrue(torch.equal(x, ax))
            self.assertTrue(torch.equal(y, ay))
            self.assertEqual(i["mix"], ai["mix"])
        # Stop after 3 batches, resume in a new loader: the same batches.
        first = make_loader(**kwargs)
        it = first.iter_with_info()
        for _ in range(3):
            next(it)
        state = first.state_dict()
        first.close()
        second = make_loader(**kwargs)
        second.load_state_dict(state)
        resumed = epochs(second)
        self.assertEqual(len(resumed), len(reference) // 2 - 3)
        for (x, y, _), (rx, ry, _) in zip(reference[3:], resumed):
            self.assertTrue(torch.equal(x, rx))
            self.assertTrue(torch.equal(y, ry))
        # Another seed augments differently.
        other = epochs(make_loader(seed=SEED + 1, **kwargs))
        self.assertNotEqual([o[2]["mix"]["lam"] for o in other],
                            [r[2]["mix"]["lam"] for r in reference[:len(other)]])

    def test_unmixed_batches_get_smoothed_one_hot_targets(self):
        plain = epochs(make_loader())
        never = epochs(make_loader(mixup_alpha=1.0, mix_prob=0.0,
                                   label_smoothing=SMOOTHING,
                                   num_classes=NUM_CLASSES))
        for (x, y, _), (nx, ny, info) in zip(plain, never):
            self.assertEqual(info["mix"]["mode"], "none")
            self.assertEqual(info["mix"]["lam"], 1.0)
            self.assertTrue(torch.equal(nx, x))
            self.assertTrue(torch.equal(
                ny, smoothed_one_hot(y, NUM_CLASSES, SMOOTHING)))

    def test_bad_batch_op_arguments_raise_value_error(self):
        cases = [
            (dict(random_erasing=1.5), "random_erasing p"),
            (dict(random_erasing="yes"), "random_erasing"),
            (dict(random_erasing=dict(q=1)), "unknown keys"),
            (dict(random_erasing=dict(scale=(0.5, 0.2))), "scale"),
            (dict(random_erasing=dict(scale=(0.1, 1.5))), "scale"),
            (dict(random_erasing=dict(ratio=(0, 2))), "ratio"),
            (dict(random_erasing=dict(value="noise")), "value"),
            (dict(random_erasing=dict(value=(1, 2))), "value"),
            (dict(random_erasing=0.5, dtype=torch.uint8), "float dtype"),
            (dict(mixup_alpha=-1, num_classes=10), "mixup_alpha"),
            (dict(cutmix_alpha=float("nan"), num_classes=10), "cutmix_alpha"),
            (dict(mixup_alpha=1.0), "num_classes"),
            (dict(mixup_alpha=1.0, num_classes=0), "num_classes"),
            (dict(mixup_alpha=1.0, num_classes=10, mix_prob=2), "mix_prob"),
            (dict(mixup_alpha=1.0, num_classes=10, switch_prob=-1),
             "switch_prob"),
            (dict(mixup_alpha=1.0, num_classes=10, label_smoothing=1.0),
             "label_smoothing"),
            (dict(label_smoothing=0.1), "CrossEntropyLoss"),
            (dict(cutmix_alpha=1.0, num_classes=10, dtype=torch.uint8),
             "float dtype"),
        ]
        for kwargs, needle in cases:
            with self.subTest(kwargs=kwargs):
                with self.assertRaises(ValueError) as ctx:
                    make_loader(**kwargs)
                self.assertIsInstance(ctx.exception, stoker.StokerError)
                self.assertIn(needle, str(ctx.exception))

    def test_a_label_outside_num_classes_raises(self):
        loader = make_loader(mixup_alpha=1.0, num_classes=1)
        with self.assertRaises(ValueError) as ctx:
            for _ in loader:
                pass
        self.assertIn("num_classes", str(ctx.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
