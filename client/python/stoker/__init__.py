"""Stoker for PyTorch: decoded, augmented image batches from Stoker servers.

    import stoker, torch

    loader = stoker.Loader(
        servers="stoker-0:50051,stoker-1:50051",   # or a list, or dns:///name:port
        dataset="train",
        batch_size=256,
        transform="RandomResizedCrop(224)|RandomHorizontalFlip()",
        device="cuda", dtype=torch.bfloat16, channels_last=True)
    for epoch in range(90):
        loader.set_epoch(epoch)
        for images, labels in loader:      # torch tensors on the device
            ...

Every batch is converted straight into new tensors that the caller owns:
`images` is (N, 3, H, W) with channels-last strides when
channels_last=True, `labels` is int64 (N,) (float32 (N, num_classes) soft
targets with mixup_alpha / cutmix_alpha). With
fields="image=jpg:image, mask=seg.png:mask, caption=txt:text, ..." it yields
a dict of the named fields instead (tensors for images, masks and classes,
list[bytes] / list[str] for bytes and text). See `Loader` for fields,
epochs, ranks, checkpointing (state_dict), batch augmentations
(random_erasing, MixUp, CutMix) and statistics.

Errors are `StokerError` (a RuntimeError) subclasses that carry the status
code name in `.code`:

    StokerError(RuntimeError)
      InvalidArgumentError(StokerError, ValueError)   bad argument, option,
                                                      transform or state dict
      NotFoundError(StokerError, LookupError)         unknown dataset
      UnavailableError                                no server reachable for
                                                      unavailable_timeout
      FailedPreconditionError                         e.g. device="cuda"
                                                      without a GPU
      DataLossError                                   corrupt sample with
                                                      fail_on_bad_sample=True
      ResourceExhaustedError                          out of memory or buffers
      CancelledError
      UnauthenticatedError                            no or unknown token
      PermissionDeniedError(StokerError, PermissionError)  the token does
                                                      not cover the dataset

so `except ValueError` catches bad arguments and `except stoker.StokerError`
catches everything Stoker raises (KeyboardInterrupt aside).
"""

import importlib
from typing import TYPE_CHECKING, Any

from stoker._stoker import (
    CancelledError,
    Checksum,
    DataLossError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    StokerError,
    UnauthenticatedError,
    UnavailableError,
    set_log_level,
)
from stoker.pack import pack

if TYPE_CHECKING:
    from stoker.diagnose import diagnose
    from stoker.loader import IMAGENET_MEAN, IMAGENET_STD, Loader

# The names that need torch are imported on first use, so that the `stoker`
# command (serve, fetch, index, pack) runs where torch is not installed, as
# on a server host.
_NEEDS_TORCH = {
    "IMAGENET_MEAN": "stoker.loader",
    "IMAGENET_STD": "stoker.loader",
    "Loader": "stoker.loader",
    "diagnose": "stoker.diagnose",
}


def __getattr__(name: str) -> Any:
    module = _NEEDS_TORCH.get(name)
    if module is None:
        raise AttributeError(f"module 'stoker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    # Cached, and set after the import: importing the submodule
    # stoker.diagnose binds the module to this name first.
    globals()[name] = value
    return value


__version__ = "0.1.0"

# Exceptions raised from Python code get the same `.code` as those raised
# by the C++ side (which sets it on the instance).
for _cls, _code in (
    (StokerError, "UNKNOWN"),
    (InvalidArgumentError, "INVALID_ARGUMENT"),
    (NotFoundError, "NOT_FOUND"),
    (UnavailableError, "UNAVAILABLE"),
    (FailedPreconditionError, "FAILED_PRECONDITION"),
    (DataLossError, "DATA_LOSS"),
    (ResourceExhaustedError, "RESOURCE_EXHAUSTED"),
    (CancelledError, "CANCELLED"),
    (UnauthenticatedError, "UNAUTHENTICATED"),
    (PermissionDeniedError, "PERMISSION_DENIED"),
):
    _cls.code = _code
del _cls, _code

__all__ = [
    "CancelledError",
    "Checksum",
    "DataLossError",
    "FailedPreconditionError",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "InvalidArgumentError",
    "Loader",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "StokerError",
    "UnauthenticatedError",
    "UnavailableError",
    "diagnose",
    "pack",
    "set_log_level",
]
