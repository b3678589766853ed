#!/usr/bin/python3
"""Stoker vs. a PyTorch DataLoader on training recipes, on real photos.

The companion of bench/run_benchmark.py (whose helpers it imports): the same
method (same cores for everything, stoker_server + stoker_fetch over
loopback against a DataLoader with num_workers = cores, the same batch size,
one untimed warm-up epoch each, then the same timed epochs, CPU time from
/proc and getrusage), but for whole augmentation recipes and on a corpus cut
from camera photos (tools/photo_shards.py, ImageNet-like sizes). Run with
Debian's interpreter (torch, torchvision) after building the binaries:

    bazel build -c opt //server:stoker_server //client:stoker_fetch \\
        //tools:make_sample_shards
    /usr/bin/python3 bench/recipe_benchmark.py \\
        --bazel_bin=bazel-out/k8-opt/bin --data_dir=/tmp/photos

Recipes (--recipes picks some; Stoker's text form, then the peer):
  default    RandomResizedCrop(224)|RandomHorizontalFlip(); the peer as in
             run_benchmark.py (PIL, the same two transforms, PILToTensor).
  default-synthetic
             the same on run_benchmark.py's synthetic corpus
             (make_sample_shards), i.e. that benchmark's images/s and CPU
             rows, to compare with its earlier figures.
  resnet50-v2
             torchvision's reference recipe for ResNet-50 IMAGENET1K_V2
             (references/classification/presets.py with train_crop_size 176,
             auto_augment ta_wide, random_erase 0.1, mixup 0.2, cutmix 1.0):
             RandomResizedCrop(176, bilinear), RandomHorizontalFlip,
             TrivialAugmentWide(bilinear). Peer: those, PILToTensor,
             ConvertImageDtype(float), Normalize, RandomErasing(p=0.1), and in
             collate_fn (in the workers, as the reference's train.py does)
             RandomChoice of MixUp(0.2) / CutMix(1.0) with one-hot targets.
  deit       DeiT's (timm: rand-m9-mstd0.5-inc1, reprob 0.25 remode pixel,
             mixup 0.8, cutmix 1.0, smoothing 0.1): RandomResizedCrop(224,
             bicubic), RandomHorizontalFlip, RandAugment(2, 9, bicubic) on
             both sides -- torchvision's RandAugment has no magnitude noise
             (timm's mstd0.5), so neither side uses one. Peer: as above
             with RandomErasing(p=0.25, value="random") and MixUp(0.8) /
             CutMix(1.0) with label smoothing 0.1 in collate_fn.
  simclr     RandomResizedCrop(224), RandomHorizontalFlip,
             ColorJitter(0.4, 0.4, 0.4, 0.1), RandomGrayscale(p=0.2),
             GaussianBlur(23, sigma=(0.1, 2.0)), uint8 out. SimCLR wraps
             ColorJitter in RandomApply(p=0.8); Stoker has no RandomApply, so
             both sides apply it to every image.

What the Stoker column covers: the server's per-sample work and delivery of
uint8 batches to stoker_fetch. Normalization, random erasing and MixUp /
CutMix are the client's (client/batch_ops.h), done on the GPU by the device
loader or on the host by stoker.Loader(device="cpu"); stoker_fetch does none
of them, while the peer's workers do all of them for resnet50-v2 and deit.
Their host cost is measured separately ("client-side batch ops"): the
stoker Python loader's CPU time per image with and without them, and
torchvision's / the reference's equivalents (RandomErasing per sample,
MixUp / CutMix per batch, on one thread as in a DataLoader worker).

Nothing is hard-coded: every figure is measured in this run. A step that
fails prints why and shows "n/a"; the others still run.
"""

import argparse
import inspect
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import run_benchmark as rb  # noqa: E402  (bench/ is not a package)

