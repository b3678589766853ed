"""One Python op worker of a Stoker server (server/python_ops/python_workers.h).

The server starts it as `PYTHON -c <this file> MEMORY_LIMIT SERVER_PID
MODULE...` with
a SOCK_SEQPACKET socket on descriptor 3 and a shared-memory file (memfd) on
descriptor 4. It imports the modules (a module name, or a path to a .py
file), sends the table of their ops, then answers requests one at a time:
run op K on the image (and mask) in shared memory, in place.

An op module lists its ops in STOKER_OPS: functions, or dicts
{"fn": f, "name": "Name", "mask": bool, "limits": {param: (lo, hi)},
"choices": {param: [word, ...]}}. The function is called as
f(image, rng, **params), or f(image, mask, rng, **params) for a mask op,
where image is a uint8 (H, W, 3) array, mask a uint8 (H, W, C) array or
None, rng a numpy.random.Generator seeded by the plan. It returns the new
image (for a mask op: the pair (image, mask)) with the same shape and
dtype; it may also change its input in place and return it. Parameters
are keyword parameters with a default or an annotation of int, float,
bool, str or tuple (of numbers).

Protocol (little-endian). Hello: b"ok\\n" + table lines, or b"error\\n" +
the reason. Request: HEADER (op, samples, region size, argument bytes),
one ENTRY per sample (its image's and mask's sizes and offsets in the
region, 4 words of seed), then the arguments as a Python dict literal.
The worker runs the op on each sample in turn, writing the sample's
status at STATUS + i * STATUS_SIZE (u32 code: 0 done, 1 the op failed,
2 out of memory; u32 length; the reason's text) and then the number of
samples finished at offset 0, and answers b"\\0" when all are done. After a
MemoryError it answers b"\\2" and exits (the server replaces it).
"""

import ast
import inspect
import mmap
import os
import resource
import socket
import struct
import sys
import traceback

# op, samples, region size, argument bytes.
HEADER = struct.Struct("<IIQI")
# width, height, mask width, mask height, mask channels, image offset, mask
# offset, 4 words of seed.
ENTRY = struct.Struct("<iiiiiQQQQQQ")
# The status area at the start of the region: the count of finished
# samples at 0, then one STATUS_SIZE entry per sample from STATUS.
STATUS = 64
STATUS_SIZE = 256
STATUS_HEAD = struct.Struct("<II")
TYPES = {"int": int, "float": float, "bool": bool, "str": str, "tuple": tuple}


class OpError(Exception):
    """An op table that cannot be served."""


