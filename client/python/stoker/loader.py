"""stoker.Loader: iterate over (images, labels) torch tensors from Stoker,
or over the fields a request names (dicts of tensors, bytes and str)."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Union, cast

import torch

from stoker import _binaries, _stoker

if TYPE_CHECKING:
    # A field's value in a yielded batch: a tensor (image, mask, class) or
    # the n values of a bytes / text field.
    _FieldValue = Union[torch.Tensor, list[bytes], list[str]]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.uint8: "uint8",
}
_DTYPE_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "uint8": torch.uint8,
}

_STATE_VERSION = 3


def _invalid(message: str) -> _stoker.InvalidArgumentError:
    return _stoker.InvalidArgumentError(message)


def _int_arg(name: str, value: object, minimum: int,
             maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _invalid(f"{name} must be an int, got {value!r}")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise _invalid(f"{name} must be {bound}, got {value}")
    return value


def _seconds_arg(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _invalid(f"{name} must be a number of seconds, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise _invalid(f"{name} must be > 0 seconds, got {value}")
    return value


def _servers_arg(servers: object) -> str:
    if isinstance(servers, str):
        text = servers
    elif isinstance(servers, (list, tuple)) and all(
            isinstance(s, str) for s in servers):
        text = ",".join(servers)
    else:
        raise _invalid(
            "servers must be a string 'host:port,...' (as stoker_fetch "
            "--servers: host:port, dns:///name:port, unix:PATH, local) or a "
            f"list of such strings, got {servers!r}")
    if not text.strip():
        raise _invalid("servers is empty; give at least one host:port or "
                       "dns:///name:port")
    return text


# Freed image tensors of a device="cpu" loader kept for reuse, at most.
_HOST_BUFFER_CACHE_BYTES = 768 << 20


def _server_binary() -> str:
    """stoker_server beside this package (a wheel's stoker/bin, or the Bazel
    build), or "" to let the loader look at $STOKER_SERVER and PATH."""
    if os.environ.get("STOKER_SERVER"):
        return ""
    return _binaries.beside_package("stoker_server") or ""


def _mixture_args(settings: _stoker.Settings, dataset: object,
                  mode: object, unit: object,
                  epoch_samples: object) -> list[str]:
    """Sets the dataset or the mixture; returns the mixture's source names
    ([] for one dataset)."""
    if dataset is None:
        raise _invalid("dataset is required: the dataset's name on the "
                       "servers (for local servers, any name), or a dict "
                       "{name: weight} of datasets to mix")
    if isinstance(dataset, str):
        if not dataset:
            raise _invalid("dataset must be a non-empty str")
        settings.dataset = dataset
        return []
    if not isinstance(dataset, dict) or not dataset:
        raise _invalid("dataset must be a name or a non-empty dict "
                       f"{{name: weight}}, got {dataset!r}")
    names, weights, transforms = [], [], []
    for name, value in dataset.items():
        if not isinstance(name, str) or not name:
            raise _invalid(f"mixture dataset names must be non-empty str, "
                           f"got {name!r}")
        transform = ""
        if isinstance(value, dict):
            unknown = set(value) - {"weight", "transform"}
            if unknown or "weight" not in value:
                raise _invalid(f"mixture source {name!r}: give a weight or a "
                               "dict with 'weight' and optionally "
                               f"'transform', got {value!r}")
            transform = value.get("transform", "")
            if not isinstance(transform, str):
                raise _invalid(f"mixture source {name!r}: transform must be "
                               f"a str, got {transform!r}")
            value = value["weight"]
        weight = _real_arg(f"the weight of {name!r}", value)
        if not weight > 0:  # (_real_arg refused NaN and infinities)
            raise _invalid(f"the weight of mixture source {name!r} must be "
                           f"a finite number > 0, got {value!r}")
        names.append(name)
        weights.append(weight)
        transforms.append(transform)
    settings.mixture_names = names
    settings.mixture_weights = weights
    settings.mixture_transforms = transforms
    if mode not in ("cycle", "first_exhausted"):
        raise _invalid("mixture_mode must be 'cycle' or 'first_exhausted', "
                       f"got {mode!r}")
    settings.mixture_mode = str(mode)
    if unit not in ("sample", "batch"):
        raise _invalid(f"mixture_unit must be 'sample' or 'batch', got "
                       f"{unit!r}")
    settings.mixture_unit = str(unit)
    if epoch_samples is not None:
        settings.mixture_epoch_samples = _int_arg(
            "mixture_epoch_samples", epoch_samples, 1)
    return names


def _local_args(settings: _stoker.Settings, shards: object,
                local_cores: object, local_servers: object,
                server_binary: object, server_flags: object) -> None:
    local = "local" in [s.strip() for s in settings.servers.split(",")]
    if not local:
        if shards is not None:
            raise _invalid("shards are for local servers: add 'local' to "
                           "servers, or leave servers out")
        return
    if shards is None:
        raise _invalid("servers include 'local' but no shards are given: "
                       "name the shard files, e.g. "
                       "shards='/data/train-*.tar', an ImageFolder folder "
                       "or a .csv / .jsonl file list")
    if not isinstance(shards, (str, os.PathLike)) or not os.fspath(shards):
        raise _invalid(f"shards must be a path pattern or URL, got "
                       f"{shards!r}")
    settings.local_shards = str(os.fspath(shards))
    allowed = sorted(os.sched_getaffinity(0))
    if local_cores is None:
        settings.local_cores = 0
    elif isinstance(local_cores, int) and not isinstance(local_cores, bool):
        settings.local_cores = _int_arg("local_cores", local_cores, 1,
                                        len(allowed))
    elif (isinstance(local_cores, (list, tuple, range)) and local_cores
          and all(isinstance(c, int) for c in local_cores)):
        if any(c < 0 for c in local_cores):
            raise _invalid(f"local_cores must be CPU numbers >= 0, got "
                           f"{local_cores!r}")
        # CPUs outside this process's affinity are fine (a trainer may pin
        # itself away from its servers); the server refuses CPUs its cgroup
        # does not have.
        settings.local_cpus = sorted(set(local_cores))
    else:
        raise _invalid(f"local_cores must be a number of CPUs, a list of CPU "
                       f"numbers or None, got {local_cores!r}")
    settings.local_servers = _int_arg("local_servers", local_servers, 1)
    if not isinstance(server_flags, (list, tuple)) or not all(
            isinstance(f, str) and f.startswith("--") for f in server_flags):
        raise _invalid(f"server_flags must be a list of --flag=value "
                       f"strings, got {server_flags!r}")
    settings.server_flags = [str(f) for f in server_flags]
    if server_binary is None:
        settings.server_binary = _server_binary()
    elif isinstance(server_binary, (str, os.PathLike)):
        settings.server_binary = str(os.fspath(server_binary))
    else:
        raise _invalid(f"server_binary must be a path, got {server_binary!r}")


def _device_arg(device: object) -> str:
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            raise _invalid(f"device must be 'cpu', 'cuda' or 'cuda:N', got "
                           f"{device!r}") from None
    if not isinstance(device, torch.device):
        raise _invalid(f"device must be a str or torch.device, got {device!r}")
    if device.type == "cpu":
        return "cpu"
    if device.type != "cuda":
        raise _invalid(f"device must be 'cpu', 'cuda' or 'cuda:N', got "
                       f"'{device}'")
    if not torch.cuda.is_available():
        raise _stoker.FailedPreconditionError(
            f"device '{device}' was requested but torch.cuda.is_available() "
            "is False (no GPU, or a PyTorch built without CUDA); use "
            "device='cpu'")
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index}"


def _dtype_arg(dtype: object) -> torch.dtype:
    if isinstance(dtype, str) and dtype in _DTYPE_NAMES:
        dtype = _DTYPE_NAMES[dtype]
    if dtype not in _DTYPES:
        raise _invalid(
            "dtype must be torch.float32, torch.float16, torch.bfloat16 or "
            f"torch.uint8, got {dtype!r}")
    return cast(torch.dtype, dtype)  # a key of _DTYPES


def _channels_arg(name: str, values: Iterable[Any]) -> list[float]:
    try:
        values = [float(v) for v in values]
    except (TypeError, ValueError):
        raise _invalid(f"{name} must be 3 numbers (R, G, B), got "
                       f"{values!r}") from None
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise _invalid(f"{name} must be 3 finite numbers (R, G, B), got "
                       f"{values!r}")
    return values


def _real_arg(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _invalid(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise _invalid(f"{name} must be finite, got {value}")
    return value


def _probability_arg(name: str, value: object) -> float:
    value = _real_arg(name, value)
    if not 0 <= value <= 1:
        raise _invalid(f"{name} must be a probability in [0, 1], got {value}")
    return value


def _range_arg(name: str, value: Any, low_ok: Callable[[float], bool],
               what: str) -> list[float]:
    """A (min, max) pair of finite numbers with min <= max and
    low_ok(min)."""
    pair: list[float] | None
    try:
        pair = [float(v) for v in value]
    except (TypeError, ValueError):
        pair = None
    if (pair is None or len(pair) != 2
            or not all(math.isfinite(v) for v in pair)
            or not low_ok(pair[0]) or pair[0] > pair[1]):
        raise _invalid(f"{name} must be a (min, max) pair with {what}, got "
                       f"{value!r}")
    return pair


# torchvision.transforms.RandomErasing's defaults.
_ERASING_DEFAULTS: dict[str, Any] = {
    "p": 0.5, "scale": (0.02, 0.33), "ratio": (0.3, 3.3), "value": 0}


def _random_erasing_arg(value: object) -> dict[str, Any]:
    """random_erasing -> dict(p, scale, ratio, value, random); p == 0: off."""
    if value is None:
        config = dict(_ERASING_DEFAULTS, p=0.0)
    elif isinstance(value, dict):
        unknown = set(value) - set(_ERASING_DEFAULTS)
        if unknown:
            raise _invalid(f"random_erasing has unknown keys {sorted(unknown)}; "
                           "use p, scale, ratio and value (as "
                           "torchvision.transforms.RandomErasing)")
        config = dict(_ERASING_DEFAULTS, **value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        config = dict(_ERASING_DEFAULTS, p=value)
    else:
        raise _invalid("random_erasing must be a probability p, or a dict "
                       "with p, scale, ratio and value (as "
                       f"torchvision.transforms.RandomErasing), got {value!r}")
    p = _probability_arg("random_erasing p", config["p"])
    scale = _range_arg("random_erasing scale", config["scale"],
                       lambda v: v >= 0, "0 <= min <= max <= 1")
    if scale[1] > 1:
        raise _invalid("random_erasing scale must be a (min, max) pair with "
                       f"0 <= min <= max <= 1, got {config['scale']!r}")
    ratio = _range_arg("random_erasing ratio", config["ratio"],
                       lambda v: v > 0, "0 < min <= max")
    fill = config["value"]
    random = isinstance(fill, str)
    if random:
        if fill != "random":
            raise _invalid("random_erasing value must be a number, 3 numbers "
                           f"(R, G, B) or 'random', got {fill!r}")
        fill = [0.0, 0.0, 0.0]
    elif isinstance(fill, numbers.Real) and not isinstance(fill, bool):
        fill = [float(fill)] * 3
    else:
        try:
            fill = [float(v) for v in fill]
        except (TypeError, ValueError):
            fill = None
        if fill is not None and len(fill) == 1:
            fill = fill * 3
        if fill is None or len(fill) != 3:
            raise _invalid("random_erasing value must be a number, 3 numbers "
                           f"(R, G, B) or 'random', got {config['value']!r}")
    if not all(math.isfinite(v) for v in fill):
        raise _invalid(f"random_erasing value must be finite, got {fill!r}")
    return dict(p=p, scale=scale, ratio=ratio, value=fill, random=random)


def _fields_arg(
        fields: object) -> tuple[str | None, list[_stoker._Field] | None]:
    """fields -> (text, parsed list of dicts) or (None, None)."""
    if fields is None:
        return None, None
    if not isinstance(fields, str):
        raise _invalid("fields must be a str such as 'image=jpg;png:image, "
                       "mask=seg.png:mask:skip, caption=txt:text, "
                       f"label=cls:class', got {fields!r}")
    parsed = _stoker.parse_fields(fields)  # ValueError naming the field
    names: set[str] = set()
    for field in parsed:
        if field["name"] in names:
            raise _invalid(f"fields: field '{field['name']}' appears twice")
        names.add(field["name"])
    if not any(f["role"] in ("image", "video") for f in parsed):
        raise _invalid("fields: no image field (at least one field has role "
                       "image or video, e.g. image=jpg;png:image)")
    return fields, parsed


def _image_field(parsed: list[_stoker._Field]) -> str | None:
    """The field that is "the image" (converted, erased and mixed like the
    images of a request without fields): the first image field, unless it
    has views of its own (repeats=, transform=); else None (also for a
    video)."""
    first = next(f for f in parsed if f["role"] in ("image", "video"))
    if (first["role"] == "image" and first["repeats"] == 1
            and not first["own_transform"]):
        return first["name"]
    return None


def _distributed_defaults() -> tuple[int, int]:
    """(rank, world_size) of torch.distributed if initialized, else of the
    RANK / WORLD_SIZE environment variables, else (0, 1)."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    values = []
    for var, default in (("RANK", 0), ("WORLD_SIZE", 1)):
        text = os.environ.get(var)
        if text is None or text == "":
            values.append(default)
            continue
        try:
            values.append(int(text))
        except ValueError:
            raise _invalid(f"environment variable {var}={text!r} is not an "
                           "integer") from None
    return values[0], values[1]


