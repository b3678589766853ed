"""stoker.Loader with local servers (servers="local" / shards=...): the
loader starts stoker_server itself, its epochs equal a separately started
server's, and nothing outlives it: not after close(), not after SIGKILL
of the training process. Hybrid loaders (local + remote) deliver every
sample exactly once when a server dies mid-epoch.

Run by `bazel test //tests/python:local_test`."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import unittest

import numpy as np
import torch

import stoker
import stoker_testing as st
from stoker.launch import child_processes

BATCH = 8
SEED = 5
SAMPLES = 60  # 3 shards x 20

GLOB = None
LABELS = None


def setUpModule():
    global GLOB, LABELS
    GLOB, LABELS = st.make_shards("local_shards")
    assert len(LABELS) == SAMPLES


def local_loader(**kwargs):
    args = dict(dataset="train", shards=GLOB, batch_size=BATCH,
                transform=st.TRANSFORM, seed=SEED, device="cpu",
                dtype=torch.uint8, local_cores=1)
    args.update(kwargs)
    return stoker.Loader(**args)


def epoch_checksum(loader):
    """(checksum hex, keys in order) of one epoch, as stoker_fetch
    --checksum digests it."""
    checksum = stoker.Checksum()
    keys = []
    for images, labels, info in loader.iter_with_info():
        checksum.update(images.permute(0, 2, 3, 1).contiguous().numpy())
        checksum.update(labels.to(torch.int32).numpy())
        checksum.update(np.asarray(info["sample_indices"], dtype=np.int64))
        keys.extend(info["keys"])
    return checksum.hex(), keys


def server_children(parent):
    """Pids of the stoker_server processes whose parent is `parent`."""
    return sorted(pid for pid, name in child_processes(parent).items()
                  if name == "stoker_server")


def alive(pid):
    """False once `pid` is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def shared_memory_left():
    """This process's stoker-batches memfds and mappings."""
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "stoker-batches" in target:
            fds.append(target)
    with open("/proc/self/maps") as f:
        maps = [line for line in f if "stoker-batches" in line]
    return fds + maps


