"""Type stub for stoker._stoker, the pybind11 extension built from
client/python/stoker_ext.cc. Keep it in step with the bindings there
(PYBIND11_MODULE(_stoker, m)): names, argument names and defaults, and the
Python types the C++ types convert to. Users import `stoker` instead."""

from collections.abc import Sequence
from typing import Any, Literal, TypedDict, overload

from _typeshed import ReadableBuffer
from numpy import ndarray

# --- Errors (PyErr_NewExceptionWithDoc; `code` is the status code name,
# set on each raised instance and, by stoker/__init__.py, on the class) ---

class StokerError(RuntimeError):
    code: str

class InvalidArgumentError(StokerError, ValueError): ...
class NotFoundError(StokerError, LookupError): ...
class UnavailableError(StokerError): ...
class FailedPreconditionError(StokerError): ...
class DataLossError(StokerError): ...
class ResourceExhaustedError(StokerError): ...
class CancelledError(StokerError): ...
class UnauthenticatedError(StokerError): ...
class PermissionDeniedError(StokerError, PermissionError): ...

# --- Dicts built by the module ---

class _Cursor(TypedDict):
    """parse_cursor's result (client/cursor.h)."""

    plan_id: str
    epoch: int
    next_batch: int
    delivered_after: list[int]
    version: int

class _Field(TypedDict):
    """One entry of parse_fields' result (client/field_spec.h)."""

    name: str
    role: str  # "image", "video", "mask", "class", "bytes" or "text"
    missing: str  # "error", "skip" or "empty"
    channels: int
    repeats: int
    own_transform: bool

# --- Classes ---

class StagedBatch:
    """One received batch; convert_into fills the caller's tensors (see
    stoker.Loader). Made by Pipeline.next only (no Python constructor)."""

    # (n, c, h, w).
    @property
    def shape(self) -> tuple[int, int, int, int]: ...
    @property
    def soft_labels(self) -> bool: ...
    # (name, role, shape, is_image) per field; empty without fields.
    @property
    def fields(self) -> list[tuple[str, str, tuple[int, ...], bool]]: ...
    @overload
    def values(self, index: int, text: Literal[False]) -> list[bytes]: ...
    @overload
    def values(self, index: int, text: Literal[True]) -> list[str]: ...
    @overload
    def values(self, index: int, text: bool) -> list[bytes] | list[str]: ...
    # images, labels, stream and fields are addresses (0: none).
    def convert_into(
        self, images: int, labels: int, stream: int, fields: Sequence[int] = ...
    ) -> None: ...

class HostBuffer:
    # Exposes its bytes through the buffer protocol (torch.frombuffer).
    def __buffer__(self, flags: int) -> memoryview: ...

class HostBuffers:
    def __init__(self, max_cached_bytes: int) -> None: ...
    def take(self, bytes: int) -> HostBuffer: ...

class Settings:
    # The attributes are read-write; the std::array ones read back as lists
    # and accept any sequence of the right length.
    servers: str
    dataset: str
    mixture_names: list[str]
    mixture_weights: list[float]
    mixture_transforms: list[str]
    mixture_mode: str
    mixture_unit: str
    mixture_epoch_samples: int
    local_mixture_shards: list[str]
    local_shards: str
    local_cores: int
    local_cpus: list[int]
    local_servers: int
    server_binary: str
    server_flags: list[str]
    shared_memory: bool
    batch_size: int
    transform: str
    fields: str
    seed: int
    shuffle: bool
    shuffle_window: int
    cache_mode: str
    drop_last: bool
    rank: int
    world_size: int
    device: str
    dtype: str
    channels_last: bool
    mean: list[float]
    std: list[float]
    prefetch: int
    batches_per_request: int
    streams_per_server: int
    in_order: bool
    fail_on_bad_sample: bool
    tls_ca: str
    tls_cert: str
    tls_key: str
    token: str
    stall_timeout_s: float
    unavailable_timeout_s: float
    output_slots: int
    pinned_slots: int
    erasing_p: float
    erasing_scale: list[float]
    erasing_ratio: list[float]
    erasing_value: list[float]
    erasing_random: bool
    mixup_alpha: float
    cutmix_alpha: float
    mix_prob: float
    switch_prob: float
    label_smoothing: float
    num_classes: int
    def __init__(self) -> None: ...

class Pipeline:
    def __init__(self, settings: Settings, /) -> None: ...
    @property
    def num_batches(self) -> int: ...
    @property
    def dataset_samples(self) -> int: ...
    @property
    def classes(self) -> list[str]: ...
    @property
    def plan_id(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def legacy_plan_id(self) -> str: ...
    @property
    def epoch_batches(self) -> int: ...
    # dataset, fingerprint, transform, fields, seed, shuffle,
    # shuffle_window, mixture (client/cursor.h PlanFacts).
    @property
    def plan_facts(self) -> dict[str, Any]: ...
    # From saved cursors: this rank's own, any rank's of a synchronous job,
    # or every rank's (elastic resume).
    def start(self, cursors: list[str]) -> None: ...
    def start_epoch(self, epoch: int) -> None: ...
    # (batch, info dict: epoch, batch_index, keys, sample_indices, labels,
    # server, skipped, and with batch ops erase / mix), or None at the end
    # of the epoch.
    def next(self) -> tuple[StagedBatch, dict[str, Any]] | None: ...
    def abandon(self) -> None: ...
    def close(self) -> None: ...
    def cursor(self) -> str: ...
    # Cumulative figures (floats and ints; batches_by_server: dict[str, int]).
    def stats(self) -> dict[str, Any]: ...

class HostReplay:
    """One uint8 batch replayed through the loader's copy and conversion
    (stoker.diagnose)."""

    # pixels and labels are host addresses; shape is (n, h, w, c).
    def __init__(
        self, settings: Settings, pixels: int, labels: int, shape: Sequence[int]
    ) -> None: ...
    # (n, c, h, w).
    @property
    def shape(self) -> tuple[int, int, int, int]: ...
    def convert_into(self, images: int, labels: int, stream: int) -> None: ...

class Checksum:
    """The digest stoker_fetch --checksum prints (see client/checksum.h)."""

    def __init__(self) -> None: ...
    # Any C-contiguous object with the buffer protocol (py::buffer); Python
    # 3.11's typing has no name for that, so: the stdlib buffers and numpy
    # arrays.
    def update(self, data: ReadableBuffer | ndarray[Any, Any]) -> None: ...
    def hex(self) -> str: ...
    @property
    def value(self) -> int: ...

# --- Functions ---

def parse_cursor(text: str) -> _Cursor: ...
def parse_fields(text: str) -> list[_Field]: ...
def set_log_level(level: str) -> None: ...
def cuda_device_count() -> int: ...