ROOT = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..")
GOAL_IMAGES = 3.0
NUM_CLASSES = 1000
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class Recipe:
    """One training recipe on both sides.

    stoker: Stoker's pipeline text; crop: its output side. peer: returns the
    torchvision transform of one PIL image (None: run_benchmark.py's
    default). erase_p / erase_random: RandomErasing's p and
    value="random" (normal noise) vs 0 (the mean). mixup / cutmix: Beta
    alphas (0: off). smoothing: label smoothing folded into the mixed
    targets. synthetic: run on run_benchmark.py's synthetic corpus.
    """

    def __init__(self, name, stoker, crop, peer, erase_p=0.0,
                 erase_random=False, mixup=0.0, cutmix=0.0, smoothing=0.0,
                 synthetic=False):
        self.name = name
        self.stoker = stoker
        self.crop = crop
        self.peer = peer
        self.erase_p = erase_p
        self.erase_random = erase_random
        self.mixup = mixup
        self.cutmix = cutmix
        self.smoothing = smoothing
        self.synthetic = synthetic

    @property
    def batch_ops(self):
        return self.erase_p > 0 or self.mixup > 0 or self.cutmix > 0


def _peer_resnet50_v2():
    import torch
    import torchvision.transforms as T
    bilinear = T.InterpolationMode.BILINEAR
    return T.Compose([
        T.RandomResizedCrop(176, interpolation=bilinear),
        T.RandomHorizontalFlip(),
        T.TrivialAugmentWide(interpolation=bilinear),
        T.PILToTensor(),
        T.ConvertImageDtype(torch.float),
        T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        T.RandomErasing(p=0.1),
    ])


def _peer_deit():
    import torch
    import torchvision.transforms as T
    bicubic = T.InterpolationMode.BICUBIC
    return T.Compose([
        T.RandomResizedCrop(224, interpolation=bicubic),
        T.RandomHorizontalFlip(),
        T.RandAugment(num_ops=2, magnitude=9, interpolation=bicubic),
        T.PILToTensor(),
        T.ConvertImageDtype(torch.float),
        T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        T.RandomErasing(p=0.25, value="random"),
    ])


def _peer_simclr():
    import torchvision.transforms as T
    return T.Compose([
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.ColorJitter(0.4, 0.4, 0.4, 0.1),
        T.RandomGrayscale(p=0.2),
        T.GaussianBlur(23, sigma=(0.1, 2.0)),
        T.PILToTensor(),
    ])


RECIPES = [
    Recipe("default", rb.DEFAULT_TRANSFORM, 224, None),
    Recipe("default-synthetic", rb.DEFAULT_TRANSFORM, 224, None,
           synthetic=True),
    Recipe("resnet50-v2",
           "RandomResizedCrop(176, interpolation=bilinear)|"
           "RandomHorizontalFlip()|TrivialAugmentWide(interpolation=bilinear)",
           176, _peer_resnet50_v2, erase_p=0.1, mixup=0.2, cutmix=1.0),
    Recipe("deit",
           "RandomResizedCrop(224, interpolation=bicubic)|"
           "RandomHorizontalFlip()|"
           "RandAugment(num_ops=2, magnitude=9, interpolation=bicubic)",
           224, _peer_deit, erase_p=0.25, erase_random=True, mixup=0.8,
           cutmix=1.0, smoothing=0.1),
    Recipe("simclr",
           "RandomResizedCrop(224)|RandomHorizontalFlip()|"
           "ColorJitter(0.4, 0.4, 0.4, 0.1)|RandomGrayscale(p=0.2)|"
           "GaussianBlur(23, sigma=(0.1, 2.0))",
           224, _peer_simclr),
]


class BatchMix:
    """MixUp / CutMix of a whole batch as torchvision's reference training
    script applies them (references/classification: RandomChoice of
    RandomMixup(p=1) and RandomCutmix(p=1), the batch rolled by one, one-hot
    targets), plus timm's label smoothing of those targets. Used as the
    DataLoader's collate_fn, so it runs in the workers as in the reference.
    Works in place on the collated batch (the reference clones it first)."""

    def __init__(self, mixup, cutmix, smoothing, num_classes=NUM_CLASSES):
        self.alphas = (mixup, cutmix)
        self.smoothing = smoothing
        self.num_classes = num_classes

    def __call__(self, samples):
        from torch.utils.data import default_collate
        images, labels = default_collate(samples)
        return self.mix(images, labels)

    def mix(self, images, labels):
        import torch
        off = self.smoothing / self.num_classes
        targets = torch.full((labels.shape[0], self.num_classes), off)
        targets.scatter_(1, labels[:, None], 1 - self.smoothing + off)
        modes = [i for i, a in enumerate(self.alphas) if a > 0]
        mode = modes[int(torch.randint(len(modes), ()))]
        alpha = self.alphas[mode]
        lam = float(torch._sample_dirichlet(torch.tensor([alpha, alpha]))[0])
        partner = images.roll(1, 0)
        if mode == 0:
            images.mul_(lam).add_(partner.mul_(1 - lam))
        else:
            height, width = images.shape[-2:]
            cx, cy = int(torch.randint(width, ())), int(torch.randint(
                height, ()))
            half_w = int(0.5 * math.sqrt(1 - lam) * width)
            half_h = int(0.5 * math.sqrt(1 - lam) * height)
            x0, x1 = max(cx - half_w, 0), min(cx + half_w, width)
            y0, y1 = max(cy - half_h, 0), min(cy + half_h, height)
            images[:, :, y0:y1, x0:x1] = partner[:, :, y0:y1, x0:x1]
            lam = 1 - (x1 - x0) * (y1 - y0) / (width * height)
        targets.mul_(lam).add_(targets.roll(1, 0).mul_(1 - lam))
        return images, targets