def _check_plan(state: dict[str, Any], current: str,
                facts: dict[str, Any]) -> None:
    saved = state["plan_id"]
    if saved == current:
        return
    differences = []
    plan = state.get("plan")
    if isinstance(plan, dict):
        for name, value in facts.items():
            if plan.get(name) == value:
                continue
            differences.append(
                {"fingerprint": "the dataset's content differs",
                 "transform": "the transform differs",
                 "fields": "the fields differ",
                 "mixture": "the mixture differs"}.get(
                     name,
                     f"{name}: {plan.get(name)!r} in the state, {value!r} "
                     "here"))
    named = "; ".join(differences) or (
        "the dataset (or its content), transform, fields, seed, shuffle or "
        "mixture differ")
    raise _invalid(
        f"state_dict belongs to data plan {saved!r}, this loader's is "
        f"{current!r}: {named} (world_size, rank, batch_size and drop_last "
        "may change)")


# Why a Loader cannot be a torch Dataset, and what to do instead.
_NOT_A_DATASET = (
    "stoker.Loader is itself the data loader, not a dataset: iterate it "
    "directly (`for images, labels in loader:`) instead of wrapping it in "
    "torch.utils.data.DataLoader; it already fetches, decodes and prefetches "
    "on the Stoker servers and its own threads, so DataLoader workers would "
    "only add copies. With DDP, create one Loader in each process (rank and "
    "world_size default to torch.distributed's) and call "
    "loader.set_epoch(epoch) before each epoch, as with DistributedSampler.")


