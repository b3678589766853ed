"""Every op of the registry (image/ops/registry.h) against torchvision 0.14 on
PIL images, through tools/augment_preview (the server's sample path).

Run with Debian's /usr/bin/python3 (torchvision 0.14.1, Pillow 9.4, numpy).

1. Pixels. For each case (a pipeline and how its result compares), run
   augment_preview --trace on a real photo (a desktop background under
   /usr/share cut to 500x375, else a photo-like synthetic image), then replay
   each sample's trace with torchvision.transforms.functional on the PIL
   image, and compare:
     exact   torchvision is exact here (pixel ops, flips, crops, pads, affine
             transforms of one op): every byte equal;
     near    max difference 1 on at most 0.1% of the bytes (gaussian_blur,
             whose float32 convolution order is PyTorch's);
     psnr    our single resample of several folded geometric ops (or a
             resize of a crop box) against torchvision's chain: PSNR >= 35 dB.
   Samples of "exact" cases in which two resampling ops fold into one warp
   (RandAugment's Rotate then ShearX, ...) are held to "psnr".
2. Distributions. augment_preview --trace_only draws 20000 samples' params;
   torchvision's own get_params (or its forward, with _apply_op recording)
   draws 20000 with torch.manual_seed(0); a two-sample Kolmogorov-Smirnov
   test per parameter must pass at alpha = 1e-4. Both sides are seeded, so
   the outcome is deterministic.

Prints per-case figures (max diff, % bytes equal, PSNR; KS D per parameter).
"""

import collections
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.autoaugment as tv_autoaugment
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.transforms import InterpolationMode

WIDTH, HEIGHT = 500, 375
# The identity crop: a fixed output size that leaves the image unchanged, so
# an op that keeps the size can be tested alone.
IDENTITY = f"CenterCrop(({HEIGHT}, {WIDTH}))"
KS_SAMPLES = 20000
KS_ALPHA = 1e-4
MIN_PSNR = 35.0


def find_tool():
    """Under bazel test, from the runfiles; by hand, $AUGMENT_PREVIEW."""
    if os.environ.get("AUGMENT_PREVIEW"):
        return os.environ["AUGMENT_PREVIEW"]
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir:
        workspace = os.environ.get("TEST_WORKSPACE", "stoker")
        return os.path.join(srcdir, workspace, "tools", "augment_preview")
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "..", "bazel-bin", "tools",
                        "augment_preview")


TOOL = find_tool()