# ---------------------------------------------------------------- corpus


def photo_corpus(args):
    data_dir = args.data_dir
    if data_dir and rb.list_shards(data_dir):
        rb.log(f"reusing photo corpus in {data_dir}")
        return data_dir, False
    temporary = not data_dir
    if temporary:
        data_dir = tempfile.mkdtemp(prefix="stoker-recipes-")
    rb.log(f"writing {args.num_shards} x {args.samples_per_shard} photo "
           f"JPEGs to {data_dir}")
    subprocess.run([
        sys.executable, os.path.join(ROOT, "tools", "photo_shards.py"),
        f"--out_dir={data_dir}", f"--num_shards={args.num_shards}",
        f"--samples_per_shard={args.samples_per_shard}", f"--seed={args.seed}",
        f"--num_classes={NUM_CLASSES}"
    ], check=True, stdout=sys.stderr)
    return data_dir, temporary


def synthetic_corpus(args, bazel_bin):
    """run_benchmark.py's corpus with its default settings."""
    synthetic = argparse.Namespace(
        data_dir=args.synthetic_dir, num_shards=8, samples_per_shard=250,
        min_side=300, max_side=640, quality=90, seed=args.seed)
    return rb.make_corpus(synthetic, bazel_bin)


def describe_corpus(data_dir):
    """(images, MB, mean width, mean height) of a corpus, from its headers."""
    from PIL import Image
    import io
    samples = rb.index_shards(rb.list_shards(data_dir))
    widths = heights = 0
    handles = {}
    for path, offset, size, _ in samples:
        f = handles.get(path) or handles.setdefault(path, open(path, "rb"))
        f.seek(offset)
        w, h = Image.open(io.BytesIO(f.read(size))).size
        widths += w
        heights += h
    for f in handles.values():
        f.close()
    mb = sum(os.path.getsize(s) for s in rb.list_shards(data_dir)) / 1e6
    n = max(1, len(samples))
    return len(samples), mb, widths / n, heights / n


# ---------------------------------------------------------------- client ops


def stoker_loader_params():
    """stoker.Loader's keyword arguments, or None when the package does not
    import (build //client/python:stoker and put it on PYTHONPATH)."""
    try:
        import stoker
    except ImportError as e:
        rb.log(f"client ops: cannot import stoker ({e})")
        return None
    return set(inspect.signature(stoker.Loader.__init__).parameters)


def time_torch_batch_ops(args, recipe, height, width):
    """CPU-seconds per image of the peer's batch ops on one thread (as in a
    DataLoader worker): RandomErasing per sample, then MixUp / CutMix."""
    import torch
    import torchvision.transforms as T
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        erase = T.RandomErasing(p=recipe.erase_p,
                                value="random" if recipe.erase_random else 0)
        mix = BatchMix(recipe.mixup, recipe.cutmix, recipe.smoothing)
        generator = torch.Generator().manual_seed(args.seed)
        images = torch.randn(args.batch_size, 3, height, width,
                             generator=generator)
        labels = torch.randint(NUM_CLASSES, (args.batch_size,),
                               generator=generator)
        done = 0
        start_cpu = time.thread_time()
        start = time.time()
        while time.time() - start < args.ops_seconds or done == 0:
            # RandomErasing returns a copy of each sample it erases (its
            # inplace=False); collating is left out, as on Stoker's side.
            _ = [erase(x) for x in images]
            mix.mix(images, labels)
            done += args.batch_size
        return (time.thread_time() - start_cpu) / done
    finally:
        torch.set_num_threads(threads)


