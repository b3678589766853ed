"""Smoke test of client/python/examples/train_compare.py: a few CPU steps
with each loader, both throughputs printed."""

import os
import re
import subprocess
import sys
import unittest

import stoker_testing as st


class TrainCompareTest(unittest.TestCase):

    def test_prints_both_throughputs(self):
        glob, labels = st.make_shards("example", num_shards=2,
                                      samples_per_shard=16)
        root = os.path.join(os.environ["TEST_SRCDIR"],
                            os.environ.get("TEST_WORKSPACE", "stoker"))
        result = subprocess.run(
            [sys.executable, "-B",
             os.path.join(root, "client/python/examples/train_compare.py"),
             f"--shards={glob}", f"--server_bin={st.SERVER_BIN}",
             "--device=cpu", "--steps=3", "--warmup=1", "--batch_size=8",
             "--image_size=32", "--workers=1"],
            capture_output=True, text=True, timeout=240)
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertIn(f"{len(labels)} samples, 10 classes", out)
        for name in ("stoker", "dataloader"):
            self.assertRegex(out, rf"{name}: 24 images in [0-9.]+ s = +"
                                  r"[0-9.]+ images/s")
        self.assertRegex(out, r"stoker / dataloader throughput: [0-9.]+x")


if __name__ == "__main__":
    unittest.main(verbosity=2)