def run_tool(*args):
    proc = subprocess.run([TOOL, *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"augment_preview {' '.join(args)} failed "
                           f"({proc.returncode}): {proc.stderr.strip()}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line]


def registry_ops():
    """The registry's op names, from the error for an unknown one."""
    proc = subprocess.run([TOOL, "--trace_only", "--width=8", "--height=8",
                           "--transform=NoSuchOp()"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    message = proc.stderr
    marker = "supported: "
    assert proc.returncode != 0 and marker in message, message
    names = message.split(marker, 1)[1].split(";")[0].strip()
    return {n.strip() for n in names.split(",")}


# ---- The test image ---------------------------------------------------------


def synthetic_photo():
    """Smooth shading, edges, texture and noise: photo-like statistics."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
    r = 120 + 80 * np.sin(x / 37.0) * np.cos(y / 23.0)
    g = 90 + 0.3 * x + 40 * (((x // 50) + (y // 40)) % 2)
    b = 60 + 0.4 * y + 30 * np.sin((x + y) / 9.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 6, (HEIGHT, WIDTH, 3))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def test_photo():
    """A real photo cut to 500x375 (and what it is), else a synthetic one."""
    candidates = sorted(glob.glob("/usr/share/backgrounds/**/*.jpg",
                                  recursive=True) +
                        glob.glob("/usr/share/desktop-base/**/*.jpg",
                                  recursive=True) +
                        glob.glob("/usr/share/wallpapers/**/*.jpg",
                                  recursive=True))
    # A textured nature photo first (grass, sky and sea), then any.
    candidates.sort(key=lambda p: (not p.endswith("/Dune.jpg"),
                                   "nature" not in p, p))
    for path in candidates:
        try:
            with Image.open(path) as im:
                im = im.convert("RGB")
                if im.width < WIDTH or im.height < HEIGHT:
                    continue
                scale = max(WIDTH / im.width, HEIGHT / im.height)
                size = (max(WIDTH, round(im.width * scale)),
                        max(HEIGHT, round(im.height * scale)))
                im = im.resize(size, Image.BICUBIC)
                left = (im.width - WIDTH) // 2
                top = (im.height - HEIGHT) // 2
                return im.crop((left, top, left + WIDTH, top + HEIGHT)), path
        except OSError:
            continue
    return synthetic_photo(), "synthetic"


# ---- Replaying traces with torchvision ----------------------------------------


def parse_size(v):
    return [v, v] if isinstance(v, int) else list(v)


INTERPOLATIONS = {
    "nearest": InterpolationMode.NEAREST,
    "bilinear": InterpolationMode.BILINEAR,
    "bicubic": InterpolationMode.BICUBIC,
}


def interp(kw, default):
    return INTERPOLATIONS[kw.get("interpolation", default)]


def fill_of(kw):
    fill = kw.get("fill", 0)
    return list(fill) if isinstance(fill, tuple) else fill


class Trace:
    """A sample's trace entries, consumed in order."""

    def __init__(self, entries):
        self.entries = collections.deque(entries)

    def pop(self, op):
        assert self.entries, f"trace ended, expected {op}"
        e = self.entries.popleft()
        assert e["op"] == op, f"expected {op}, got {e['op']}"
        return e["params"]


def applied(p):
    return p.get("applied", 1) == 1


def apply_functional(img, entry, interpolation, fill):
    """The functional call a policy traced (augment_policy.h)."""
    op, p = entry["op"], entry["params"]
    if op == "affine":
        center = None
        if "center_x" in p:
            center = [int(p["center_x"]), int(p["center_y"])]
        return F.affine(img, angle=p["angle"],
                        translate=[int(p["translate_x"]),
                                   int(p["translate_y"])],
                        scale=p["scale"], shear=[p["shear_x"], p["shear_y"]],
                        interpolation=interpolation, fill=fill, center=center)
    if op == "rotate":
        return F.rotate(img, p["angle"], interpolation=interpolation,
                        fill=fill)
    if op in ("adjust_brightness", "adjust_saturation", "adjust_contrast",
              "adjust_sharpness"):
        return getattr(F, op)(img, p["factor"])
    if op == "posterize":
        return F.posterize(img, int(p["bits"]))
    if op == "solarize":
        return F.solarize(img, p["threshold"])
    if op in ("autocontrast", "equalize", "invert"):
        return getattr(F, op)(img)
    raise AssertionError(f"unknown functional {op}")


def replay_op(img, name, kw, trace):
    """Applies op `name` (arguments `kw`) as torchvision would with the
    parameters `trace` recorded."""
    if name == "RandomResizedCrop":
        p = trace.pop("resized_crop")
        return F.resized_crop(img, int(p["top"]), int(p["left"]),
                              int(p["height"]), int(p["width"]),
                              parse_size(kw["size"]),
                              interp(kw, "bilinear"))
    if name == "Resize":
        size = kw["size"]
        size = [size] if isinstance(size, int) else list(size)
        return F.resize(img, size, interp(kw, "bilinear"),
                        max_size=kw.get("max_size"))
    if name == "CenterCrop":
        p = trace.pop("center_crop")
        h, w = parse_size(kw["size"])

        # F.center_crop's offset: pad (c - n) // 2 first, or round half to
        # even.
        def offset(n, c):
            return -((c - n) // 2) if c > n else int(round((n - c) / 2.0))

        want = (offset(img.height, h), offset(img.width, w))
        assert (p["top"], p["left"]) == want, (p, want)
        return F.center_crop(img, [h, w])
    if name == "RandomCrop":
        p = trace.pop("crop")
        fill = fill_of(kw)
        if "padding" in kw:
            padding = kw["padding"]
            img = F.pad(img, list(padding) if isinstance(padding, tuple)
                        else padding, fill, "constant")
        h, w = parse_size(kw["size"])
        if kw.get("pad_if_needed") and img.width < w:
            img = F.pad(img, [w - img.width, 0], fill, "constant")
        if kw.get("pad_if_needed") and img.height < h:
            img = F.pad(img, [0, h - img.height], fill, "constant")
        return F.crop(img, int(p["top"]), int(p["left"]), int(p["height"]),
                      int(p["width"]))
    if name == "RandomHorizontalFlip":
        return F.hflip(img) if applied(trace.pop("hflip")) else img
    if name == "RandomVerticalFlip":
        return F.vflip(img) if applied(trace.pop("vflip")) else img
    if name == "RandomRotation":
        p = trace.pop("rotate")
        center = kw.get("center")
        return F.rotate(img, p["angle"], interp(kw, "nearest"), False,
                        list(center) if center else None, fill_of(kw))
    if name == "RandomAffine":
        p = trace.pop("affine")
        center = kw.get("center")
        return F.affine(img, p["angle"],
                        [int(p["translate_x"]), int(p["translate_y"])],
                        p["scale"], [p["shear_x"], p["shear_y"]],
                        interp(kw, "nearest"), fill_of(kw),
                        list(center) if center else None)
    if name == "ColorJitter":
        trace.pop("ColorJitter")
        enabled = [k for k in ("brightness", "contrast", "saturation", "hue")
                   if kw.get(k)]
        for _ in enabled:
            e = trace.entries[0]
            p = trace.pop(e["op"])
            if e["op"] == "adjust_hue":
                img = F.adjust_hue(img, p["hue_factor"])
            else:
                assert e["op"] in ("adjust_brightness", "adjust_contrast",
                                   "adjust_saturation"), e["op"]
                img = getattr(F, e["op"])(img, p["factor"])
        return img
    if name in ("Grayscale", "RandomGrayscale"):
        p = trace.pop("rgb_to_grayscale")
        return F.rgb_to_grayscale(img, 3) if applied(p) else img
    if name == "GaussianBlur":
        p = trace.pop("gaussian_blur")
        return F.gaussian_blur(img, [int(p["kernel_w"]), int(p["kernel_h"])],
                               [p["sigma_x"], p["sigma_y"]])
    if name == "RandomSolarize":
        p = trace.pop("solarize")
        return F.solarize(img, p["threshold"]) if applied(p) else img
    if name == "RandomPosterize":
        p = trace.pop("posterize")
        return F.posterize(img, int(p["bits"])) if applied(p) else img
    if name == "RandomEqualize":
        return F.equalize(img) if applied(trace.pop("equalize")) else img
    if name == "RandomAutocontrast":
        return F.autocontrast(img) if applied(trace.pop("autocontrast")) \
            else img
    if name == "RandomAdjustSharpness":
        p = trace.pop("adjust_sharpness")
        return F.adjust_sharpness(img, p["factor"]) if applied(p) else img
    if name == "RandomInvert":
        return F.invert(img) if applied(trace.pop("invert")) else img
    if name in ("RandAugment", "TrivialAugmentWide", "AutoAugment"):
        mode = interp(kw, "nearest")
        fill = fill_of(kw)
        runs = kw.get("num_ops", 2) if name == "RandAugment" else 1
        for _ in range(runs):
            head = trace.pop(name)
            if name == "AutoAugment":
                count = int(head["applied_0"] + head["applied_1"])
            else:
                count = 0 if head["op_index"] == 0 else 1  # 0: Identity
            for _ in range(count):
                img = apply_functional(img, trace.entries.popleft(), mode,
                                       fill)
        return img
    raise AssertionError(f"no replay for {name}")


RESAMPLING = {"resized_crop", "rotate", "affine"}
PIXEL = {"adjust_brightness", "adjust_contrast", "adjust_saturation",
         "adjust_hue", "rgb_to_grayscale", "gaussian_blur", "solarize",
         "posterize", "equalize", "autocontrast", "adjust_sharpness",
         "invert"}


def folds_resamplings(trace):
    """Whether two resampling ops meet in one warp (no pixel op between)."""
    run = 0
    for e in trace:
        if e["op"] in PIXEL and applied(e["params"]):
            run = 0
        elif e["op"] in RESAMPLING:
            run += 1
            if run >= 2:
                return True
    return False


# ---- Cases -----------------------------------------------------------------


def text_of(ops):
    def value(v):
        if isinstance(v, tuple):
            return "(" + ", ".join(str(x) for x in v) + ")"
        return str(v)

    steps = []
    for name, kw in ops:
        args = ", ".join(f"{k}={value(v)}" for k, v in kw.items())
        steps.append(f"{name}({args})")
    return "|".join(steps)


ID = ("CenterCrop", {"size": (HEIGHT, WIDTH)})

# (label, ops, mode, sample count). Modes (see meets()):
#   exact         every byte equal;
#   pm1           every byte within 1 (Pillow's resize: image/resample.h
#                 documents +-1 against Pillow 9.4);
#   near          within 1 on at most 0.1% of the bytes (gaussian_blur);
#   interior1/2   within 1 (bilinear) or 2 (bicubic) away from a 2-pixel
#                 border, and PSNR >= 35 dB: a crop box resampled in one
#                 pass, whose filter also reads the source just outside the
#                 box where torchvision's crop-then-resize cannot;
#   psnr          PSNR >= 35 dB (folded geometric ops against the chain).
# An op that keeps the size is followed by the identity crop ID, which
# folds into its warp without changing it.
PIXEL_CASES = [
    ("RandomResizedCrop", [("RandomResizedCrop", {"size": 224})],
     "interior1", 8),
    ("RandomResizedCrop bicubic",
     [("RandomResizedCrop", {"size": (160, 224), "scale": (0.3, 1.0),
                             "interpolation": "bicubic"})], "interior2", 6),
    ("RandomResizedCrop nearest",
     [("RandomResizedCrop", {"size": 224, "interpolation": "nearest"})],
     "exact", 6),
    ("Resize (h, w)", [("Resize", {"size": (300, 420)})], "pm1", 1),
    ("Resize bicubic max_size",
     [("Resize", {"size": 200, "max_size": 250, "interpolation": "bicubic"}),
      ("CenterCrop", {"size": 150})], "interior2", 1),
    ("Resize+CenterCrop", [("Resize", {"size": 256}),
                           ("CenterCrop", {"size": 224})], "pm1", 1),
    ("CenterCrop", [("CenterCrop", {"size": (200, 311)})], "exact", 1),
    ("CenterCrop padded", [("CenterCrop", {"size": (400, 521)})], "exact", 1),
    ("RandomCrop padding",
     [("RandomCrop", {"size": 224, "padding": 16, "fill": (10, 20, 30)})],
     "exact", 6),
    ("RandomCrop pad_if_needed",
     [("RandomCrop", {"size": (400, 520), "pad_if_needed": True,
                      "fill": 255})], "exact", 6),
    ("RandomHorizontalFlip", [("RandomHorizontalFlip", {}), ID], "exact", 4),
    ("RandomVerticalFlip", [("RandomVerticalFlip", {}), ID], "exact", 4),
    ("RandomRotation nearest",
     [("RandomRotation", {"degrees": 30, "fill": (10, 20, 30)}), ID],
     "exact", 8),
    ("RandomRotation bilinear",
     [("RandomRotation", {"degrees": 45, "interpolation": "bilinear"}), ID],
     "exact", 6),
    ("RandomRotation bicubic center",
     [("RandomRotation", {"degrees": (-20, 40), "interpolation": "bicubic",
                          "center": (100, 80)}), ID], "exact", 4),
    ("RandomAffine nearest",
     [("RandomAffine", {"degrees": 20, "translate": (0.1, 0.1),
                        "scale": (0.8, 1.2), "shear": (-10, 10, -5, 5),
                        "fill": 128}), ID], "exact", 8),
    ("RandomAffine bilinear",
     [("RandomAffine", {"degrees": 10, "translate": (0.2, 0.05),
                        "shear": 15, "interpolation": "bilinear"}), ID],
     "exact", 6),
    # Whole-pixel ops (crops, flips) fold exactly into a following rotation:
    # torchvision's chain is exact, and so must the folded warp be.
    ("HorizontalFlip+RandomRotation",
     [("RandomHorizontalFlip", {"p": 1}),
      ("RandomRotation", {"degrees": 30, "fill": (10, 20, 30)}), ID],
     "exact", 8),
    ("CenterCrop+RandomRotation",
     [("CenterCrop", {"size": 300}),
      ("RandomRotation", {"degrees": 30, "fill": (10, 20, 30)})], "exact",
     40),
    # torchvision's bilinear transform of the crop replicates the crop's edge
    # pixels; the folded warp reads the source beyond them (inside the clip).
    ("CenterCrop+RandomAffine bilinear",
     [("CenterCrop", {"size": 300}),
      ("RandomAffine", {"degrees": 10, "translate": (0.1, 0.1),
                        "interpolation": "bilinear"})], "psnr", 6),
    ("RandomResizedCrop+RandomRotation",
     [("RandomResizedCrop", {"size": 224}),
      ("RandomRotation", {"degrees": 20, "interpolation": "bilinear"})],
     "psnr", 6),
    ("Resize+flip+crop",
     [("Resize", {"size": 256}), ("RandomHorizontalFlip", {}),
      ("RandomCrop", {"size": 224})], "pm1", 4),
    ("ColorJitter",
     [("ColorJitter", {"brightness": 0.4, "contrast": 0.4,
                       "saturation": 0.4, "hue": 0.1}), ID], "exact", 8),
    ("ColorJitter brightness+hue",
     [("ColorJitter", {"brightness": (0.2, 1.8), "hue": (-0.5, 0.5)}), ID],
     "exact", 4),
    ("Grayscale", [("Grayscale", {"num_output_channels": 3}), ID], "exact",
     1),
    ("RandomGrayscale", [("RandomGrayscale", {"p": 0.5}), ID], "exact", 4),
    ("GaussianBlur", [("GaussianBlur", {"kernel_size": 5}), ID], "near", 4),
    ("GaussianBlur (3, 9)",
     [("GaussianBlur", {"kernel_size": (3, 9), "sigma": (1.0, 3.0)}), ID],
     "near", 3),
    ("RandomSolarize", [("RandomSolarize", {"threshold": 128}), ID], "exact",
     4),
    ("RandomPosterize", [("RandomPosterize", {"bits": 3}), ID], "exact", 4),
    ("RandomEqualize", [("RandomEqualize", {}), ID], "exact", 4),
    ("RandomAutocontrast", [("RandomAutocontrast", {}), ID], "exact", 4),
    ("RandomAdjustSharpness",
     [("RandomAdjustSharpness", {"sharpness_factor": 2}), ID], "exact", 4),
    ("RandomInvert", [("RandomInvert", {}), ID], "exact", 4),
    ("RandAugment", [("RandAugment", {}), ID], "exact", 16),
    ("RandAugment bilinear fill",
     [("RandAugment", {"num_ops": 3, "magnitude": 15,
                       "interpolation": "bilinear",
                       "fill": (128, 128, 128)}), ID], "exact", 12),
    ("TrivialAugmentWide", [("TrivialAugmentWide", {}), ID], "exact", 16),
    ("AutoAugment imagenet", [("AutoAugment", {}), ID], "exact", 12),
    ("AutoAugment cifar10",
     [("AutoAugment", {"policy": "cifar10"}), ID], "exact", 8),
    ("AutoAugment svhn", [("AutoAugment", {"policy": "svhn"}), ID], "exact",
     8),
    ("RandomResizedCrop+ColorJitter+flip",
     [("RandomResizedCrop", {"size": 224}),
      ("ColorJitter", {"brightness": 0.4, "contrast": 0.4,
                       "saturation": 0.4}),
      ("RandomHorizontalFlip", {})], "psnr", 6),
    ("RandomResizedCrop+TrivialAugmentWide",
     [("RandomResizedCrop", {"size": 224}), ("TrivialAugmentWide", {})],
     "psnr", 12),
]


def compare(ours, ref):
    a = np.asarray(ours, dtype=np.int16)
    b = np.asarray(ref, dtype=np.int16)
    if a.shape != b.shape:
        return None
    diff = np.abs(a - b)
    mse = float(np.mean(diff.astype(np.float64) ** 2))
    psnr = math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)
    inner = diff[2:-2, 2:-2]
    return {"max": int(diff.max()), "equal": float(np.mean(diff == 0)),
            "psnr": psnr, "interior": int(inner.max()) if inner.size else 0}


def meets(mode, fig):
    if mode == "exact":
        return fig["max"] == 0
    if mode == "pm1":
        return fig["max"] <= 1
    if mode == "near":
        return fig["max"] <= 1 and fig["equal"] >= 0.999
    if mode.startswith("interior"):
        return fig["interior"] <= int(mode[-1]) and fig["psnr"] >= MIN_PSNR
    assert mode == "psnr", mode
    return fig["psnr"] >= MIN_PSNR


# ---- Distributions -----------------------------------------------------------


def ks_statistic(a, b):
    a = np.sort(np.asarray(a, dtype=np.float64))
    b = np.sort(np.asarray(b, dtype=np.float64))
    values = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, values, side="right") / len(a)
    cdf_b = np.searchsorted(b, values, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def ks_threshold(n, m, alpha=KS_ALPHA):
    return math.sqrt(-0.5 * math.log(alpha / 2)) * math.sqrt((n + m) / (n * m))


def ours_params(text, pick, seed=0):
    """pick(sample JSON) -> dict of name -> value, per sample."""
    lines = run_tool("--trace_only", f"--width={WIDTH}", f"--height={HEIGHT}",
                     f"--count={KS_SAMPLES}", f"--seed={seed}",
                     f"--transform={text}")
    out = collections.defaultdict(list)
    for line in lines:
        for k, v in pick(line).items():
            out[k].append(v)
    return out


def first(line, op):
    for e in line["trace"]:
        if e["op"] == op:
            return e["params"]
    raise AssertionError(f"no {op} in {line['trace']}")


def torch_samples(draw):
    torch.manual_seed(0)
    out = collections.defaultdict(list)
    for _ in range(KS_SAMPLES):
        for k, v in draw().items():
            out[k].append(v)
    return out


def policy_recorder(transform, image):
    """Runs a torchvision policy's forward with _apply_op recording
    (op name, magnitude) instead of applying it."""
    calls = []
    original = tv_autoaugment._apply_op

    def record(img, op_name, magnitude, interpolation, fill):
        calls.append((op_name, magnitude))
        return img

    def draw():
        calls.clear()
        tv_autoaugment._apply_op = record
        try:
            transform(image)
        finally:
            tv_autoaugment._apply_op = original
        return list(calls)

    return draw


RA_OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY",
          "Rotate", "Brightness", "Color", "Contrast", "Sharpness",
          "Posterize", "Solarize", "AutoContrast", "Equalize"]


def dist_cases():
    """(label, our text, pick, torchvision draw)."""
    blank = torch.empty((3, HEIGHT, WIDTH), dtype=torch.uint8)
    padded = torch.empty((3, HEIGHT + 32, WIDTH + 32), dtype=torch.uint8)
    image = Image.new("RGB", (WIDTH, HEIGHT))
    cases = []

    def window(op):
        return lambda line: {k: first(line, op)[k]
                             for k in ("top", "left", "height", "width")}

    def rrc_draw():
        i, j, h, w = T.RandomResizedCrop.get_params(blank, [0.08, 1.0],
                                                    [3 / 4, 4 / 3])
        return {"top": i, "left": j, "height": h, "width": w}

    cases.append(("RandomResizedCrop", "RandomResizedCrop(224)",
                  window("resized_crop"), rrc_draw))

    def rrc_narrow_draw():
        i, j, h, w = T.RandomResizedCrop.get_params(blank, [0.5, 0.9],
                                                    [0.5, 2.0])
        return {"top": i, "left": j, "height": h, "width": w}

    cases.append(("RandomResizedCrop scale/ratio",
                  "RandomResizedCrop(64, scale=(0.5, 0.9), ratio=(0.5, 2))",
                  window("resized_crop"), rrc_narrow_draw))

    def crop_draw():
        i, j, h, w = T.RandomCrop.get_params(padded, (224, 224))
        return {"top": i, "left": j}

    cases.append(("RandomCrop", "RandomCrop(224, padding=16)",
                  lambda line: {k: first(line, "crop")[k]
                                for k in ("top", "left")}, crop_draw))

    for op, trace_op in (("RandomHorizontalFlip", "hflip"),
                         ("RandomVerticalFlip", "vflip")):
        cases.append((op, f"{IDENTITY}|{op}(p=0.3)",
                      lambda line, t=trace_op: {
                          "applied": first(line, t)["applied"]},
                      lambda: {"applied": float(torch.rand(1) < 0.3)}))

    cases.append(("RandomRotation", f"{IDENTITY}|RandomRotation((-30, 50))",
                  lambda line: {"angle": first(line, "rotate")["angle"]},
                  lambda: {"angle": T.RandomRotation.get_params([-30.0,
                                                                 50.0])}))

    def affine_draw():
        angle, (tx, ty), scale, (sx, sy) = T.RandomAffine.get_params(
            [-20.0, 20.0], [0.1, 0.3], [0.8, 1.2], [-10.0, 10.0, -5.0, 5.0],
            [WIDTH, HEIGHT])
        return {"angle": angle, "translate_x": tx, "translate_y": ty,
                "scale": scale, "shear_x": sx, "shear_y": sy}

    cases.append(("RandomAffine",
                  f"{IDENTITY}|RandomAffine(20, translate=(0.1, 0.3), "
                  "scale=(0.8, 1.2), shear=(-10, 10, -5, 5))",
                  lambda line: dict(first(line, "affine")), affine_draw))

    jitter = T.ColorJitter(0.4, 0.4, 0.4, 0.1)

    def jitter_pick(line):
        out = dict(first(line, "ColorJitter"))
        out["brightness"] = first(line, "adjust_brightness")["factor"]
        out["contrast"] = first(line, "adjust_contrast")["factor"]
        out["saturation"] = first(line, "adjust_saturation")["factor"]
        out["hue"] = first(line, "adjust_hue")["hue_factor"]
        return out

    def jitter_draw():
        fn_idx, b, c, s, h = T.ColorJitter.get_params(
            jitter.brightness, jitter.contrast, jitter.saturation, jitter.hue)
        out = {f"fn_idx_{k}": int(fn_idx[k]) for k in range(4)}
        out.update(brightness=b, contrast=c, saturation=s, hue=h)
        return out

    cases.append(("ColorJitter",
                  f"{IDENTITY}|ColorJitter(0.4, 0.4, 0.4, 0.1)", jitter_pick,
                  jitter_draw))

    cases.append(("GaussianBlur", f"{IDENTITY}|GaussianBlur(5)",
                  lambda line: {"sigma": first(line, "gaussian_blur")[
                      "sigma_x"]},
                  lambda: {"sigma": T.GaussianBlur.get_params(0.1, 2.0)}))

    for op, trace_op in (("RandomGrayscale(p=0.2)", "rgb_to_grayscale"),
                         ("RandomSolarize(128, p=0.4)", "solarize"),
                         ("RandomPosterize(4, p=0.6)", "posterize"),
                         ("RandomEqualize(p=0.5)", "equalize"),
                         ("RandomAutocontrast(p=0.7)", "autocontrast"),
                         ("RandomAdjustSharpness(2, p=0.1)",
                          "adjust_sharpness"),
                         ("RandomInvert(p=0.5)", "invert")):
        p = float(op.split("p=")[1].rstrip(")"))
        cases.append((op.split("(")[0], f"{IDENTITY}|{op}",
                      lambda line, t=trace_op: {
                          "applied": first(line, t)["applied"]},
                      lambda p=p: {"applied": float(torch.rand(1) < p)}))

    # Policies: the chosen op and its signed magnitude, per application.
    def policy_pick(name):
        def pick(line):
            out = collections.defaultdict(list)
            for e in line["trace"]:
                if e["op"] != name:
                    continue
                if name == "AutoAugment":
                    out["policy_id"] = e["params"]["policy_id"]
                    out["applied"] = (e["params"]["applied_0"] +
                                      e["params"]["applied_1"])
                else:
                    out["op_index"].append(e["params"]["op_index"])
                    out["magnitude"].append(e["params"]["magnitude"])
            return {k: v for k, v in out.items()}
        return pick

    def policy_draw(transform):
        draw = policy_recorder(transform, image)

        def run():
            calls = draw()
            return {"op_index": [RA_OPS.index(c[0]) for c in calls],
                    "magnitude": [c[1] for c in calls]}
        return run

    cases.append(("RandAugment", f"{IDENTITY}|RandAugment()",
                  policy_pick("RandAugment"), policy_draw(T.RandAugment())))
    cases.append(("RandAugment magnitude 20",
                  f"{IDENTITY}|RandAugment(num_ops=1, magnitude=20)",
                  policy_pick("RandAugment"),
                  policy_draw(T.RandAugment(num_ops=1, magnitude=20))))
    cases.append(("TrivialAugmentWide", f"{IDENTITY}|TrivialAugmentWide()",
                  policy_pick("TrivialAugmentWide"),
                  policy_draw(T.TrivialAugmentWide())))

    auto = T.AutoAugment()

    def auto_draw():
        policy_id, probs, signs = auto.get_params(len(auto.policies))
        steps = auto.policies[policy_id]
        return {"policy_id": policy_id,
                "applied": sum(int(probs[i] <= steps[i][1]) for i in
                               range(2))}

    cases.append(("AutoAugment", f"{IDENTITY}|AutoAugment()",
                  policy_pick("AutoAugment"), auto_draw))
    return cases


def flatten(samples):
    out = {}
    for k, v in samples.items():
        flat = []
        for x in v:
            flat.extend(x if isinstance(x, list) else [x])
        out[k] = flat
    return out


class TorchvisionOpsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        base = os.environ.get("TEST_TMPDIR") or tempfile.gettempdir()
        cls.dir = tempfile.mkdtemp(prefix="torchvision_ops_", dir=base)
        cls.image, cls.image_source = test_photo()
        cls.png = os.path.join(cls.dir, "photo.png")
        cls.image.save(cls.png)
        print(f"\ntest image: {cls.image_source} cut to {WIDTH}x{HEIGHT}",
              flush=True)

    def run_case(self, label, ops, mode, count, image_path=None,
                 reference=None, extra=()):
        text = text_of(ops)
        out = os.path.join(self.dir, label.replace(" ", "_").replace(
            "/", "_").replace("+", "_") + ".ppm")
        lines = run_tool(f"--image={image_path or self.png}",
                         f"--transform={text}", "--seed=3", "--index=0",
                         f"--count={count}", f"--out={out}", "--trace",
                         *extra)
        self.assertEqual(len(lines), count)
        worst = {"max": 0, "equal": 1.0, "psnr": math.inf, "interior": 0}
        failures = []
        folded = 0
        for line in lines:
            index = line["index"]
            path = out if count == 1 else \
                f"{out[:-len('.ppm')]}.{index}.ppm"
            with Image.open(path) as im:
                ours = im.convert("RGB")
            trace = Trace(line["trace"])
            ref = reference or self.image
            for name, kw in ops:
                ref = replay_op(ref, name, kw, trace)
            self.assertFalse(trace.entries, f"{label}: unused trace entries")
            fig = compare(ours, ref)
            if fig is None:
                failures.append(f"sample {index}: size {ours.size} vs "
                                f"torchvision {ref.size}")
                continue
            sample_mode = mode
            if mode != "psnr" and folds_resamplings(line["trace"]):
                sample_mode = "psnr"
                folded += 1
            if not meets(sample_mode, fig):
                failures.append(
                    f"sample {index} ({sample_mode}): max diff {fig['max']}, "
                    f"{100 * fig['equal']:.3f}% equal, PSNR "
                    f"{fig['psnr']:.2f} dB; trace "
                    f"{[(e['op'], e['params']) for e in line['trace']]}")
            worst["max"] = max(worst["max"], fig["max"])
            worst["equal"] = min(worst["equal"], fig["equal"])
            worst["psnr"] = min(worst["psnr"], fig["psnr"])
            worst["interior"] = max(worst["interior"], fig["interior"])
        note = f" ({folded} folded, held to psnr)" if folded else ""
        print(f"{label:38s} {mode:9s} n={count:2d} max diff "
              f"{worst['max']:3d} (interior {worst['interior']:3d})  equal "
              f"{100 * worst['equal']:7.3f}%  PSNR {worst['psnr']:6.2f} dB"
              f"{note}", flush=True)
        return [f"{label} [{text}]: {f}" for f in failures]

    def test_every_op_matches_torchvision_pixels(self):
        covered = {name for _, ops, _, _ in PIXEL_CASES for name, _ in ops}
        missing = registry_ops() - covered
        self.assertFalse(missing, f"ops without a pixel case: {missing}")
        print(f"\n{'case':38s} {'mode':9s} samples, worst: max |diff| "
              "(away from a 2-pixel border), % bytes equal, PSNR", flush=True)
        failures = []
        for label, ops, mode, count in PIXEL_CASES:
            failures += self.run_case(label, ops, mode, count)
        self.assertFalse(failures, "\n".join(failures))

    def test_jpeg_path_matches_pil_decoding(self):
        jpeg = os.path.join(self.dir, "photo.jpg")
        self.image.save(jpeg, quality=92)
        with Image.open(jpeg) as im:
            decoded = im.convert("RGB")
        failures = []
        # libjpeg's decode, whole and partial (the rows and iMCU columns the
        # warp reads), is PIL's.
        failures += self.run_case("JPEG decode", [ID], "exact", 1, jpeg,
                                  decoded, ("--dct_scaling=false",))
        failures += self.run_case(
            "JPEG partial decode", [("RandomCrop", {"size": (97, 131)})],
            "exact", 4, jpeg, decoded, ("--dct_scaling=false",))
        ops = [("RandomResizedCrop", {"size": 224}),
               ("RandomHorizontalFlip", {})]
        failures += self.run_case("JPEG RandomResizedCrop exact decode", ops,
                                  "interior1", 6, jpeg, decoded,
                                  ("--dct_scaling=false",))
        failures += self.run_case(
            "JPEG Resize(64) DCT-scaled",
            [("Resize", {"size": 64}), ("CenterCrop", {"size": 64})], "psnr",
            1, jpeg, decoded, ("--dct_scaling=true",))
        self.assertFalse(failures, "\n".join(failures))

    def test_drawn_parameters_follow_torchvision_distributions(self):
        cases = dist_cases()
        random_ops = {"RandomResizedCrop", "RandomCrop", "RandomHorizontalFlip",
                      "RandomVerticalFlip", "RandomRotation", "RandomAffine",
                      "ColorJitter", "RandomGrayscale", "GaussianBlur",
                      "RandomSolarize", "RandomPosterize", "RandomEqualize",
                      "RandomAutocontrast", "RandomAdjustSharpness",
                      "RandomInvert", "RandAugment", "TrivialAugmentWide",
                      "AutoAugment"}
        # Every op that draws is covered; the others draw nothing.
        self.assertEqual(registry_ops() - random_ops,
                         {"Resize", "CenterCrop", "Grayscale"})
        covered = {label.split(" ")[0] for label, _, _, _ in cases}
        self.assertEqual(random_ops - covered, set())
        threshold = ks_threshold(KS_SAMPLES, KS_SAMPLES)
        print(f"\nKS over {KS_SAMPLES} samples each side, alpha {KS_ALPHA}: "
              f"D must be < {threshold:.4f} (for n = m = {KS_SAMPLES})",
              flush=True)
        failures = []
        for label, text, pick, draw in cases:
            ours = flatten(ours_params(text, pick))
            theirs = flatten(torch_samples(draw))
            figures = []
            for name in sorted(theirs):
                a, b = ours.get(name, []), theirs[name]
                if not a:
                    failures.append(f"{label}: no {name} in our traces")
                    continue
                d = ks_statistic(a, b)
                limit = ks_threshold(len(a), len(b))
                figures.append(f"{name} {d:.4f}")
                if d >= limit:
                    failures.append(
                        f"{label}: {name} differs (KS D {d:.4f} >= "
                        f"{limit:.4f}; ours mean {np.mean(a):.4f}, "
                        f"torchvision mean {np.mean(b):.4f})")
            print(f"{label:32s} KS D: {', '.join(figures)}", flush=True)
        self.assertFalse(failures, "\n".join(failures))

    def test_policy_magnitudes_are_torchvisions_values(self):
        # Every (op, signed magnitude) RandAugment and TrivialAugmentWide use
        # is a value torchvision uses, and every value occurs.
        image = Image.new("RGB", (WIDTH, HEIGHT))
        failures = []
        for label, text, transform, name in (
                ("RandAugment", f"{IDENTITY}|RandAugment(magnitude=13)",
                 T.RandAugment(magnitude=13), "RandAugment"),
                ("TrivialAugmentWide", f"{IDENTITY}|TrivialAugmentWide()",
                 T.TrivialAugmentWide(), "TrivialAugmentWide")):
            lines = run_tool("--trace_only", f"--width={WIDTH}",
                             f"--height={HEIGHT}", f"--count={KS_SAMPLES}",
                             f"--transform={text}")
            ours = set()
            for line in lines:
                for e in line["trace"]:
                    if e["op"] == name:
                        ours.add((RA_OPS[int(e["params"]["op_index"])],
                                  e["params"]["magnitude"]))
            draw = policy_recorder(transform, image)
            torch.manual_seed(0)
            theirs = set()
            for _ in range(KS_SAMPLES):
                theirs.update(draw())
            # Magnitudes of ops without one are 0.0 on both sides.
            if ours != theirs:
                failures.append(
                    f"{label}: only ours {sorted(ours - theirs)[:10]}, "
                    f"only torchvision's {sorted(theirs - ours)[:10]}")
            print(f"{label:20s} {len(ours)} distinct (op, magnitude) pairs, "
                  f"torchvision {len(theirs)}", flush=True)
        self.assertFalse(failures, "\n".join(failures))


if __name__ == "__main__":
    unittest.main(verbosity=2)