def load_module(spec):
    import importlib
    import importlib.util

    if spec.endswith(".py") or "/" in spec:
        name = os.path.splitext(os.path.basename(spec))[0]
        module_spec = importlib.util.spec_from_file_location(name, spec)
        if module_spec is None or module_spec.loader is None:
            raise OpError(f"cannot load {spec}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
        return module
    return importlib.import_module(spec)


def type_name(annotation, default, where):
    if annotation is not inspect.Parameter.empty:
        name = annotation if isinstance(annotation, str) else getattr(
            annotation, "__name__", "")
        name = name.split("[")[0].strip()
        if name not in TYPES:
            raise OpError(f"{where}: type {annotation!r} is not one of "
                          "int, float, bool, str, tuple")
        return name
    if default is inspect.Parameter.empty:
        raise OpError(f"{where}: needs a type annotation or a default")
    for name in ("bool", "int", "float", "str", "tuple"):
        if type(default) is TYPES[name]:
            return name
    raise OpError(f"{where}: default {default!r} is not an int, float, "
                  "bool, str or tuple")


def literal(value):
    if isinstance(value, tuple):
        return ",".join(repr(float(v)) for v in value)
    return str(value)


def describe(entry, module_name):
    """(name, fn, mask, table lines) of one STOKER_OPS entry."""
    if callable(entry):
        entry = {"fn": entry}
    if not isinstance(entry, dict) or not callable(entry.get("fn")):
        raise OpError(f"{module_name}: a STOKER_OPS entry is neither a "
                      "function nor a dict with a function under 'fn'")
    unknown = set(entry) - {"fn", "name", "mask", "limits", "choices"}
    if unknown:
        raise OpError(f"{module_name}: unknown keys {sorted(unknown)}")
    fn = entry["fn"]
    name = entry.get("name", fn.__name__)
    mask = bool(entry.get("mask", False))
    limits = dict(entry.get("limits", {}))
    choices = dict(entry.get("choices", {}))
    params = list(inspect.signature(fn).parameters.values())
    leading = 3 if mask else 2
    if len(params) < leading or any(
            p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            for p in params[:leading]):
        raise OpError(f"op {name}: takes ({'image, mask, rng' if mask else 'image, rng'}, "
                      "**params) first")
    lines = [f"op\t{name}\t{int(mask)}\t{module_name}"]
    usage = []
    for p in params[leading:]:
        where = f"op {name}, parameter {p.name}"
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise OpError(f"{where}: must be a plain keyword parameter")
        kind = type_name(p.annotation, p.default, where)
        has_default = p.default is not inspect.Parameter.empty
        lo, hi = limits.pop(p.name, (None, None))
        words = choices.pop(p.name, [])
        lines.append("\t".join([
            "param", p.name, kind, str(int(has_default)),
            literal(p.default) if has_default else "",
            "" if lo is None else repr(float(lo)),
            "" if hi is None else repr(float(hi)),
            ",".join(str(w) for w in words)]))
        usage.append(f"{p.name}={p.default!r}" if has_default else p.name)
    if limits or choices:
        raise OpError(f"op {name}: limits or choices for unknown parameters "
                      f"{sorted(set(limits) | set(choices))}")
    lines.append(f"usage\t{name}({', '.join(usage)})")
    return name, fn, mask, lines


def last_line(error):
    return traceback.format_exception_only(type(error), error)[-1].strip()


def reason_bytes(text, size):
    """`text` as at most `size` bytes of well-formed UTF-8 (it becomes a
    string field on the wire): unencodable characters replaced, cut at a
    character boundary."""
    data = text.encode("utf-8", "replace")[:size]
    return data.decode("utf-8", "ignore").encode("utf-8")


def die_with_parent(server_pid):
    """Ends this worker with the server thread that started it (the server
    may itself be PID 1, in a container)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:  # no ctypes: the closed socket still ends us
        pass
    if os.getppid() != server_pid:
        os._exit(1)  # the server ended before prctl


def main():
    die_with_parent(int(sys.argv[2]))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=3)
    memfd = 4
    os.closerange(5, 65536)
    # Anything the ops print goes to the server's log stream, not its stdout.
    sys.stdout = sys.stderr
    limit = int(sys.argv[1])
    modules = sys.argv[3:]
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        import numpy as np
        ops = []
        lines = []
        for spec in modules:
            module = load_module(spec)
            table = getattr(module, "STOKER_OPS", None)
            if not isinstance(table, (list, tuple)) or not table:
                raise OpError(f"{spec} has no STOKER_OPS list")
            for entry in table:
                name, fn, mask, op_lines = describe(entry, spec)
                ops.append((fn, mask))
                lines.extend(op_lines)
    except BaseException as error:  # an import may raise anything
        sock.send(b"error\n" + reason_bytes(last_line(error), 4000))
        return
    sock.send(("ok\n" + "\n".join(lines)).encode())

    bit_generator = np.random.PCG64(0)
    rng = np.random.Generator(bit_generator)
    region = None
    region_size = 0
    kwargs_cache = {}
    buffer = bytearray(1 << 16)
    view = memoryview(buffer)
    # Bound once: the loop below runs once per sample.
    recv_into = sock.recv_into
    send = sock.send
    unpack_header = HEADER.unpack_from
    unpack_entry = ENTRY.unpack_from
    pack_status = STATUS_HEAD.pack_into
    pack_count = struct.Struct("<I").pack_into
    frombuffer = np.frombuffer
    uint8 = np.uint8
    ndarray = np.ndarray
    while True:
        n = recv_into(buffer)
        if n < HEADER.size:
            return  # the server closed the socket
        op, count, size, n_args = unpack_header(buffer)
        try:
            if n == len(buffer):
                raise ValueError(f"a request of {n} bytes or more is too "
                                 "long")
            if size != region_size:
                region = None
                region = mmap.mmap(memfd, size)
                region_size = size
            start = HEADER.size + count * ENTRY.size
            args = bytes(view[start:start + n_args])
            kwargs = kwargs_cache.get(args)
            if kwargs is None:
                kwargs = ast.literal_eval(args.decode())
                if len(kwargs_cache) > 1024:
                    kwargs_cache.clear()
                kwargs_cache[args] = kwargs
            fn, takes_mask = ops[op]
        except Exception as error:
            # Nothing of the request can run: every sample fails with why.
            reason = reason_bytes(f"the request failed: {last_line(error)}",
                                  STATUS_SIZE - STATUS_HEAD.size)
            if region is not None:
                for i in range(count):
                    at = STATUS + i * STATUS_SIZE
                    pack_status(region, at, 1, len(reason))
                    region[at + STATUS_HEAD.size:
                           at + STATUS_HEAD.size + len(reason)] = reason
                pack_count(region, 0, count)
                send(b"\0")
                continue
            return  # no region to answer in: the server replaces us
        for i in range(count):
            (width, height, mask_width, mask_height, mask_channels,
             image_offset, mask_offset, s0, s1, s2, s3) = unpack_entry(
                 buffer, HEADER.size + i * ENTRY.size)
            bit_generator.state = {
                "bit_generator": "PCG64",
                "state": {"state": (s0 << 64) | s1,
                          "inc": (s2 << 64) | s3 | 1},
                "has_uint32": 0, "uinteger": 0}
            code = 0
            try:
                image = frombuffer(region, uint8, height * width * 3,
                                   image_offset).reshape(height, width, 3)
                if takes_mask:
                    mask = None
                    if mask_channels > 0:
                        mask = frombuffer(
                            region, uint8,
                            mask_height * mask_width * mask_channels,
                            mask_offset).reshape(mask_height, mask_width,
                                                 mask_channels)
                    result = fn(image, mask, rng, **kwargs)
                    if not isinstance(result, tuple) or len(result) != 2:
                        raise TypeError("a mask op returns (image, mask), "
                                        f"not {type(result).__name__}")
                    put(image, result[0], "image", ndarray, uint8)
                    if mask is not None:
                        put(mask, result[1], "mask", ndarray, uint8)
                else:
                    result = fn(image, rng, **kwargs)
                    if result is not image:
                        put(image, result, "image", ndarray, uint8)
            except MemoryError as error:
                code, text = 2, last_line(error)
            except Exception as error:
                code, text = 1, last_line(error)
            finally:
                # No view of the region may outlive the sample (remapping
                # it needs none left).
                image = mask = result = None
            at = STATUS + i * STATUS_SIZE
            if code:
                reason = reason_bytes(text, STATUS_SIZE - STATUS_HEAD.size)
                pack_status(region, at, code, len(reason))
                region[at + STATUS_HEAD.size:
                       at + STATUS_HEAD.size + len(reason)] = reason
            else:
                pack_status(region, at, 0, 0)
            pack_count(region, 0, i + 1)
            if code == 2:
                send(b"\2")
                return
        send(b"\0")


def put(target, value, what, ndarray, uint8):
    """Copies an op's result into the shared region (unless it is there)."""
    if value is target:
        return
    if not isinstance(value, ndarray):
        raise TypeError(f"the op returned {type(value).__name__} as its "
                        f"{what}, not a numpy array")
    if value.dtype != uint8 or value.shape != target.shape:
        raise ValueError(f"the op returned a {what} of {value.dtype} "
                         f"{value.shape}; expected uint8 {target.shape}")
    target[...] = value


if __name__ == "__main__":
    main()
