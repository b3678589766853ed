"""Python ops for the tests of stoker_server --python_ops: well-behaved
ones, and ones that raise, crash, hang or eat memory on the samples their
generator picks."""

import ctypes
import time

import numpy as np


def noop(image, rng):
    return image


def invert(image, rng):
    return 255 - image  # a new array: copied back by the worker


def invert_in_place(image, rng):
    np.subtract(255, image, out=image)
    return image


def noise(image, rng, amount: int = 16):
    delta = rng.integers(-amount, amount + 1, size=image.shape)
    return np.clip(image.astype(np.int16) + delta, 0, 255).astype(np.uint8)


def stamp(image, mask, rng, value: int = 7):
    """Sets the top-left pixel of the mask to `value` and of the image to
    (value, value, value)."""
    image[0, 0] = value
    if mask is not None:
        mask[0, 0] = value
    return image, mask


def typed(image, rng, count: int = 1, scale: float = 1.0, flag: bool = False,
          mode: str = "fast", box: tuple = (0.0, 1.0), *, needed: int):
    return image


def raise_some(image, rng, p: float = 0.25):
    if rng.random() < p:
        raise ValueError("unlucky sample")
    return image


def segfault_some(image, rng, p: float = 0.1):
    if rng.random() < p:
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    return image


def hang_some(image, rng, p: float = 0.1):
    if rng.random() < p:
        time.sleep(1e6)
    return image


def hog_some(image, rng, p: float = 0.1):
    if rng.random() < p:
        hoard = []
        while True:
            hoard.append(np.empty(1 << 26, np.uint8))
    return image


def raise_unicode(image, rng):
    # More than a status entry holds, with multi-byte characters across
    # the cut, and a lone surrogate.
    raise ValueError("é" * 300 + "\ud800")


def wrong_shape(image, rng):
    return image[:1]


def exit_worker(image, rng):
    raise SystemExit(3)


STOKER_OPS = [
    {"fn": noop, "name": "Noop"},
    {"fn": invert, "name": "Invert"},
    {"fn": invert_in_place, "name": "InvertInPlace"},
    {"fn": noise, "name": "Noise", "limits": {"amount": (0, 255)}},
    {"fn": stamp, "name": "Stamp", "mask": True,
     "limits": {"value": (0, 255)}},
    {"fn": typed, "name": "Typed", "limits": {"count": (1, 10)},
     "choices": {"mode": ["fast", "slow"]}},
    {"fn": raise_some, "name": "RaiseSome"},
    {"fn": segfault_some, "name": "SegfaultSome"},
    {"fn": hang_some, "name": "HangSome"},
    {"fn": hog_some, "name": "HogSome"},
    {"fn": raise_unicode, "name": "RaiseUnicode"},
    {"fn": wrong_shape, "name": "WrongShape"},
    {"fn": exit_worker, "name": "ExitWorker"},
]