def _loader_kwargs(recipe, params, with_ops):
    """stoker.Loader arguments for the recipe's client-side ops, named as the
    loader spells them; None if it lacks any of them."""
    if not with_ops:
        return {}
    wanted = {}
    if recipe.erase_p > 0:
        wanted["random_erasing"] = {
            "p": recipe.erase_p,
            "value": "random" if recipe.erase_random else 0
        }
    if recipe.mixup > 0:
        wanted["mixup_alpha"] = recipe.mixup
    if recipe.cutmix > 0:
        wanted["cutmix_alpha"] = recipe.cutmix
    if recipe.smoothing > 0:
        wanted["label_smoothing"] = recipe.smoothing
    if recipe.mixup > 0 or recipe.cutmix > 0:
        wanted["num_classes"] = NUM_CLASSES
    if not set(wanted) <= params:
        return None
    return wanted


def time_stoker_loader(args, bazel_bin, data_dir, recipe, with_ops, params):
    """stoker.Loader(device="cpu", dtype=float32) streaming the recipe from
    a local server: images/s and CPU-seconds per image of the server, of
    the loader (this process's CPU time, which holds only the loader's
    threads while it iterates) and of this thread alone (the loader
    converts each batch, and applies the batch ops, on the thread that
    takes it)."""
    import stoker
    import torch
    kwargs = _loader_kwargs(recipe, params, with_ops)
    if kwargs is None:
        raise RuntimeError("stoker.Loader has no option for some of "
                           f"{recipe.name}'s batch ops")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    server = rb.Server(rb.server_command(args, bazel_bin, data_dir))
    try:
        loader = stoker.Loader(f"127.0.0.1:{server.port}", rb.DATASET,
                               batch_size=args.batch_size,
                               transform=recipe.stoker, seed=args.seed,
                               device="cpu", dtype=torch.float32, **kwargs)
        for _ in loader:  # warm-up epoch
            pass
        images = 0
        cpu = rb.rusage_seconds(resource.RUSAGE_SELF)
        server_cpu = rb.proc_cpu_seconds(server.process.pid)
        thread_cpu = time.thread_time()
        start = time.time()
        while time.time() - start < args.ops_seconds or images == 0:
            for batch, _ in loader:
                images += batch.shape[0]
        seconds = time.time() - start
        cpu = rb.rusage_seconds(resource.RUSAGE_SELF) - cpu
        thread_cpu = time.thread_time() - thread_cpu
        server_cpu = rb.proc_cpu_seconds(server.process.pid) - server_cpu
        loader.close()
    finally:
        server.stop()
        torch.set_num_threads(threads)
    return {"images_per_s": images / seconds, "cpu_per_image": cpu / images,
            "thread_cpu_per_image": thread_cpu / images,
            "server_cpu_per_image": server_cpu / images}


# ---------------------------------------------------------------- table


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def print_rows(header, rows, left=1):
    table = [header] + rows
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for k, r in enumerate(table):
        print("  ".join(c.ljust(w) if i < left else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))))
        if k == 0:
            print("  ".join("-" * w for w in widths))


def ms(x, spec=".2f"):
    return rb.fmt(None if x is None else x * 1e3, spec)


