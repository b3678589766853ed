"""stoker_server --python_ops end to end: the operator's Python ops
(tests/python_ops/ops_for_tests.py, plugins/python/augment_ops.py) in
pipelines with native ops, served by real servers to stoker_fetch.

Checks: a Python op's pixels reach the client (Invert equals the built-in
RandomInvert), results are the same on servers with 1 and 4 threads and
on two servers together; an op that raises on some samples costs exactly
those samples, named with the exception; ops that segfault, hang or eat
memory cost only their samples while another job streams undisturbed, and
the server serves the next epoch whole; an op that is not installed, or
bad arguments, are INVALID_ARGUMENT; bad modules stop the start.

Run by `bazel test //tests/python:python_ops_test`."""

import os
import re
import subprocess
import sys
import time
import unittest
import urllib.request

import stoker_testing as st

ROOT = os.path.join(os.environ["TEST_SRCDIR"],
                    os.environ.get("TEST_WORKSPACE", "stoker"))
TEST_OPS = os.path.join(ROOT, "tests/python_ops/ops_for_tests.py")
EXAMPLE_OPS = os.path.join(ROOT, "plugins/python/augment_ops.py")
SAMPLES = 60  # 3 shards x 20
CROP = "RandomResizedCrop(40)"


def serve(threads=2, modules=(TEST_OPS, EXAMPLE_OPS), flags=()):
    return st.Server(GLOB, threads=threads,
                     flags=[f"--python_ops={m}" for m in modules]
                     + ["--python=" + sys.executable, *flags])


def fetch(servers, transform, *flags, check=True):
    """stoker_fetch over one epoch; returns the CompletedProcess."""
    result = subprocess.run(
        [st.FETCH_BIN, f"--servers={servers}", "--dataset=train",
         "--batch_size=8", "--seed=3", f"--transform={transform}",
         "--checksum", *flags],
        capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"stoker_fetch failed: {result.stderr}")
    return result


def checksum(result):
    return re.search(r"checksum=(\w+)", result.stdout).group(1)


def skipped(result):
    """{key: reason} of the samples the servers reported bad."""
    return dict(re.findall(r"server skipped sample '([^']+)' \(index \d+\) "
                           r"in \S+: (.*)", result.stdout + result.stderr))


def delivered(keys_path):
    with open(keys_path) as f:
        return [line.split()[1] for line in f if line.strip()]


class PythonOpsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        global GLOB, LABELS
        GLOB, LABELS = st.make_shards("python_ops")
        cls.server = serve()

    def test_pixels_reach_the_client(self):
        address = self.server.address
        builtin = checksum(fetch(address, f"{CROP}|RandomInvert(p=1)"))
        self.assertEqual(checksum(fetch(address, f"{CROP}|Invert()")), builtin)
        self.assertEqual(checksum(fetch(address, f"{CROP}|InvertInPlace()")),
                         builtin)
        self.assertNotEqual(checksum(fetch(address, CROP)), builtin)
        self.assertEqual(checksum(fetch(address, f"{CROP}|Noop()")),
                         checksum(fetch(address, CROP)))

    def test_same_pixels_on_any_server(self):
        # Native crop, Python noise, native colour, the example GridMask,
        # a native flip (these Python ops run sample by sample), then a
        # Python op at the end (run for chunks of a batch's samples).
        transform = (f"{CROP}|Noise(amount=30)|ColorJitter(brightness=0.4)"
                     "|GridMask(d_min=8, d_max=24, p=0.8)|RandomHorizontalFlip()"
                     "|Noise(amount=3)")
        one = serve(threads=1)
        four = serve(threads=4)
        try:
            sums = {name: checksum(fetch(servers, transform))
                    for name, servers in [
                        ("1 thread", one.address), ("4 threads", four.address),
                        ("both", f"{one.address},{four.address}")]}
            self.assertEqual(len(set(sums.values())), 1, sums)
            self.assertNotEqual(
                checksum(fetch(one.address, transform, "--seed=4")),
                sums["1 thread"])
            self.assertNotEqual(checksum(fetch(one.address, CROP)),
                                sums["1 thread"])
        finally:
            one.kill()
            four.kill()

    def test_raising_op_costs_exactly_its_samples(self):
        keys = os.path.join(st.temp_dir("raise"), "keys")
        results = [fetch(self.server.address, f"{CROP}|RaiseSome(p=0.25)",
                         f"--keys_out={keys}.{i}") for i in range(2)]
        bad = skipped(results[0])
        self.assertGreater(len(bad), 0)
        self.assertLess(len(bad), SAMPLES)
        self.assertEqual(set(bad.values()),
                         {"python op RaiseSome: ValueError: unlucky sample"})
        good = delivered(f"{keys}.0")
        self.assertEqual(len(good), len(set(good)))
        self.assertEqual(set(good) | set(bad), set(LABELS))
        self.assertFalse(set(good) & set(bad))
        # The plan picks the same samples again.
        self.assertEqual(skipped(results[1]), bad)

    def test_crashes_hangs_and_hogs_cost_only_their_samples(self):
        server = serve(flags=["--python_op_timeout=1s",
                              f"--python_op_memory={1 << 30}",
                              "--metrics_port=0"])
        try:
            for op, reason in [
                    ("SegfaultSome", "its worker process died; worker "
                                     "process \\d+ ended with signal 11"),
                    ("HangSome", "timed out after 1s"),
                    ("HogSome", "MemoryError.*over --python_op_memory")]:
                keys = os.path.join(st.temp_dir(op), "keys")
                # Another job streams through the same workers meanwhile.
                other = subprocess.Popen(
                    [st.FETCH_BIN, f"--servers={server.address}",
                     "--dataset=train", "--batch_size=8",
                     f"--transform={CROP}|Noop()", "--epochs=2",
                     "--seed=9"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True)
                result = fetch(server.address, f"{CROP}|{op}(p=0.1)",
                               f"--keys_out={keys}")
                out, err = other.communicate(timeout=300)
                self.assertEqual(other.returncode, 0, err)
                self.assertIn(f"images={2 * SAMPLES} ", out)
                self.assertIn("skipped=0 ", out)
                bad = skipped(result)
                self.assertGreater(len(bad), 0, op)
                for text in bad.values():
                    self.assertRegex(text, f"python op {op}: .*{reason}")
                self.assertEqual(set(delivered(keys)) | set(bad), set(LABELS))
                self.assertIsNone(server.process.poll())
                # The next epoch, through the replaced workers, is whole.
                whole = fetch(server.address, f"{CROP}|Noop()", "--seed=5")
                self.assertIn(f"images={SAMPLES} ", whole.stdout)
                self.assertEqual(skipped(whole), {})
            # Prometheus counts each kind of failure.
            metrics = urllib.request.urlopen(
                f"http://127.0.0.1:{server.ports['metrics_port']}/metrics",
                timeout=30).read().decode()

            def value(name):
                match = re.search(rf"^{re.escape(name)} (\S+)$", metrics,
                                  re.MULTILINE)
                self.assertIsNotNone(match, f"{name} in {metrics}")
                return float(match.group(1))
            for cause in ("crashed", "timed_out", "out_of_memory"):
                self.assertGreater(value(
                    f'stoker_python_op_failures_total{{cause="{cause}"}}'), 0)
            self.assertEqual(value(
                'stoker_python_op_failures_total{cause="raised"}'), 0)
            self.assertEqual(value("stoker_python_op_workers"), 2)
            self.assertGreater(
                value("stoker_python_op_workers_started_total"), 2)
            self.assertGreaterEqual(value("stoker_python_op_samples_total"),
                                    3 * 3 * SAMPLES)
        finally:
            server.kill()
        with open(server.log_path) as f:
            log = f.read()
        self.assertRegex(log, r"python op HangSome: timed out")

    def test_mask_ops_change_the_mask_with_the_image(self):
        # Bright images (a JPEG never decodes to 0 there) with masks of
        # labels 1..4: the example CoarseDropout zeroes its holes in both.
        import io
        import random
        import tarfile

        import numpy as np
        import torch
        from PIL import Image

        import stoker

        folder = st.temp_dir("mask_shards")
        rng = random.Random(5)
        with tarfile.open(os.path.join(folder, "masks-0.tar"), "w") as tar:
            for i in range(24):
                w, h = rng.randint(50, 90), rng.randint(50, 90)
                image = Image.frombytes("RGB", (w, h), bytes(
                    rng.randrange(90, 256) for _ in range(w * h * 3)))
                mask = Image.frombytes("L", (w, h), bytes(
                    rng.randrange(1, 5) for _ in range(w * h)))
                for name, picture, fmt in [("jpg", image, "JPEG"),
                                           ("seg.png", mask, "PNG")]:
                    data = io.BytesIO()
                    picture.save(data, format=fmt)
                    info = tarfile.TarInfo(f"s{i:03d}.{name}")
                    info.size = len(data.getvalue())
                    tar.addfile(info, io.BytesIO(data.getvalue()))
        server = st.Server(os.path.join(folder, "*.tar"),
                           flags=[f"--python_ops={EXAMPLE_OPS}",
                                  "--python=" + sys.executable])
        try:
            loader = stoker.Loader(
                servers=server.address, dataset="train", device="cpu",
                batch_size=8, dtype=torch.uint8,
                fields="image=jpg:image, mask=seg.png:mask",
                transform="RandomResizedCrop(48)|CoarseDropout(p=1, "
                          "min_size=4, max_size=12, fill=0)")
            samples = 0
            for fields in loader:
                image = fields["image"].numpy()  # N, 3, H, W
                mask = fields["mask"].numpy()    # N, H, W
                for n in range(image.shape[0]):
                    holes = np.all(image[n] == 0, axis=0)
                    self.assertGreater(holes.sum(), 0)
                    np.testing.assert_array_equal(holes, mask[n] == 0)
                    samples += 1
            self.assertEqual(samples, 24)
        finally:
            server.kill()

    def test_unknown_ops_and_bad_arguments_are_invalid_argument(self):
        for transform, message in [
                (f"{CROP}|NotInstalled()", "unknown op 'NotInstalled' (not "
                 "built in and no --plugin or --python_ops provides it)"),
                (f"{CROP}|Typed(needed=1, count=11)",
                 "count must be an integer in [1, 10], got 11"),
                (f"{CROP}|Typed(count=2)", "needed is required"),
                (f"{CROP}|Typed(needed=1, mode=medium)",
                 "mode must be one of fast, slow, got medium"),
                (f"{CROP}|Typed(needed=1, flag=3)",
                 "flag must be True or False, got 3"),
                (f"{CROP}|GridMask(ratio=1.5)",
                 "ratio must be a number in [0, 1], got 1.5"),
                (f"{CROP}|Noise(size=3)", "unsupported argument 'size'")]:
            result = fetch(self.server.address, transform, check=False)
            self.assertNotEqual(result.returncode, 0, transform)
            self.assertIn("INVALID_ARGUMENT", result.stderr, transform)
            self.assertIn(message, result.stderr, transform)
        # Every type and choice accepted.
        fetch(self.server.address, f"{CROP}|Typed(needed=1, count=3, "
              "scale=0.5, flag=True, mode=slow, box=(0.25, 2))")
        self.assertIsNone(self.server.process.poll())

    def test_workers_start_when_the_server_is_pid_1(self):
        # As in a container whose entrypoint is the server: a new PID
        # namespace (root only) where the server is process 1.
        probe = subprocess.run(["unshare", "--fork", "--pid", "true"],
                               capture_output=True)
        if probe.returncode != 0:
            self.skipTest("cannot make a PID namespace here: "
                          + probe.stderr.decode().strip())
        folder = st.temp_dir("pid1")
        ports = os.path.join(folder, "ports")
        log_path = os.path.join(folder, "server.log")

        def log():
            with open(log_path) as f:
                return f.read()
        with open(log_path, "w") as log_file:
            process = subprocess.Popen(
                ["unshare", "--fork", "--pid", "--kill-child", st.SERVER_BIN,
                 "--port=0", "--threads=2", f"--dataset=train={GLOB}",
                 f"--python_ops={TEST_OPS}", "--python=" + sys.executable,
                 f"--port_file={ports}"],
                stdout=log_file, stderr=subprocess.STDOUT)
        try:
            from stoker.launch import read_port_file
            deadline = time.time() + 60
            while not os.path.exists(ports) and process.poll() is None:
                self.assertLess(time.time(), deadline, "no port file")
                time.sleep(0.05)
            if process.poll() is not None:
                self.fail(f"the server as PID 1 ended: {log()}")
            port = read_port_file(ports)["port"]
            result = fetch(f"127.0.0.1:{port}", f"{CROP}|Invert()")
            self.assertEqual(checksum(result),
                             checksum(fetch(self.server.address,
                                            f"{CROP}|Invert()")))
        finally:
            process.kill()
            process.wait(timeout=30)

    def test_bad_modules_stop_the_start(self):
        folder = st.temp_dir("modules")
        collision = os.path.join(folder, "collision.py")
        with open(collision, "w") as f:
            f.write("def RandomCrop(image, rng):\n    return image\n"
                    "STOKER_OPS = [RandomCrop]\n")
        for modules, message in [
                (["/nonexistent/ops.py"], "FileNotFoundError"),
                ([collision], "op 'RandomCrop' has the name of a built-in op"),
                ([TEST_OPS, TEST_OPS], "op 'Noop' is listed twice")]:
            result = subprocess.run(
                [st.SERVER_BIN, "--port=0", f"--dataset=train={GLOB}",
                 "--python=" + sys.executable,
                 *[f"--python_ops={m}" for m in modules]],
                capture_output=True, text=True, timeout=120)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(message, result.stderr)


if __name__ == "__main__":
    unittest.main()