class Loader:
    """Batches of one dataset from Stoker servers, as torch tensors.

    Iterating yields ``(images, labels)`` for one epoch of this rank's share
    of the dataset: ``images`` of shape (N, 3, H, W) and the chosen dtype on
    the chosen device, ``labels`` int64 of shape (N,) on the same device
    (float32 (N, num_classes) soft targets with MixUp / CutMix). With
    ``fields`` it yields a dict of the named fields instead (see Fields
    below).
    Every yielded tensor is the caller's own (on CUDA allocated through
    torch's caching allocator; on the CPU the images are host memory the
    loader reuses once a batch's tensor is freed, up to 768 MiB kept, so a
    new batch does not page-fault its memory in): keep as many as you like,
    e.g. ``list(loader)``; they cost only their memory.

    Epochs (like DistributedSampler): every ``iter(loader)`` starts a new
    epoch. ``set_epoch(e)`` makes the next iteration epoch ``e``; without
    it, iterations count up from 0 (0, 1, 2, ...), each one the epoch after
    the previous iteration's. The order and every random augmentation are a
    pure function of (dataset, seed, epoch, rank, world_size, batch_size,
    shuffle, drop_last), identical on every run and server. Starting a new
    iteration abandons the previous one (its iterator then raises
    RuntimeError).

    Checkpoints (like torchdata's StatefulDataLoader): ``state_dict()``
    returns a small dict (epoch and a cursor string); a loader created with
    the same arguments and given it through ``load_state_dict`` continues
    with exactly the batches of that epoch not yet yielded, then with the
    following epochs. A loader of another world_size or batch_size takes
    it too and continues the epoch elastically (see load_state_dict).

    CUDA streams: a batch's uint8 pixels are copied to the GPU ahead of
    time on the loader's own stream. When it is yielded, the conversion
    (dtype, layout, normalization) into the new tensors is enqueued on the
    current stream of its device (torch.cuda.current_stream()), after a
    GPU-side wait for that copy: the host does not block, and the tensors
    are ready for work queued on that stream. Use them on that stream (or
    synchronize / tensor.record_stream when using another).

    Ctrl-C: the wait for a batch is interruptible; KeyboardInterrupt stops
    the prefetching, state_dict() still describes what was yielded, and the
    next iteration starts afresh. (Creating the loader and starting an
    iteration contact the servers and are not interruptible, bounded by
    unavailable_timeout.)

    Local servers: with ``shards`` (and no ``servers``, or "local" among
    them) the loader starts stoker_server processes on this host itself,
    pinned to ``local_cores`` CPUs, and stops them when it is closed or
    garbage-collected; if this process dies, even by SIGKILL, they exit
    with it. ``Loader(dataset="train", shards="/data/train-*.tar")`` needs
    nothing started by hand; ``Loader("dns:///stoker.data.svc:50051",
    "train")`` is the same job on a cluster, and
    ``Loader(["local", "dns:///stoker.data.svc:50051"], "train",
    shards=...)`` both at once (hybrid: every server pulls ranges, so idle
    cores here and the cluster share the epoch). Batches are bit-identical
    whichever servers make them.

    Args:
      servers: "host:port", "dns:///name:port" (every address of the name is
        a server, re-resolved periodically), "unix:PATH" (a server's
        --unix_socket on this host), "local" (servers this loader starts,
        see shards), a comma-separated list of those (as
        stoker_fetch --servers) or a Python list of them. Default: "local"
        when shards are given.
      dataset: the dataset name the servers were started with
        (--dataset=NAME=GLOB); for local servers, the name they serve the
        shards under (the same name as on remote servers for a hybrid).
        Or a weighted mixture of the servers' datasets, a dict
        {name: weight} (e.g. {"web": 0.7, "books": 0.2, "code": 0.1};
        weights are relative, finite and > 0), where a value may also be
        {"weight": w, "transform": "..."} to give that source its own
        pipeline (same output size; not with fields). Every server must
        hold every source (local servers: shards={name: path, ...}). The
        source of every sample (mixture_unit="sample") or of every global
        batch ("batch": every rank's batch of a step from one source) is
        drawn from the plan's generator: deterministic, independent of
        the number of servers, and every prefix of the run holds each
        source within one unit of its share. Each source goes through its
        own epochs (each sample once per source epoch, reshuffled each
        epoch, augmented as that dataset alone would be). With
        mixture_mode="cycle" a source that runs out starts its next epoch
        and a loader epoch is mixture_epoch_samples samples (default the
        sources' total); with "first_exhausted" each epoch ends just
        before its first exhausted source would repeat. info["sources"]
        gives each sample's source (an index into .sources), stats()
        ["samples_by_source"] the counts; state_dict() covers the mixture
        (elastic resume included; with mixture_unit="batch" only onto a
        shape of the same world_size x batch_size).
      shards: for local servers, the dataset as stoker_server --dataset
        takes it: shards by a path pattern ("/data/train-*.tar"), a brace
        range or an http(s):// or s3:// URL; or files as they are: an
        ImageFolder folder ("/data/train", classes in .classes) or a
        .csv / .jsonl file list.
      local_cores: the CPUs local servers run on: a number N (the N
        highest-numbered CPUs this process may use, os.sched_getaffinity),
        a list of CPU numbers (any the machine's cgroup allows, so a
        trainer pinned to other CPUs can name them), or None (default: the
        machine's CPUs this process is not pinned to, if it is pinned;
        else all of them but the lowest, which stays the trainer's; the
        only one on a 1-CPU machine).
      local_servers: local server processes sharing those CPUs (default 1;
        more give each other a failover).
      server_binary: the stoker_server program for local servers; default
        $STOKER_SERVER, the one installed with this package, or PATH.
      server_flags: more stoker_server flags for local servers, e.g.
        ["--s3_endpoint=http://minio:9000", "--max_memory_bytes=8e9"] (see
        stoker_server --help); credentials come from this process's
        environment, which they inherit.
      mixture_mode, mixture_unit, mixture_epoch_samples: see dataset.
      shared_memory: offer servers on this host (local servers, or one
        started with --shared_memory) shared memory for the batches: they
        assemble them straight into this process's memory and nothing is
        copied through the socket (page-locked on CUDA, so the copy to the
        GPU reads it directly). A server or container that cannot use it
        falls back to the socket with one warning. Requests with bytes or
        text fields always use the socket.
      batch_size: samples per batch.
      transform: the augmentation pipeline in torchvision syntax, steps
        separated by '|': RandomResizedCrop, RandomHorizontalFlip, Resize,
        CenterCrop; it must end in a fixed size. Applied on the servers.
      seed: seed of the shuffle and of every random augmentation.
      shuffle: shuffle the sample order every epoch: True (the whole
        dataset), False, or "blocks": shuffle the shards, then the samples
        within windows of `shuffle_window` samples, so that shards in object
        storage are read mostly sequentially (a batch then draws from one
        window, one or two shards, instead of the whole dataset).
      shuffle_window: window size of shuffle="blocks".
      cache_mode: for diagnosis only (stoker.diagnose): "replay" makes the
        servers resend each request's first batch (what is left to measure
        is the network and this process), "cached_raw" has them keep raw
        sample bytes in memory after the first epoch (decode and transform
        without storage). None: normal loading.
      drop_last: drop this rank's last partial batch.
      rank, world_size: this process's share, as DistributedSampler (the
        order is padded by repeating samples so that every rank gets the
        same number). Default: torch.distributed's when it is initialized,
        else the RANK / WORLD_SIZE environment variables, else 0 and 1.
      device: "cpu", "cuda", "cuda:N" or a torch.device. Default: "cuda"
        (the current device) when torch.cuda.is_available(), else "cpu".
        "cpu" delivers in host memory with the same arithmetic.
      dtype: torch.float32 / float16 / bfloat16: (x / 255 - mean) / std per
        channel; torch.uint8: the raw pixels, no normalization.
      mean, std: per-channel (R, G, B) statistics of x / 255 (ImageNet's by
        default); ignored for uint8.
      channels_last: images in NHWC memory (logical shape still
        (N, 3, H, W), i.e. torch.channels_last), else contiguous NCHW.
      prefetch: batches fetched ahead of the consumer (bounds host memory
        to about prefetch + 2 batches of uint8 pixels).
      batches_per_request, streams_per_server, in_order: network loader
        tuning (see client/loader.h); in_order=False yields batches as they
        arrive instead of in index order.
      fail_on_bad_sample: raise DataLossError on a corrupt or unlabeled
        sample instead of skipping it (skipped samples are counted in
        stats()).
      tls_ca: path of the PEM CA bundle that signed the servers'
        certificates: connect with TLS (default plaintext). tls_cert,
        tls_key: this job's PEM certificate and key, for servers that
        require mutual TLS.
      token: this job's bearer token for servers with --auth_tokens_file
        (default: the STOKER_TOKEN environment variable, if set).
      stall_timeout: seconds without data after which a server's stream is
        given to another server.
      unavailable_timeout: seconds with every server failing after which
        the loader gives up with UnavailableError (also bounds creation).
      output_slots: batches staged ahead on the device (uint8, copied
        from pinned memory while you compute); >= 2 to overlap the copy
        with your step. Not a limit on the batches you keep.
      pinned_slots: host buffers for received batches; 0 means prefetch + 2.
      random_erasing: torchvision.transforms.RandomErasing per sample, on
        the normalized tensor (float dtypes only): a probability p (with
        torchvision's scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0), or a
        dict with any of p (default 0.5), scale, ratio and value. value is
        in normalized units (0 is the channel mean): a number, 3 numbers
        (R, G, B) or "random" (per-element standard normal noise). Same
        get_params algorithm as torchvision (10 tries, then no erasing).
        None or 0 (default): off.
      mixup_alpha, cutmix_alpha: MixUp / CutMix per batch, like timm's Mixup
        (mode "batch"): lambda ~ Beta(alpha, alpha); sample i is mixed with
        sample N-1-i (the batch flipped, as timm does; torchvision's v2
        uses a roll by one). CutMix pastes a box of area about (1 - lambda)
        of the partner and corrects lambda to the exact box area. 0
        (default): off. With either on, `labels` are soft targets: float32
        (N, num_classes) on the device, each row lambda * smooth(y_i) +
        (1 - lambda) * smooth(y_{N-1-i}). Float dtypes only.
      mix_prob: probability that a batch is mixed at all (default 1.0).
      switch_prob: with both alphas > 0, probability that a mixed batch
        uses CutMix instead of MixUp (default 0.5).
      label_smoothing: smoothing of the soft targets (on = 1 - s + s / C,
        off = s / C); only with mixing (otherwise use the loss's).
      num_classes: width C of the soft targets; required with mixing. Every
        label must lie in [0, C).
      fields: the sample's outputs in the text form of stoker_fetch
        --fields (see Fields below); None (default): (images, labels).
        A malformed text raises ValueError naming the field.
      fields_as_tuple: with fields, yield a tuple in the order asked
        instead of a dict.

    Batch augmentations happen after the conversion, erasing first, then
    mixing, with the same float32 arithmetic on "cpu" and "cuda" (float16 /
    bfloat16 outputs are computed in float32 and rounded once). They are
    deterministic: erasing keyed by (seed, epoch, sample index), mixing by
    (seed, epoch, rank, batch index), so a resumed run (load_state_dict)
    sees the same augmentations. iter_with_info() reports the drawn
    parameters: info["erase"] (per sample None or (top, left, height,
    width)) and info["mix"] (mode "none" / "mixup" / "cutmix", lam, the
    float32 weights (lam, 1 - lam), CutMix box (y0, y1, x0, x1) or None,
    partner "flip"), and info["labels"] (the hard labels).

    Fields: ``fields="image=jpg;png:image, mask=seg.png:mask:skip,
    caption=txt:text, meta=json:bytes, label=cls:class"`` names the sample's
    outputs (NAME=EXTENSIONS:ROLE[:OPTION...], see client/field_spec.h; the
    options are what a sample without the member does, error (default),
    skip or empty, for masks channels=N and fill=V, for images transform=
    and repeats=). Iteration then yields a dict {name: value} in the order
    asked (or, with fields_as_tuple=True, a tuple in that order), and
    iter_with_info() yields (dict_or_tuple, info). Values:

      image  the first image field (without repeats= / transform=): the
             images exactly as above (dtype, mean / std, channels_last,
             random_erasing, MixUp / CutMix). Other image fields are views
             of the same decode (multi-crop), converted alike but never
             erased or mixed: (N, 3, H, W), or (N, R, 3, H, W) with
             repeats=R (each view laid out as channels_last says).
      mask   uint8 on the device, the mask warped with its image's own
             geometry (nearest neighbour): (N, H, W) for 1 channel, else
             (N, C, H, W) (NHWC memory with channels_last, like the image).
             Random erasing does not touch masks.
      class  int64 (N,) on the device; -1 for a sample kept without the
             member (option empty). With MixUp / CutMix the first class
             field holds the soft targets (as `labels` above) and
             info["labels"] its hard values.
      video  the clips of a video field (NAME=mp4;webm:video:frames=T
             [:stride=S | :fps=F][:clips=C][:sampler=random|uniform]
             [:short=pad|loop|skip][:transform=...]), decoded on the
             servers, each clip's crop, flip and colour ops drawn once and
             applied to all its frames, converted like the images (dtype,
             mean / std; each frame laid out as channels_last says):
             (N, T, 3, H, W), or (N, C, T, 3, H, W) with clips=C; with
             video_layout="CTHW" the same tensor viewed as (N, [C,] 3, T,
             H, W). iter_with_info()'s info["video"][name] has each
             sample's frame times in seconds (clip by clip), each video's
             frame rate and the frames the servers decoded. Not erased or
             mixed; no mask fields beside it.
      bytes  list[bytes], the member's bytes untouched.
      text   list[str]: the bytes decoded as UTF-8 with
             errors="surrogateescape", so nothing is lost: invalid bytes
             become lone surrogates and s.encode("utf-8", "surrogateescape")
             gives the exact bytes back.

    MixUp / CutMix need a class field (the first one is mixed) and a single
    image field without views, and refuse mask fields (a mixed mask has no
    meaning); random_erasing needs the image as defined above and leaves
    masks and views alone. A dataset whose samples lack some members works
    as the policies say: skipped samples are reported in info["skipped"]
    and stats() as for corrupt ones.
    """

    def __init__(self,
                 servers: str | list[str] | tuple[str, ...] | None = None,
                 dataset: str | None = None, batch_size: int = 256,
                 transform: str = ("RandomResizedCrop(224)|"
                                   "RandomHorizontalFlip()"),
                 *,
                 seed: int = 0, shuffle: bool | Literal["blocks"] = True,
                 shuffle_window: int = 1024, drop_last: bool = False,
                 cache_mode: (Literal["none", "replay", "cached_raw"]
                              | None) = None,
                 rank: int | None = None,
                 world_size: int | None = None,
                 device: str | torch.device | None = None,
                 dtype: torch.dtype | str = torch.float32,
                 mean: Sequence[float] = IMAGENET_MEAN,
                 std: Sequence[float] = IMAGENET_STD,
                 channels_last: bool = False,
                 prefetch: int = 8, batches_per_request: int = 4,
                 streams_per_server: int = 2,
                 in_order: bool = True, fail_on_bad_sample: bool = False,
                 tls_ca: str | os.PathLike[str] | None = None,
                 tls_cert: str | os.PathLike[str] | None = None,
                 tls_key: str | os.PathLike[str] | None = None,
                 token: str | None = None,
                 stall_timeout: float = 10.0,
                 unavailable_timeout: float = 30.0, output_slots: int = 4,
                 pinned_slots: int = 0,
                 random_erasing: float | dict[str, Any] | None = None,
                 mixup_alpha: float = 0.0, cutmix_alpha: float = 0.0,
                 mix_prob: float = 1.0, switch_prob: float = 0.5,
                 label_smoothing: float = 0.0,
                 num_classes: int | None = None, fields: str | None = None,
                 fields_as_tuple: bool = False,
                 video_layout: Literal["TCHW", "CTHW"] = "TCHW",
                 shards: str | os.PathLike[str] | None = None,
                 local_cores: int | Sequence[int] | None = None,
                 local_servers: int = 1,
                 server_binary: str | os.PathLike[str] | None = None,
                 server_flags: Sequence[str] = (),
                 shared_memory: bool = True,
                 mixture_mode: Literal["cycle", "first_exhausted"] = "cycle",
                 mixture_unit: Literal["sample", "batch"] = "sample",
                 mixture_epoch_samples: int | None = None) -> None:
        self._pipeline: _stoker.Pipeline | None = None
        settings = _stoker.Settings()
        if servers is None:
            if shards is None:
                raise _invalid("give servers (host:port, dns:///name:port), "
                               "or shards for local servers")
            servers = "local"
        settings.servers = _servers_arg(servers)
        sources = _mixture_args(settings, dataset, mixture_mode,
                                mixture_unit, mixture_epoch_samples)
        if isinstance(shards, dict):
            if set(shards) != set(sources):
                raise _invalid("with a mixture, shards must be a dict with "
                               "the mixture's datasets as keys, got "
                               f"{sorted(shards)!r} for {sources!r}")
            settings.local_mixture_shards = [
                str(os.fspath(shards[name])) for name in sources]
            shards = settings.local_mixture_shards[0]
        elif sources and shards is not None:
            raise _invalid("with a mixture, shards must be a dict "
                           "{dataset: shards} naming each source's")
        _local_args(settings, shards, local_cores, local_servers,
                    server_binary, server_flags)
        if settings.local_mixture_shards:
            settings.local_shards = ""
        settings.shared_memory = bool(shared_memory)
        settings.batch_size = _int_arg("batch_size", batch_size, 1, 65536)
        if not isinstance(transform, str):
            raise _invalid("transform must be a str such as "
                           "'RandomResizedCrop(224)|RandomHorizontalFlip()', "
                           f"got {transform!r}")
        settings.transform = transform
        fields_text, self._fields = _fields_arg(fields)
        if fields_text is not None:
            settings.fields = fields_text
        self._fields_as_tuple = bool(fields_as_tuple)
        if video_layout not in ("TCHW", "CTHW"):
            raise _invalid("video_layout must be 'TCHW' or 'CTHW', got "
                           f"{video_layout!r}")
        self._video_layout = video_layout
        if self._fields_as_tuple and self._fields is None:
            raise _invalid("fields_as_tuple=True needs fields")
        settings.seed = _int_arg("seed", seed, 0, 2**64 - 1)
        if isinstance(shuffle, str):
            if shuffle != "blocks":
                raise _invalid(f"shuffle must be True, False or 'blocks', "
                               f"got {shuffle!r}")
            settings.shuffle = True
            settings.shuffle_window = _int_arg("shuffle_window",
                                               shuffle_window, 1)
        else:
            settings.shuffle = bool(shuffle)
        settings.drop_last = bool(drop_last)
        if cache_mode is not None:
            if cache_mode not in ("replay", "cached_raw", "none"):
                raise _invalid("cache_mode must be None, 'replay' or "
                               f"'cached_raw', got {cache_mode!r}")
            settings.cache_mode = cache_mode
        default_rank, default_world = (0, 1)
        if rank is None or world_size is None:
            default_rank, default_world = _distributed_defaults()
        world_size = _int_arg("world_size",
                              default_world if world_size is None else world_size,
                              1)
        rank = _int_arg("rank", default_rank if rank is None else rank, 0)
        if rank >= world_size:
            raise _invalid(f"rank must be < world_size, got rank {rank} of "
                           f"world_size {world_size}")
        settings.rank = rank
        settings.world_size = world_size
        self._dtype = _dtype_arg(dtype)
        settings.dtype = _DTYPES[self._dtype]
        settings.mean = _channels_arg("mean", mean)
        settings.std = _channels_arg("std", std)
        if self._dtype != torch.uint8 and any(s == 0 for s in settings.std):
            raise _invalid(f"std must be nonzero, got {tuple(settings.std)}")
        settings.channels_last = bool(channels_last)
        settings.prefetch = _int_arg("prefetch", prefetch, 1)
        settings.batches_per_request = _int_arg(
            "batches_per_request", batches_per_request, 1)
        settings.streams_per_server = _int_arg(
            "streams_per_server", streams_per_server, 1)
        settings.in_order = bool(in_order)
        settings.fail_on_bad_sample = bool(fail_on_bad_sample)
        for name, value in (("tls_ca", tls_ca), ("tls_cert", tls_cert),
                            ("tls_key", tls_key)):
            if value is not None:
                if not isinstance(value, (str, os.PathLike)) or not str(value):
                    raise _invalid(f"{name} must be a file path, got {value!r}")
                setattr(settings, name, os.fspath(value))
        if token is None:
            token = os.environ.get("STOKER_TOKEN")
        if token is not None:
            if not isinstance(token, str) or not token.strip():
                raise _invalid("token must be a non-empty str")
            settings.token = token.strip()
        settings.stall_timeout_s = _seconds_arg("stall_timeout", stall_timeout)
        settings.unavailable_timeout_s = _seconds_arg(
            "unavailable_timeout", unavailable_timeout)
        settings.output_slots = _int_arg("output_slots", output_slots, 1)
        settings.pinned_slots = _int_arg("pinned_slots", pinned_slots, 0)
        settings.device = _device_arg(device)
        self._device = torch.device(settings.device)

        erasing = _random_erasing_arg(random_erasing)
        settings.erasing_p = erasing["p"]
        settings.erasing_scale = erasing["scale"]
        settings.erasing_ratio = erasing["ratio"]
        settings.erasing_value = erasing["value"]
        settings.erasing_random = erasing["random"]
        for name, alpha in (("mixup_alpha", mixup_alpha),
                            ("cutmix_alpha", cutmix_alpha)):
            if _real_arg(name, alpha) < 0:
                raise _invalid(f"{name} must be >= 0 (0: off), got {alpha}")
        settings.mixup_alpha = float(mixup_alpha)
        settings.cutmix_alpha = float(cutmix_alpha)
        settings.mix_prob = _probability_arg("mix_prob", mix_prob)
        settings.switch_prob = _probability_arg("switch_prob", switch_prob)
        smoothing = _real_arg("label_smoothing", label_smoothing)
        if not 0 <= smoothing < 1:
            raise _invalid(f"label_smoothing must be in [0, 1), got {smoothing}")
        settings.label_smoothing = smoothing
        self._mixing = settings.mixup_alpha > 0 or settings.cutmix_alpha > 0
        if self._mixing:
            if num_classes is None:
                raise _invalid("num_classes is required with mixup_alpha or "
                               "cutmix_alpha > 0 (the width of the soft "
                               "labels)")
            settings.num_classes = _int_arg("num_classes", num_classes, 1)
        elif smoothing > 0:
            raise _invalid("label_smoothing applies to the soft labels of "
                           "MixUp / CutMix (mixup_alpha or cutmix_alpha > 0); "
                           "without them use the loss's, e.g. "
                           "torch.nn.CrossEntropyLoss(label_smoothing=...)")
        elif num_classes is not None:
            settings.num_classes = _int_arg("num_classes", num_classes, 1)
        if self._fields is not None:
            self._check_field_ops(settings)
        if self._dtype == torch.uint8 and (settings.erasing_p > 0 or
                                           self._mixing):
            raise _invalid("random_erasing, mixup_alpha and cutmix_alpha need "
                           "a float dtype (float32, float16 or bfloat16): "
                           "uint8 output holds raw pixels, not normalized "
                           "values")
        self._settings = settings

        # device="cpu": the images' memory is reused between batches.
        self._host_buffers = (_stoker.HostBuffers(_HOST_BUFFER_CACHE_BYTES)
                              if self._device.type == "cpu" else None)
        self._itemsize = torch.empty((), dtype=self._dtype).element_size()
        self._pipeline = _stoker.Pipeline(settings)
        # The epoch the next iteration starts, and a cursor to resume from
        # instead (set by load_state_dict).
        self._next_epoch = 0
        self._resume: list[str] | None = None
        self._resume_epoch = 0
        # A loaded between-epochs state's "ended" cursor, given back by
        # state_dict() until the next iteration.
        self._loaded_ended: str | None = None
        # The epoch of the latest iteration; whether it has not finished.
        self._epoch: int | None = None
        self._in_progress = False
        # Bumped by every new iteration (and by load_state_dict / set_epoch)
        # so older iterators know they are stale.
        self._generation = 0

    def _check_field_ops(self, settings: _stoker.Settings) -> None:
        """Batch augmentations with fields: they apply to the image alone."""
        assert self._fields is not None  # only called with fields
        roles = [f["role"] for f in self._fields]
        if self._mixing:
            if "mask" in roles:
                raise _invalid("MixUp/CutMix do not apply to masks: drop "
                               "mixup_alpha / cutmix_alpha or the mask fields")
            if "class" not in roles:
                raise _invalid("mixup_alpha / cutmix_alpha need a class "
                               "field (e.g. label=cls:class) to mix: the "
                               "first one becomes the soft targets")
            if roles.count("image") > 1 or _image_field(self._fields) is None:
                raise _invalid("MixUp/CutMix apply to a single image: not "
                               "with several image fields or repeats= / "
                               "transform= views")
        if settings.erasing_p > 0 and _image_field(self._fields) is None:
            raise _invalid("random_erasing applies to the image: the first "
                           "image field, without repeats= or transform=")

    # --- not a dataset ---

    def __getitem__(self, index: object) -> NoReturn:
        # torch.utils.data.DataLoader(loader) indexes its dataset (in its
        # workers); without this it fails with a bare TypeError.
        raise TypeError(_NOT_A_DATASET)

    def __reduce__(self) -> NoReturn:
        # DataLoader workers started with spawn pickle the dataset; a Loader
        # holds connections and threads.
        raise TypeError(_NOT_A_DATASET)

    # --- properties ---

    def __len__(self) -> int:
        """Batches per epoch for this rank."""
        return self._open().num_batches

    @property
    def sources(self) -> list[str]:
        """A mixture's datasets, in order (info["sources"] holds indices
        into it); [] for one dataset."""
        return list(self._settings.mixture_names)

    @property
    def dataset_samples(self) -> int:
        """Samples in the whole dataset (all ranks)."""
        return self._open().dataset_samples

    @property
    def classes(self) -> list[str]:
        """An ImageFolder dataset's class names (label i is classes[i], as
        torchvision.datasets.ImageFolder's .classes); [] for other
        datasets."""
        return self._open().classes

    @property
    def epoch(self) -> int | None:
        """The epoch of the latest iteration (None before the first)."""
        return self._epoch

    @property
    def rank(self) -> int:
        return self._settings.rank

    @property
    def world_size(self) -> int:
        return self._settings.world_size

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def fields(self) -> list[str] | None:
        """The field names in request order (None without fields)."""
        if self._fields is None:
            return None
        return [f["name"] for f in self._fields]

    @property
    def plan_id(self) -> str:
        """Identifies the data plan that state dicts belong to: dataset
        content, transform, fields, seed, shuffle and mixture; not the
        shape (rank, world_size, batch_size, drop_last), so a state loads
        into a loader of another shape (elastic resume)."""
        return self._open().plan_id

    # --- epochs ---

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch `epoch` (DistributedSampler style).
        A pending load_state_dict resume is kept when it is for this epoch
        and dropped otherwise."""
        epoch = _int_arg("epoch", epoch, 0)
        if self._resume is not None and self._resume_epoch != epoch:
            self._resume = None
        self._loaded_ended = None
        self._next_epoch = epoch
        self._in_progress = False
        self._generation += 1

    def __iter__(self) -> _EpochIterator:
        return self._iterate(with_info=False)

    def iter_with_info(self) -> _EpochIterator:
        """Like iter(loader), yielding (images, labels, info) (with fields:
        (dict_or_tuple, info)) where info is a dict: epoch, batch_index,
        keys, sample_indices and labels (per sample; labels are the hard int
        labels, also when `labels` are soft; with fields the first class
        field's, empty without one),
        server (which sent the batch) and skipped (samples the server left
        out: dicts with sample_index, key, shard, reason); with
        random_erasing, erase (per sample None or (top, left, height,
        width)); with MixUp / CutMix, mix (dict: mode, lam, weights, box,
        partner; see the class docstring)."""
        return self._iterate(with_info=True)

    def _iterate(self, with_info: bool) -> _EpochIterator:
        pipeline = self._open()
        self._loaded_ended = None
        if self._resume is not None:
            pipeline.start(self._resume)
            # An exhausted cursor continues with the next epoch.
            epoch = _stoker.parse_cursor(pipeline.cursor())["epoch"]
            self._resume = None
        else:
            epoch = self._next_epoch
            pipeline.start_epoch(epoch)
        self._epoch = epoch
        self._next_epoch = epoch + 1
        self._in_progress = True
        self._generation += 1
        return _EpochIterator(self, self._generation, with_info)

    def _allocate(
            self, shape: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """New (images, labels) tensors for a batch of logical shape
        (n, c, h, w), from torch's allocator (on CUDA: its caching allocator,
        for the current stream)."""
        return self._allocate_images(shape), self._allocate_labels(shape[0])

    def _allocate_images(self, shape: Sequence[int]) -> torch.Tensor:
        n, c, h, w = shape
        nbytes = n * c * h * w * self._itemsize
        if self._host_buffers is not None and nbytes > 0:
            # Reused host memory (see _stoker.HostBuffers), laid out as
            # torch.empty would.
            flat = torch.frombuffer(self._host_buffers.take(nbytes),
                                    dtype=torch.uint8).view(self._dtype)
            if self._settings.channels_last:
                return flat.view(n, h, w, c).permute(0, 3, 1, 2)
            return flat.view(n, c, h, w)
        return torch.empty(
            shape, dtype=self._dtype, device=self._device,
            memory_format=(torch.channels_last if self._settings.channels_last
                           else torch.contiguous_format))

    def _allocate_labels(self, n: int) -> torch.Tensor:
        if self._mixing:
            return torch.empty((n, self._settings.num_classes),
                               dtype=torch.float32, device=self._device)
        return torch.empty((n,), dtype=torch.int64, device=self._device)

    def _allocate_views(self, shape: Sequence[int]) -> torch.Tensor:
        """A tensor for an image field of views: received shape (n, h, w, 3)
        or (n, repeats, h, w, 3); logical (n, 3, h, w) or (n, repeats, 3, h,
        w), each view laid out like the images."""
        views = shape[0] * (shape[1] if len(shape) == 5 else 1)
        h, w, c = shape[-3:]
        tensor = self._allocate_images((views, c, h, w))
        if len(shape) == 5:
            tensor = tensor.view(shape[0], shape[1], c, h, w)
        return tensor

    def _allocate_video(self, shape: Sequence[int]) -> torch.Tensor:
        """A tensor for a video field: received shape (n, [clips,] t, h, w,
        3); logical (n, [clips,] t, 3, h, w), each frame laid out like the
        images (the data order video_layout="CTHW" views differently)."""
        h, w, c = shape[-3:]
        frames = math.prod(shape[:-3])
        tensor = self._allocate_images((frames, c, h, w))
        return tensor.view(*shape[:-3], c, h, w)

    def _convert(
            self, staged: _stoker.StagedBatch
    ) -> (tuple[torch.Tensor, torch.Tensor] | tuple[_FieldValue, ...]
          | dict[str, _FieldValue]):
        """Converts a staged batch into (images, labels), or with fields
        into a dict (or tuple) of the fields' values."""
        images: torch.Tensor | None
        labels: torch.Tensor | None
        value: _FieldValue
        stream = 0
        if self._device.type == "cuda":
            stream = torch.cuda.current_stream(self._device).cuda_stream
        if self._fields is None:
            images, labels = self._allocate(staged.shape)
            staged.convert_into(images.data_ptr(), labels.data_ptr(), stream)
            return images, labels
        received = staged.fields
        if [r[0] for r in received] != self.fields:
            raise _stoker.DataLossError(
                f"the batch has fields {[r[0] for r in received]}, the "
                f"request named {self.fields}")
        images = None
        labels = None
        values: list[_FieldValue] = []
        addresses: list[int] = []
        for index, (field, (_, role, shape, is_image)) in enumerate(
                zip(self._fields, received)):
            address = 0
            if is_image:
                images = self._allocate_images(staged.shape)
                value = images
            elif role == "image":
                value = self._allocate_views(shape)
                address = value.data_ptr()
            elif role == "video":
                value = self._allocate_video(shape)
                address = value.data_ptr()
                if self._video_layout == "CTHW":
                    value = value.movedim(-3, -4)
            elif role == "mask":
                value = torch.empty(shape, dtype=torch.uint8,
                                    device=self._device)
                address = value.data_ptr()
            elif role == "class":
                if labels is None:
                    labels = self._allocate_labels(shape[0])
                    value = labels
                    if not self._mixing:
                        address = labels.data_ptr()
                else:
                    value = torch.empty((shape[0],), dtype=torch.int64,
                                        device=self._device)
                    address = value.data_ptr()
            else:
                value = staged.values(index, field["role"] == "text")
            values.append(value)
            addresses.append(address)
        # Only soft labels go through `labels`; class fields are addresses.
        staged.convert_into(
            images.data_ptr() if images is not None else 0,
            # Mixing needs a class field (checked in __init__): labels is set.
            cast(torch.Tensor, labels).data_ptr() if self._mixing else 0,
            stream, addresses)
        for index, (_, role, shape, _) in enumerate(received):
            if role != "mask":
                continue
            n, h, w, c = shape
            mask = cast(torch.Tensor, values[index])  # a mask is a tensor
            if c == 1:
                values[index] = mask.view(n, h, w)
            else:
                mask = mask.permute(0, 3, 1, 2)  # channels_last memory
                values[index] = (mask if self._settings.channels_last
                                 else mask.contiguous())
        if self._fields_as_tuple:
            return tuple(values)
        return {f["name"]: v for f, v in zip(self._fields, values)}

    def _host_replay(self, pixels: torch.Tensor,
                     labels: torch.Tensor) -> _stoker.HostReplay:
        """A _stoker.HostReplay of one batch: `pixels` a uint8 CPU tensor
        whose memory is NHWC (e.g. a channels_last uint8 batch of a loader
        with device="cpu"), `labels` int64 of shape (N,). Replayed with
        _convert_replay through this loader's copy and conversion
        (stoker.diagnose's host-cached rung)."""
        if pixels.dtype != torch.uint8 or pixels.device.type != "cpu":
            raise _invalid("host replay needs a uint8 CPU tensor")
        nhwc = pixels.permute(0, 2, 3, 1).contiguous()
        labels = labels.to(device="cpu", dtype=torch.int64).contiguous()
        if labels.shape != (nhwc.shape[0],):
            raise _invalid(f"host replay needs {nhwc.shape[0]} labels, got "
                           f"shape {tuple(labels.shape)}")
        return _stoker.HostReplay(self._settings, nhwc.data_ptr(),
                                  labels.data_ptr(), tuple(nhwc.shape))

    def _convert_replay(
            self, replay: _stoker.HostReplay
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(images, labels) converted from a _host_replay, in new tensors
        allocated as for a delivered batch."""
        stream = 0
        if self._device.type == "cuda":
            stream = torch.cuda.current_stream(self._device).cuda_stream
        images = self._allocate_images(replay.shape)
        labels = torch.empty((replay.shape[0],), dtype=torch.int64,
                             device=self._device)
        replay.convert_into(images.data_ptr(), labels.data_ptr(), stream)
        return images, labels

    # --- checkpoints ---

    def state_dict(self) -> dict[str, Any]:
        """{"version", "plan_id", "plan", "epoch", "cursor"}: `cursor` (a
        string) is set while an epoch is partly yielded and says what was
        yielded so far, and how the epoch was cut (rank, world_size,
        batch_size);
        otherwise it is None and `epoch` is the epoch the next iteration
        starts. `plan_id` names the data plan (dataset content, transform,
        fields, seed, shuffle, mixture; `plan` lists them, so a refusal can
        say which differs), not the job's shape: a state loads
        into a loader of another world_size or batch_size (elastic resume,
        see load_state_dict)."""
        pipeline = self._open()
        cursor: str | list[str] | None = None
        ended: str | None = None
        epoch = self._next_epoch
        if self._resume is not None:
            cursor = (self._resume[0] if len(self._resume) == 1
                      else list(self._resume))
            epoch = self._resume_epoch
        else:
            text = pipeline.cursor()
            position = _stoker.parse_cursor(text)
            if self._in_progress and (position["next_batch"] <
                                      pipeline.epoch_batches):
                cursor = text
                epoch = position["epoch"]
            elif (position["epoch"] == epoch - 1 and
                  position["next_batch"] >= pipeline.epoch_batches):
                # The epoch just finished: its cursor lets a list of every
                # rank's states include this one while others are mid-epoch.
                ended = text
            elif not self._in_progress:
                ended = self._loaded_ended
        state: dict[str, Any] = {
            "version": _STATE_VERSION,
            "plan_id": pipeline.plan_id,
            "plan": pipeline.plan_facts,
            "epoch": epoch,
            "cursor": cursor,
        }
        if ended is not None:
            state["ended"] = ended
        return state

    def load_state_dict(
            self, state_dict: dict[str, Any] | Sequence[dict[str, Any]]
    ) -> None:
        """Restores a state_dict() of a loader over the same data plan
        (dataset content, transform, fields, seed, shuffle, mixture: a state
        of another is refused, naming what differs). The next iteration
        continues from there.

        On the same rank, world_size and batch_size it continues exactly
        where that loader stopped. On another shape (elastic resume: fewer
        or more ranks, another batch_size or drop_last), give either one
        state (any rank's: a synchronous job such as DDP has every rank at
        the same step, so one rank's state says what the whole job
        consumed) or a list of every rank's states (exact even when the
        ranks stopped at different batches). The epoch's samples not yet
        consumed are then delivered exactly once across the new ranks, with
        the same batch count on each (len() of that epoch is smaller), and
        the following epochs are those of a fresh job of the new shape.
        States of earlier versions (1 and 2) are refused: their epochs were
        in Fisher-Yates orders this version no longer computes."""
        pipeline = self._open()
        states = (list(state_dict) if isinstance(state_dict, (list, tuple))
                  else [state_dict])
        if not states:
            raise _invalid("load_state_dict got an empty list of states")
        # Ranks that finished the epoch the others are still in: the
        # cursor they ended it with stands for them.
        mid = {s.get("epoch") for s in states
               if isinstance(s, dict) and s.get("cursor") is not None}
        if len(states) > 1 and len(mid) == 1:
            e = next(iter(mid))
            states = [
                dict(s, epoch=e, cursor=s["ended"])
                if (isinstance(s, dict) and s.get("cursor") is None and
                    isinstance(s.get("ended"), str) and
                    s.get("epoch") == (e + 1 if isinstance(e, int) else e))
                else s for s in states]
        cursors: list[str] = []
        epochs = set()
        for state in states:
            if not isinstance(state, dict):
                raise _invalid("state_dict must be a dict (or a list of "
                               f"every rank's), got {type(state)}")
            missing = {"version", "plan_id", "epoch", "cursor"} - set(state)
            if missing:
                raise _invalid(f"state_dict lacks {sorted(missing)}; expected "
                               "a dict from Loader.state_dict()")
            version = state["version"]
            if version in (1, 2):
                raise _stoker.FailedPreconditionError(
                    f"state_dict version {version} was saved by an older "
                    "Stoker, whose epochs were in Fisher-Yates orders this "
                    "version no longer computes (it keeps no per-sample "
                    "order); it cannot resume that epoch exactly. Finish the "
                    "epoch with the version that saved it, or start the "
                    "next epoch with this one")
            if version != _STATE_VERSION:
                raise _invalid(f"state_dict version {version!r} is not "
                               f"supported (expected {_STATE_VERSION})")
            # Between epochs too (cursor None) the state names its plan:
            # the epoch number of one plan means nothing to another.
            _check_plan(state, pipeline.plan_id, pipeline.plan_facts)
            epochs.add(_int_arg("state_dict['epoch']", state["epoch"], 0))
            cursor = state["cursor"]
            texts = cursor if isinstance(cursor, list) else [cursor]
            for text in texts:
                if text is None:
                    continue
                if not isinstance(text, str):
                    raise _invalid("state_dict['cursor'] must be a str or "
                                   f"None, got {text!r}")
                position = _stoker.parse_cursor(text)
                if position["epoch"] != state["epoch"]:
                    raise _invalid(
                        f"state_dict epoch {state['epoch']} does not match "
                        f"its cursor's epoch {position['epoch']}")
                cursors.append(text)
        if len(epochs) != 1:
            raise _invalid(f"the states are of different epochs {sorted(epochs)}"
                           "; save every rank's state at the same step")
        epoch = epochs.pop()
        with_cursor = sum(1 for s in states if s["cursor"] is not None)
        if with_cursor and with_cursor != len(states):
            # Some ranks had finished the epoch (cursor None): their states
            # say nothing about the others' batches.
            raise _invalid("some states are between epochs and some are not; "
                           "give the states of one step")
        self._resume = cursors or None
        self._loaded_ended = None
        if not cursors and len(states) == 1:
            saved = states[0].get("ended")
            self._loaded_ended = saved if isinstance(saved, str) else None
        self._resume_epoch = epoch
        self._next_epoch = epoch
        self._in_progress = False
        self._generation += 1

    # --- statistics and lifetime ---

    def stats(self) -> dict[str, Any]:
        """Cumulative figures since creation: server_read_s, server_decode_s,
        server_transform_s (server CPU time summed over samples),
        network_bytes (pixel bytes received), client_wait_s (time this
        process waited for batches), batches / samples (yielded),
        skipped_samples, stream_failures, stalls, reissued_batches,
        duplicate_batches_dropped, received_batches (incl. prefetched),
        shared_memory_batches (received through shared memory, no copy),
        convert_wait_s (time the conversion stage waited for the network),
        rebuilds (restarts after abandoned epochs), batches_by_server."""
        return self._open().stats()

    def close(self) -> None:
        """Stops fetching and frees the loader's threads and buffers (batches
        still held stay valid). Idempotent."""
        if self._pipeline is not None:
            self._pipeline.close()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        s = self._settings
        fields = f", fields={s.fields!r}" if self._fields is not None else ""
        dataset = (s.dataset if s.dataset else
                   dict(zip(s.mixture_names, s.mixture_weights)))
        return (f"stoker.Loader(servers={s.servers!r}, dataset={dataset!r}, "
                f"batch_size={s.batch_size}, transform={s.transform!r}, "
                f"rank={s.rank}, world_size={s.world_size}, "
                f"device='{self._device}', dtype={self._dtype}, "
                f"channels_last={s.channels_last}{fields})")

    def _open(self) -> _stoker.Pipeline:
        if self._pipeline is None or self._pipeline.closed:
            raise _invalid("the loader is closed")
        return self._pipeline


class _EpochIterator:
    """One epoch's batches; see Loader."""

    def __init__(self, loader: Loader, generation: int,
                 with_info: bool) -> None:
        self._loader = loader
        self._generation = generation
        self._with_info = with_info
        self._done = False

    def __iter__(self) -> _EpochIterator:
        return self

    def __len__(self) -> int:
        # A resumed epoch of another shape has fewer batches than len(loader).
        return int(self._loader._open().epoch_batches)

    # (images, labels), (images, labels, info), fields or (fields, info), as
    # Loader says: Any, like torch.utils.data.DataLoader's items.
    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        loader = self._loader
        if loader._generation != self._generation:
            self._done = True
            raise RuntimeError(
                "this iterator is stale: a newer iteration, set_epoch() or "
                "load_state_dict() replaced it")
        try:
            item = loader._open().next()
        except BaseException:
            # The epoch cannot continue (error or Ctrl-C); state_dict() still
            # describes what was yielded.
            self._done = True
            raise
        if item is None:
            self._done = True
            loader._in_progress = False
            raise StopIteration
        staged, info = item
        converted = loader._convert(staged)
        if loader._fields is not None:
            return (converted, info) if self._with_info else converted
        images, labels = converted
        if self._with_info:
            return images, labels, info
        return images, labels