def print_report(args, corpora, results, client_ops, foreign):
    print()
    print(f"Stoker recipe benchmark: {args.cores} of {os.cpu_count()} cores "
          f"({cpu_model()}); every process is pinned to CPUs "
          f"0-{args.cores - 1}; batch {args.batch_size}; "
          f"stoker_server --threads={args.cores} + stoker_fetch over "
          f"loopback vs DataLoader num_workers={args.cores} (persistent, "
          "PIL); 1 untimed warm-up epoch each, then the same timed epochs.")
    for name, (n, mb, w, h) in corpora.items():
        print(f"Corpus {name}: {n} JPEGs, {mb:.0f} MB, mean {w:.0f}x{h:.0f} "
              "px.")
    print()
    rows = []
    for recipe, stoker, peer in results:
        s_ips = stoker and stoker["images_per_s"]
        p_ips = peer and peer["images_per_s"]
        s_cpu = stoker and stoker["cpu_per_image"]
        p_cpu = peer and peer["cpu_per_image"]
        ratio = rb.ratio_of(s_ips, p_ips)
        rows.append((
            recipe.name, rb.fmt(s_ips, ".0f"), rb.fmt(p_ips, ".0f"),
            rb.fmt(ratio, ".2f") + ("x" if ratio is not None else ""),
            rb.verdict(ratio, GOAL_IMAGES, True), ms(s_cpu), ms(p_cpu),
            rb.fmt(rb.ratio_of(s_cpu, p_cpu), ".2f"),
            str(stoker["epochs"]) if stoker else "n/a",
            str(stoker["images"]) if stoker else "n/a"))
    print_rows(("recipe", "Stoker img/s", "DataLoader img/s", "ratio",
                f">= {GOAL_IMAGES:.0f}x", "Stoker CPU-ms/img",
                "DataLoader CPU-ms/img", "CPU ratio", "epochs", "images"),
               rows)
    print()
    for recipe, _, _ in results:
        extra = ""
        if recipe.batch_ops:
            extra = (f"; peer adds RandomErasing(p={recipe.erase_p}"
                     f"{', value=random' if recipe.erase_random else ''}) "
                     f"per sample and MixUp({recipe.mixup}) / "
                     f"CutMix({recipe.cutmix})"
                     f"{f' with smoothing {recipe.smoothing}' if recipe.smoothing else ''}"
                     " per batch in collate_fn, float32 out; Stoker: uint8 "
                     "out, these ops are the client's (below)")
        print(f"  {recipe.name}: {recipe.stoker}{extra}")
    if client_ops:
        print()
        print("Client-side batch ops: stoker.Loader(device='cpu', "
              "dtype=float32) streaming the recipe from a local server "
              "(--threads=cores, same cores), without and with the recipe's "
              "erasing and mixing: the full recipe on a CPU-only host, "
              "compared with the DataLoader row above. convert: CPU time of "
              "the thread taking the batches, where the loader converts "
              "uint8 to normalized float and applies the batch ops; ops: "
              "the difference (same seed, so the same draws). torch ops: "
              "RandomErasing per sample + MixUp/CutMix per batch on a float "
              "batch, one thread, as the peer's workers run them.")
        peers = {recipe.name: peer for recipe, _, peer in results}
        rows = []
        for name, c in client_ops.items():
            plain, ops = c.get("loader"), c.get("loader_ops")
            peer = peers.get(name)
            delta = (None if plain is None or ops is None else
                     ops["thread_cpu_per_image"] -
                     plain["thread_cpu_per_image"])
            full_ips = ops and ops["images_per_s"]
            full_cpu = ops and (ops["cpu_per_image"] +
                                ops["server_cpu_per_image"])
            ratio = rb.ratio_of(full_ips, peer and peer["images_per_s"])
            rows.append((
                name, rb.fmt(full_ips, ".0f"),
                rb.fmt(ratio, ".2f") + ("x" if ratio is not None else ""),
                ms(full_cpu), ms(plain and plain["thread_cpu_per_image"],
                                 ".3f"),
                ms(ops and ops["thread_cpu_per_image"], ".3f"),
                ms(delta, ".3f"), ms(c.get("torch"), ".3f")))
        print_rows(("recipe", "Loader+ops img/s", "vs DataLoader",
                    "srv+Loader+ops CPU-ms/img", "convert CPU-ms/img",
                    "convert+ops CPU-ms/img", "ops CPU-ms/img",
                    "torch ops CPU-ms/img"), rows)
    print()
    print("CPU used on these cores by other processes during each step: " +
          ", ".join(f"{k} {v:.0%}" for k, v in foreign.items()) +
          (" -- the machine was shared; figures are disturbed."
           if any(v > 0.1 for v in foreign.values()) else "."))
    print(flush=True)