def port_open(port):
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(predicate, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class LocalServersTest(unittest.TestCase):

    def test_epoch_equals_a_separately_started_server_and_close_leaves_nothing(self):
        server = st.Server(GLOB)
        try:
            # On this host but without --shared_memory: it says why and
            # sends the pixels through the socket.
            with stoker.Loader(server.address, "train", batch_size=BATCH,
                               transform=st.TRANSFORM, seed=SEED,
                               device="cpu", dtype=torch.uint8) as remote:
                expected, expected_keys = epoch_checksum(remote)
                self.assertEqual(remote.stats()["shared_memory_batches"], 0)
        finally:
            server.kill()
        loader = local_loader()
        pids = server_children(os.getpid())
        self.assertEqual(len(pids), 1)
        got, keys = epoch_checksum(loader)
        # Every batch came through shared memory, bit-identical.
        stats = loader.stats()
        self.assertEqual(stats["shared_memory_batches"],
                         stats["received_batches"])
        self.assertGreater(stats["shared_memory_batches"], 0)
        self.assertNotEqual(shared_memory_left(), [])
        self.assertEqual(got, expected)
        self.assertEqual(keys, expected_keys)
        self.assertEqual(sorted(keys), sorted(LABELS))
        ports = [int(a.rsplit(":", 1)[1])
                 for a in loader.stats()["batches_by_server"]]
        self.assertEqual(len(ports), 1)
        # Pinned to the CPU it was given.
        with open(f"/proc/{pids[0]}/status") as f:
            allowed = [line.split(":")[1].strip() for line in f
                       if line.startswith("Cpus_allowed_list")]
        self.assertEqual(allowed, [str(max(os.sched_getaffinity(0)))])
        loader.close()
        self.assertEqual(server_children(os.getpid()), [])
        self.assertFalse(alive(pids[0]))
        self.assertFalse(port_open(ports[0]))
        self.assertEqual(shared_memory_left(), [])

    def test_the_socket_path_gives_the_same_batches(self):
        with local_loader() as shared, local_loader(shared_memory=False) as tcp:
            self.assertEqual(epoch_checksum(shared), epoch_checksum(tcp))
            self.assertEqual(tcp.stats()["shared_memory_batches"], 0)
            self.assertGreater(shared.stats()["shared_memory_batches"], 0)

    def test_sigkill_of_the_training_process_takes_its_servers(self):
        script = textwrap.dedent(f"""
            import os, sys, time, torch, stoker
            loader = stoker.Loader(dataset="train", shards={GLOB!r},
                                   batch_size=4, transform={st.TRANSFORM!r},
                                   device="cpu", dtype=torch.uint8,
                                   local_servers=2, local_cores=2
                                   if len(os.sched_getaffinity(0)) > 1
                                   else 1)
            next(iter(loader))
            print("ready", flush=True)
            time.sleep(600)
        """)
        if len(os.sched_getaffinity(0)) < 2:
            script = script.replace("local_servers=2", "local_servers=1")
        trainer = subprocess.Popen([sys.executable, "-c", script],
                                   stdout=subprocess.PIPE, text=True,
                                   env=dict(os.environ))
        try:
            self.assertEqual(trainer.stdout.readline().strip(), "ready")
            pids = server_children(trainer.pid)
            self.assertGreaterEqual(len(pids), 1)
            trainer.send_signal(signal.SIGKILL)
            trainer.wait(timeout=30)
            # Checked from outside: they notice the closed link and exit.
            # Reparented to init (or a subreaper), so only liveness counts.
            self.assertTrue(wait_until(
                lambda: not any(alive(p) for p in pids)),
                f"local servers {pids} outlived their trainer")
        finally:
            if trainer.poll() is None:
                trainer.kill()
                trainer.wait()
            trainer.stdout.close()

    def test_a_killed_local_server_is_a_failover_and_is_started_again(self):
        if len(os.sched_getaffinity(0)) < 2:
            self.skipTest("two local servers need two CPUs")
        loader = local_loader(local_servers=2, local_cores=2, batch_size=4,
                              prefetch=2)
        try:
            first = server_children(os.getpid())
            self.assertEqual(len(first), 2)
            keys = []
            for i, (_, _, info) in enumerate(loader.iter_with_info()):
                keys.extend(info["keys"])
                if i == 2:
                    os.kill(first[0], signal.SIGKILL)
            self.assertEqual(sorted(keys), sorted(LABELS))
            # Restarted on the same port, under a new pid.
            self.assertTrue(wait_until(
                lambda: len(server_children(os.getpid())) == 2))
            self.assertNotIn(first[0], server_children(os.getpid()))
            _, again = epoch_checksum(loader)
            self.assertEqual(sorted(again), sorted(LABELS))
        finally:
            loader.close()
        self.assertEqual(server_children(os.getpid()), [])

    def test_fixed_size_fields_come_through_shared_memory_too(self):
        fields = ("image=jpg:image, label=cls:class, "
                  "views=jpg:image:repeats=2")
        with local_loader(fields=fields) as shared, \
                local_loader(fields=fields, shared_memory=False) as tcp:
            got = list(shared)
            want = list(tcp)
            self.assertGreater(shared.stats()["shared_memory_batches"], 0)
            self.assertEqual(shared.stats()["shared_memory_batches"],
                             shared.stats()["received_batches"])
        self.assertEqual(len(got), len(want))
        for a, b in zip(got, want):
            self.assertEqual(list(a), ["image", "label", "views"])
            for name in a:
                self.assertTrue(torch.equal(a[name], b[name]), name)

    def test_the_only_local_server_killed_mid_epoch_comes_back(self):
        # No other server: the epoch goes on once it is started again.
        with local_loader(batch_size=4, prefetch=2,
                          batches_per_request=1) as loader:
            (first,) = server_children(os.getpid())
            keys = []
            for i, (_, _, info) in enumerate(loader.iter_with_info()):
                keys.extend(info["keys"])
                if i == 2:
                    os.kill(first, signal.SIGKILL)
            self.assertEqual(sorted(keys), sorted(LABELS))
            self.assertGreaterEqual(loader.stats()["stream_failures"], 1)

    def test_hybrid_survives_the_remote_server_dying_mid_epoch(self):
        remote = st.Server(GLOB)
        try:
            loader = stoker.Loader(["local", remote.address], "train",
                                   shards=GLOB, local_cores=1, batch_size=4,
                                   transform=st.TRANSFORM, seed=SEED,
                                   device="cpu", dtype=torch.uint8,
                                   prefetch=4, batches_per_request=1)
            with loader:
                keys = []
                for i, (_, _, info) in enumerate(loader.iter_with_info()):
                    keys.extend(info["keys"])
                    if i == 2:
                        remote.kill()
                self.assertEqual(sorted(keys), sorted(LABELS))
                self.assertEqual(len(keys), len(set(keys)))
        finally:
            remote.kill()

    def test_bad_local_arguments_fail_before_the_first_batch(self):
        empty = st.temp_dir("no_shards")
        with self.assertRaisesRegex(Exception, "no .tar shards match"):
            local_loader(shards=os.path.join(empty, "*.tar"))
        with self.assertRaisesRegex(ValueError, "local_cores"):
            local_loader(local_cores=0)
        with self.assertRaisesRegex(ValueError, "local_cores"):
            local_loader(local_cores=len(os.sched_getaffinity(0)) + 1)
        with self.assertRaisesRegex(ValueError, "local_cores"):
            local_loader(local_cores=[-1])
        with self.assertRaisesRegex(Exception, "CPUs 1000 are not available"):
            local_loader(local_cores=[1000])
        with self.assertRaisesRegex(Exception, "not an executable file"):
            local_loader(server_binary="/nonexistent/stoker_server")
        with self.assertRaisesRegex(ValueError, "no shards"):
            stoker.Loader("local", "train", device="cpu")
        with self.assertRaisesRegex(ValueError, "shards are for local"):
            stoker.Loader("127.0.0.1:1", "train", shards=GLOB, device="cpu")
        with self.assertRaisesRegex(ValueError, "server_flags"):
            local_loader(server_flags="--threads=1")
        with self.assertRaisesRegex(Exception, "exited before listening"):
            local_loader(server_flags=["--max_image_pixels=0"])
        with self.assertRaisesRegex(ValueError, "number of local servers"):
            local_loader(local_servers=2, local_cores=1)
        self.assertEqual(server_children(os.getpid()), [])


if __name__ == "__main__":
    unittest.main()
