"""stoker.Loader with device="cuda" (Bazel tag "gpu": needs a CUDA GPU and a
CUDA build of PyTorch; fails, rather than skips, without them)."""

import io
import os
import tarfile
import unittest

import torch

import fields_test
import stoker
import stoker_testing as st

BATCH = 16
TRANSFORM = "RandomResizedCrop(224)|RandomHorizontalFlip()"

SERVER = None
GLOB = None


def setUpModule():
    global SERVER, GLOB
    if not torch.cuda.is_available():
        raise RuntimeError("loader_gpu_test needs a CUDA GPU and a CUDA build "
                           "of PyTorch (run it only with the 'gpu' tag)")
    GLOB, _ = st.make_shards("gpu_shards")
    SERVER = st.Server(GLOB, threads=2)


def tearDownModule():
    if SERVER is not None:
        SERVER.kill()


def make_loader(**kwargs):
    args = dict(servers=SERVER.address, dataset="train", batch_size=BATCH,
                transform=TRANSFORM, seed=7)
    args.update(kwargs)
    return stoker.Loader(**args)


def cpu_reference(**kwargs):
    loader = make_loader(device="cpu", **kwargs)
    return [(x.clone(), y.clone()) for x, y in loader]


class LoaderGpuTest(unittest.TestCase):

    def test_cuda_batches_equal_the_cpu_path_bit_for_bit(self):
        for dtype, channels_last in ((torch.float32, False),
                                     (torch.bfloat16, True),
                                     (torch.float16, False),
                                     (torch.uint8, True),
                                     (torch.uint8, False)):
            with self.subTest(dtype=dtype, channels_last=channels_last):
                reference = cpu_reference(dtype=dtype,
                                          channels_last=channels_last)
                loader = make_loader(device="cuda:0", dtype=dtype,
                                     channels_last=channels_last)
                got = []
                for images, labels in loader:
                    self.assertEqual(images.device, torch.device("cuda:0"))
                    self.assertEqual(labels.device, torch.device("cuda:0"))
                    self.assertEqual(images.dtype, dtype)
                    self.assertEqual(labels.dtype, torch.int64)
                    self.assertEqual(images.shape[1:], (3, 224, 224))
                    memory_format = (torch.channels_last if channels_last
                                     else torch.contiguous_format)
                    self.assertTrue(
                        images.is_contiguous(memory_format=memory_format))
                    got.append((images.cpu(), labels.cpu()))
                self.assertEqual(len(got), len(reference))
                for (a, b), (c, d) in zip(got, reference):
                    self.assertTrue(torch.equal(a, c))
                    self.assertTrue(torch.equal(b, d))

    def test_local_servers_through_page_locked_shared_memory(self):
        # The regions are cudaHostRegister'ed: the copy to the GPU reads the
        # slot the server wrote, and the batches equal the socket path's.
        for dtype, channels_last in ((torch.bfloat16, True),
                                     (torch.uint8, False)):
            with self.subTest(dtype=dtype, channels_last=channels_last):
                reference = cpu_reference(dtype=dtype,
                                          channels_last=channels_last)
                with stoker.Loader(dataset="train", shards=GLOB,
                                   batch_size=BATCH, transform=TRANSFORM,
                                   seed=7, device="cuda:0", dtype=dtype,
                                   channels_last=channels_last,
                                   server_binary=os.environ[
                                       "STOKER_SERVER_BIN"]) as loader:
                    got = [(x.cpu(), y.cpu()) for x, y in loader]
                    stats = loader.stats()
                self.assertEqual(stats["shared_memory_batches"],
                                 stats["received_batches"])
                self.assertEqual(len(got), len(reference))
                for (a, b), (c, d) in zip(got, reference):
                    self.assertTrue(torch.equal(a, c))
                    self.assertTrue(torch.equal(b, d))

    def test_every_batch_of_an_epoch_can_be_kept_on_the_gpu(self):
        reference = cpu_reference(dtype=torch.bfloat16, channels_last=True)
        loader = make_loader(device="cuda", dtype=torch.bfloat16,
                             channels_last=True, output_slots=2)
        kept = list(loader)
        torch.cuda.synchronize()
        self.assertEqual(len(kept), len(reference))
        self.assertGreater(len(kept), 2)
        for (a, b), (c, d) in zip(kept, reference):
            self.assertEqual(a.device, torch.device("cuda:0"))
            self.assertTrue(torch.equal(a.cpu(), c))
            self.assertTrue(torch.equal(b.cpu(), d))

    def test_consumer_on_a_side_stream_waits_for_each_batch(self):
        # The consumer takes each batch on a side stream. The conversion is
        # enqueued there and must wait (on the GPU) for the loader's copy
        # into the staging slot; without that wait it would read a slot the
        # loader's stream is still writing.
        reference = cpu_reference(dtype=torch.float32)
        loader = make_loader(device="cuda", dtype=torch.float32,
                             output_slots=2)
        side = torch.cuda.Stream()
        copies = []
        with torch.cuda.stream(side):
            for images, labels in loader:
                copies.append((images.clone(), labels.clone()))
                del images, labels
        side.synchronize()
        self.assertEqual(len(copies), len(reference))
        for (a, b), (c, d) in zip(copies, reference):
            self.assertTrue(torch.equal(a.cpu(), c))
            self.assertTrue(torch.equal(b.cpu(), d))

    def test_release_waits_for_the_consumers_queued_work(self):
        # The consumer queues a long GPU sleep after each batch, so the next
        # batch's conversion, queued behind it on the same stream, runs late.
        # Its staging slot must not be rewritten until that conversion has
        # run: the slot's release is recorded on the consumer's stream.
        reference = cpu_reference(dtype=torch.bfloat16, channels_last=True)
        loader = make_loader(device="cuda", dtype=torch.bfloat16,
                             channels_last=True, output_slots=2)
        side = torch.cuda.Stream()
        copies = []
        with torch.cuda.stream(side):
            for images, labels in loader:
                torch.cuda._sleep(20_000_000)  # tens of ms of GPU time
                copies.append((images.clone(), labels.clone()))
                del images, labels
        side.synchronize()
        self.assertEqual(len(copies), len(reference))
        for (a, b), (c, d) in zip(copies, reference):
            self.assertTrue(torch.equal(a.cpu(), c))
            self.assertTrue(torch.equal(b.cpu(), d))

    def test_batch_augmentations_on_cuda_equal_the_cpu_path(self):
        # Random erasing (noise) and MixUp / CutMix run as kernels on the
        # current stream; they must give the host's bytes and soft labels.
        for dtype, channels_last in ((torch.float32, False),
                                     (torch.bfloat16, True)):
            with self.subTest(dtype=dtype, channels_last=channels_last):
                kwargs = dict(dtype=dtype, channels_last=channels_last,
                              random_erasing=dict(p=0.5, value="random"),
                              mixup_alpha=0.8, cutmix_alpha=1.0,
                              label_smoothing=0.1, num_classes=1000)
                reference = cpu_reference(**kwargs)
                loader = make_loader(device="cuda:0", **kwargs)
                got = []
                for images, labels in loader:
                    self.assertEqual(labels.device, torch.device("cuda:0"))
                    self.assertEqual(labels.dtype, torch.float32)
                    self.assertEqual(labels.shape[1], 1000)
                    got.append((images.cpu(), labels.cpu()))
                self.assertEqual(len(got), len(reference))
                for (a, b), (c, d) in zip(got, reference):
                    self.assertTrue(torch.equal(a, c))
                    self.assertTrue(torch.equal(b, d))

    def test_fields_on_cuda_equal_the_cpu_path(self):
        # Masks (1 and 3 channels), views of one decode, text, bytes and
        # class fields: copied, widened and converted on the GPU, they must
        # equal the CPU path's (fields_test checks that one value by value).
        server = st.Server(fields_test.write_shards())
        requests = (
            "image=jpg:image, mask=seg.png:mask:skip, rgb=rgb.png:mask:skip, "
            "caption=txt:text, meta=json:bytes, label=cls:class",
            "global=jpg:image:repeats=2, local=jpg:image:transform="
            "RandomResizedCrop(16)|RandomHorizontalFlip():repeats=3, "
            "label=cls:class")

        def snapshot(batch):
            return {k: v.cpu().clone() if torch.is_tensor(v) else v
                    for k, v in batch.items()}
        try:
            for fields in requests:
                for dtype, channels_last in ((torch.float32, False),
                                             (torch.bfloat16, True)):
                    with self.subTest(fields=fields, dtype=dtype):
                        kwargs = dict(servers=server.address,
                                      dataset="train",
                                      transform=st.TRANSFORM, batch_size=4,
                                      seed=5, fields=fields, dtype=dtype,
                                      channels_last=channels_last)
                        reference = [snapshot(b) for b in
                                     stoker.Loader(device="cpu", **kwargs)]
                        got = []
                        for batch in stoker.Loader(device="cuda:0",
                                                   **kwargs):
                            for v in batch.values():
                                if torch.is_tensor(v):
                                    self.assertEqual(v.device,
                                                     torch.device("cuda:0"))
                            got.append(snapshot(batch))
                        self.assertGreater(len(reference), 2)
                        self.assertEqual(len(got), len(reference))
                        for a, b in zip(got, reference):
                            self.assertEqual(a.keys(), b.keys())
                            for k in a:
                                if torch.is_tensor(a[k]):
                                    self.assertEqual(a[k].dtype, b[k].dtype)
                                    self.assertTrue(torch.equal(a[k], b[k]),
                                                    k)
                                else:
                                    self.assertEqual(a[k], b[k], k)
        finally:
            server.kill()

    def test_video_clips_on_cuda_equal_the_cpu_path(self):
        # The fuzz target's seed videos (every demuxer and codec the server
        # allows), two clips per video, converted on the GPU.
        seeds = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "..", "fuzz", "corpus", "video")
        shard = os.path.join(st.temp_dir("video_shards"), "video-0.tar")
        # The seeds proper ("<codec>_<container>"), not reproducers.
        names = [n for n in sorted(os.listdir(seeds))
                 if not n.startswith("repro_")
                 and n.rsplit("_", 1)[1] in ("mp4", "mkv", "webm", "avi")]
        with tarfile.open(shard, "w") as tar:
            for i, name in enumerate(names):
                with open(os.path.join(seeds, name), "rb") as f:
                    video = f.read()[4:]  # the fuzz parameters
                ext = name.rsplit("_", 1)[1]
                for member, data in ((f"{name}.{ext}", video),
                                     (f"{name}.cls", f"{i}\n".encode())):
                    info = tarfile.TarInfo(member)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        server = st.Server(shard)
        try:
            for dtype, channels_last in ((torch.float32, False),
                                         (torch.bfloat16, True)):
                with self.subTest(dtype=dtype):
                    kwargs = dict(
                        servers=server.address, dataset="train",
                        transform="RandomResizedCrop(16)|"
                                  "RandomHorizontalFlip()",
                        batch_size=3, seed=9, dtype=dtype,
                        channels_last=channels_last,
                        fields="video=mp4;mkv;webm;avi:video:frames=4:"
                               "stride=2:clips=2, label=cls:class")
                    reference = [
                        {k: v.clone() for k, v in b.items()}
                        for b in stoker.Loader(device="cpu", **kwargs)]
                    got = []
                    for batch in stoker.Loader(device="cuda:0", **kwargs):
                        self.assertEqual(batch["video"].device,
                                         torch.device("cuda:0"))
                        got.append({k: v.cpu() for k, v in batch.items()})
                    self.assertEqual(sum(len(b["label"]) for b in got),
                                     len(names))
                    self.assertEqual(len(got), len(reference))
                    for a, b in zip(got, reference):
                        self.assertEqual(a["video"].shape[1:],
                                         (2, 4, 3, 16, 16))
                        self.assertTrue(torch.equal(a["video"], b["video"]))
                        self.assertTrue(torch.equal(a["label"], b["label"]))
        finally:
            server.kill()

    def test_state_dict_round_trip_on_cuda(self):
        reference = [y.cpu() for _, y in make_loader(device="cuda")]
        first = make_loader(device="cuda")
        labels = []
        for i, (_, y) in enumerate(first):
            labels.append(y.cpu())
            if i == 1:
                break
        second = make_loader(device="cuda")
        second.load_state_dict(first.state_dict())
        labels.extend(y.cpu() for _, y in second)
        self.assertEqual(len(labels), len(reference))
        for a, b in zip(labels, reference):
            self.assertTrue(torch.equal(a, b))


if __name__ == "__main__":
    unittest.main(verbosity=2)