# ---------------------------------------------------------------- main


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bazel_bin", default="",
                   help="Folder holding server/, client/, tools/ binaries "
                   "(default: bazel-bin next to this script or in the current "
                   "directory; after `bazel build -c opt` pass "
                   "bazel-out/k8-opt/bin).")
    p.add_argument("--cores", type=int, default=os.cpu_count(),
                   help="CPUs for the whole run (the first N).")
    p.add_argument("--data_dir", default="",
                   help="Photo corpus folder: reused if it holds .tar shards, "
                   "written by tools/photo_shards.py otherwise (default: a "
                   "temporary folder).")
    p.add_argument("--synthetic_dir", default="",
                   help="Same for default-synthetic's make_sample_shards "
                   "corpus.")
    p.add_argument("--num_shards", type=int, default=8)
    p.add_argument("--samples_per_shard", type=int, default=250)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--recipes", default=",".join(r.name for r in RECIPES),
                   help="Comma-separated, from: " +
                   ", ".join(r.name for r in RECIPES))
    p.add_argument("--epochs", type=int, default=2,
                   help="Fewest timed epochs (both loaders).")
    p.add_argument("--min_seconds", type=float, default=10,
                   help="Time Stoker for at least about this long (adds "
                   "epochs); the peer runs the same epochs.")
    p.add_argument("--max_epochs", type=int, default=20)
    p.add_argument("--ops_seconds", type=float, default=10,
                   help="Seconds per client-side batch-op timing.")
    p.add_argument("--skip", default="",
                   help="Comma-separated: stoker, peer, client_ops.")
    p.add_argument("--server_flags", default="",
                   help="Extra stoker_server flags.")
    p.add_argument("--fetch_flags", default="",
                   help="Extra stoker_fetch flags.")
    args = p.parse_args()
    if not 1 <= args.cores <= os.cpu_count():
        sys.exit(f"--cores must be in 1..{os.cpu_count()}")
    by_name = {r.name: r for r in RECIPES}
    names = [n for n in args.recipes.split(",") if n]
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        sys.exit(f"--recipes: unknown {unknown}; pick from {list(by_name)}")
    recipes = [by_name[n] for n in names]
    skip = set(filter(None, args.skip.split(",")))

    os.sched_setaffinity(0, set(range(args.cores)))
    bazel_bin = rb.find_bazel_bin(args.bazel_bin)
    foreign = {}

    def attempt(name, fn):
        rb.log(f"--- {name}")
        monitor = rb.LoadMonitor(set(range(args.cores)))
        try:
            return fn()
        except Exception as e:  # one failed step must not hide the others
            rb.log(f"{name} failed: {e}")
            return None
        finally:
            foreign[name] = monitor.stop()

    temporaries = []
    corpora = {}
    dirs = {}
    try:
        if any(not r.synthetic for r in recipes):
            dirs["photos"], temporary = photo_corpus(args)
            if temporary:
                temporaries.append(dirs["photos"])
        if any(r.synthetic for r in recipes):
            dirs["synthetic"], temporary = synthetic_corpus(args, bazel_bin)
            if temporary:
                temporaries.append(dirs["synthetic"])
        for name, d in dirs.items():
            corpora[name] = describe_corpus(d)

        results = []
        for recipe in recipes:
            data_dir = dirs["synthetic" if recipe.synthetic else "photos"]
            rargs = argparse.Namespace(**vars(args))
            rargs.transform = recipe.stoker
            stoker = None
            if "stoker" not in skip:
                stoker = attempt(f"{recipe.name}/stoker",
                                 lambda: rb.bench_stoker(rargs, bazel_bin,
                                                         data_dir))
            peer = None
            if "peer" not in skip:
                epochs = stoker["epochs"] if stoker else args.epochs
                collate = (BatchMix(recipe.mixup, recipe.cutmix,
                                    recipe.smoothing)
                           if recipe.mixup or recipe.cutmix else None)
                peer = attempt(f"{recipe.name}/peer",
                               lambda: rb.bench_peer(
                                   rargs, data_dir, epochs,
                                   transform=recipe.peer and recipe.peer(),
                                   collate_fn=collate))
            results.append((recipe, stoker, peer))

        client_ops = {}
        with_ops = [r for r in recipes if r.batch_ops]
        if with_ops and "client_ops" not in skip:
            params = stoker_loader_params()
            for recipe in with_ops:
                c = client_ops[recipe.name] = {}
                c["torch"] = attempt(
                    f"{recipe.name}/torch_ops",
                    lambda: time_torch_batch_ops(args, recipe, recipe.crop,
                                                 recipe.crop))
                if params is None:
                    continue
                for key, ops in (("loader", False), ("loader_ops", True)):
                    c[key] = attempt(
                        f"{recipe.name}/{key}",
                        lambda: time_stoker_loader(args, bazel_bin,
                                                   dirs["photos"], recipe,
                                                   ops, params))
        print_report(args, corpora, results, client_ops, foreign)
    finally:
        import shutil
        for d in temporaries:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
