"""Checkpoints of a :class:`~shardwise.train.trainer.Trainer`: weights, optimizer state, step count.

    t.save_checkpoint("run.ckpt")        # atomically: temporary file, fsync, rename
    t.load_checkpoint("run.ckpt")        # the same graph, plan and optimizer kind

A checkpoint file is ``SWCKPT1\n``, the SHA-256 of the payload in hex, ``\n``, then the
payload: a NumPy ``.npz`` archive with

``__meta__``
    a JSON document (uint8): format, version, graph and plan fingerprints, ``steps``,
    ``seed``, ``optimizer`` (``{"name": "sgd" | "adam" | "adamw", ...its settings}``, the
    learning rate a number or a schedule's repr) and ``state_steps``, the
    ``[state buffer id, updates]`` pairs of every parameter slice updated so far (SGD: its
    momentum is started; Adam: its step count ``t``);
``weight/<op>.<weight|bias>``
    every full weight in PyTorch's layout, under the name ``Trainer.get_weights`` gives it (an
    imported model's own where the graph records one: ``<m>.in_proj_weight``);
``momentum/<buffer id>``
    every optimizer state buffer of the trainer's task graph (SGD's momentum, Adam's
    ``exp_avg`` and ``exp_avg_sq``), each a slice sharded like its weight.

Loading checks everything before anything changes: a foreign graph or plan, another
optimizer kind (optimizer state does not carry over between SGD and Adam), corrupt or
oversized members are refused with :class:`CheckpointError`.  The trainer keeps its own
optimizer settings (a new learning rate or schedule applies from the restored step on).
Version 1 files (SGD only, ``momentum_started`` instead of ``state_steps``) still load.
"""
from __future__ import annotations

import collections
import hashlib
import io
import json
import math
import os
import zipfile
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from shardwise.atomic import write_atomically
from shardwise.errors import ConfigError, ShardwiseError
from shardwise.train.optim import OPTIMIZERS
from shardwise.plan import Plan

if TYPE_CHECKING:
    from shardwise.train.trainer import Trainer


class CheckpointError(ShardwiseError, ValueError):
    """A checkpoint file that is corrupt or was written for another graph, plan or optimizer."""


CHECKPOINT_FORMAT = "shardwise-checkpoint"
CHECKPOINT_VERSION = 2
_MAGIC = b"SWCKPT1"
_META_MEMBER = "__meta__"
_META_LIMIT = 1 << 20          # bytes of the JSON meta document
_MEMBER_SLACK = 1 << 18        # bytes per archive member for zip and .npy headers, names, comments
_NPY_HEADER_LIMIT = 10000      # numpy's own default limit on .npy header sizes
_META_KEYS = {1: frozenset({"format", "version", "graph", "plan", "steps", "seed", "optimizer", "momentum_started"}),
              2: frozenset({"format", "version", "graph", "plan", "steps", "seed", "optimizer", "state_steps"})}


@dataclass
class Checkpoint:
    """What a checked checkpoint restores."""

    steps: int                          # training steps completed
    updates: dict[int, int]             # counted state buffer -> updates applied (runtime.updates())
    weights: dict[str, np.ndarray]      # "op.weight" -> full float32 array
    state: dict[int, np.ndarray]        # optimizer state buffer id -> its float32 slice


def plan_fingerprint(plan: Plan) -> str:
    """The plan's configurations and device graph, hashed: a checkpoint is for one plan."""
    rows = sorted((n, list(c.degrees), list(c.devices)) for n, c in plan.configs.items())
    return hashlib.sha256(json.dumps([plan.devices.fingerprint(), rows]).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------
def checkpoint_payload(t: "Trainer") -> bytes:
    """The archive of ``t``'s weights, optimizer state and step count (call it holding the
    trainer: it reads the arenas)."""
    updates = t.executor.updates()
    if updates and max(updates.values()) > t.steps:   # read_checkpoint refuses such a file
        raise CheckpointError(f"cannot save a checkpoint: the step count was set to {t.steps}, below the "
                              f"{max(updates.values())} updates the optimizer state has seen; set "
                              f"Trainer.steps back to at least that first")
    meta = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "graph": t.graph.fingerprint(),
            "plan": plan_fingerprint(t.plan), "steps": t.steps, "seed": int(t.seed),
            "optimizer": t.optimizer.to_meta(),
            "state_steps": [[b, n] for b, n in sorted(updates.items())]}
    arrays = {f"weight/{k}": v for k, v in t._get_weights().items()}   # the caller holds the trainer
    persistent = t.executor.gathered()   # one rank of several: every rank's (a collective)
    for b in t.task_graph.buffers:
        if b.kind == "momentum":
            arrays[f"momentum/{b.id}"] = persistent[b.id]
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
    return buf.getvalue()


def write_checkpoint(path: str | os.PathLike, payload: bytes) -> None:
    """The file: magic, checksum, payload, written atomically."""
    digest = hashlib.sha256(payload).hexdigest().encode()
    write_atomically(path, _MAGIC + b"\n" + digest + b"\n" + payload)


# ---------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------
def _strict_int(value: Any, lo: int = 0, hi: int = 2 ** 63 - 1) -> bool:
    """An int (not a bool, not a float with an integral value) in [lo, hi]."""
    return type(value) is int and lo <= value <= hi


def _strict_number(value: Any) -> bool:
    """A finite int or float (not a bool), as JSON numbers load."""
    return type(value) in (int, float) and math.isfinite(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _layout(t: "Trainer") -> dict[str, tuple[int, ...] | None]:
    """Archive member name -> the exact array shape a checkpoint of ``t`` holds there
    (None for the meta document, a 1-D uint8 array of at most _META_LIMIT bytes)."""
    layout: dict[str, tuple[int, ...] | None] = {_META_MEMBER + ".npy": None}
    for key, shape in t.graph.model_weights(t._weight_shapes()).items():   # as get_weights names them
        layout[f"weight/{key}.npy"] = tuple(shape)
    for b in t.task_graph.buffers:
        if b.kind == "momentum":
            layout[f"momentum/{b.id}.npy"] = tuple(hi - lo for lo, hi in b.box)
    return layout


def _dtype_problem(dtype: np.dtype) -> str | None:
    """Why an array of ``dtype`` cannot hold weights or optimizer state (None if it can): only real
    numbers that float32 can take (floats of at most 64 bits, integers), not bools, strings,
    complex numbers, objects or records."""
    if dtype.names is not None or dtype.subdtype is not None or dtype.hasobject:
        return f"dtype {dtype} is not a plain numeric type"
    if dtype.kind not in "fiu" or dtype.itemsize > 8:
        return f"dtype {dtype} is not a real number type (float or integer)"
    return None


def _member_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, header bytes) of a .npy member, reading only its header."""
    with zf.open(info) as m:
        version = np.lib.format.read_magic(m)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(m, max_header_size=_NPY_HEADER_LIMIT)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(m, max_header_size=_NPY_HEADER_LIMIT)
        else:
            raise CheckpointError(f"member {info.filename!r}: .npy format version {version} is not supported")
        return tuple(shape), dtype, m.tell()


def _check_names(zf: zipfile.ZipFile, layout: Mapping[str, tuple[int, ...] | None], where: str) -> None:
    """Every member of ``layout`` exactly once and nothing else (from the zip directory)."""
    counts = collections.Counter(i.filename for i in zf.infolist())
    duplicated = sorted(n for n, k in counts.items() if k > 1)
    unknown = sorted(set(counts) - set(layout))
    missing = sorted(set(layout) - set(counts))
    if duplicated or unknown or missing:
        parts = ([f"duplicated members {duplicated[:5]}"] if duplicated else []) + \
                ([f"unknown members {unknown[:5]}"] if unknown else []) + \
                ([f"missing {[m[:-4] for m in missing][:5]}"] if missing else [])
        raise CheckpointError(f"{where}: does not match this trainer's graph and plan: " + "; ".join(parts))


def _check_member(zf: zipfile.ZipFile, name: str, want: tuple[int, ...] | None, where: str) -> None:
    """The dtype, shape and declared size of one .npy member against what this trainer expects
    (``want``; None for the meta document), from the zip directory and the member's .npy header
    alone: nothing past the header (at most _NPY_HEADER_LIMIT bytes) is decompressed."""
    info = zf.getinfo(name)
    if info.flag_bits & 0x1:
        raise CheckpointError(f"{where}: member {name!r} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise CheckpointError(f"{where}: member {name!r} uses an unsupported compression")
    try:
        shape, dtype, header = _member_header(zf, info)
    except CheckpointError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    if want is None:
        if dtype != np.uint8 or len(shape) != 1 or shape[0] > _META_LIMIT:
            raise CheckpointError(f"{where}: the meta document must be at most {_META_LIMIT} bytes (uint8), "
                                  f"got {dtype} {shape}")
    else:
        problem = _dtype_problem(dtype)
        if problem:
            raise CheckpointError(f"{where}: member {name!r}: {problem}")
        if shape != want:
            raise CheckpointError(f"{where}: member {name!r} has shape {shape}, expected {want}")
    # the size the zip directory declares must be exactly what the header describes: reading
    # the member then inflates no more than the arrays this trainer has
    expected_size = header + math.prod(shape) * dtype.itemsize
    if info.file_size != expected_size:
        raise CheckpointError(f"{where}: member {name!r} declares {info.file_size} bytes, but its header "
                              f"describes {expected_size}")


def _read_member(zf: zipfile.ZipFile, name: str) -> np.ndarray:
    with zf.open(name) as m:
        return np.lib.format.read_array(m, allow_pickle=False, max_header_size=_NPY_HEADER_LIMIT)


def counted_buffers(t: "Trainer") -> set[int]:
    """The state buffers whose update counts the runtime keeps: each update task's first
    state buffer (its third read: param, grad, state...)."""
    return {task.reads[2] for task in t.task_graph.tasks if task.kind == "update"}


def _check_optimizer(opt: Any, t: "Trainer", version: int, where: str) -> None:
    """The recorded optimizer: the trainer's kind, every setting present and valid."""
    if not isinstance(opt, dict):
        raise CheckpointError(f"{where}: malformed checkpoint field 'optimizer': expected an object, got {opt!r}"[:500])
    opt = dict(opt)
    name = opt.pop("name", None) if version >= 2 else "sgd"
    cls = OPTIMIZERS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise CheckpointError(f"{where}: malformed checkpoint field 'optimizer': unknown optimizer {name!r}; "
                              f"expected one of {sorted(OPTIMIZERS)}"[:500])
    if name != t.optimizer.name:
        raise CheckpointError(f"{where}: written by a trainer with optimizer {cls.__name__}, but this trainer's is "
                              f"{type(t.optimizer).__name__}: optimizer state does not carry over between kinds; "
                              f"build the trainer with sw.{cls.__name__}(...) to resume this checkpoint")
    names = {f.name for f in fields(cls)}   # type: ignore[arg-type]
    if set(opt) != names:
        raise CheckpointError(f"{where}: malformed checkpoint field 'optimizer': expected exactly the fields "
                              f"{sorted(names | ({'name'} if version >= 2 else set()))}, got {sorted(opt)}"[:500])
    for k in sorted(names):
        v = opt[k]
        if k in ("nesterov", "amsgrad"):
            ok, want = type(v) is bool, "true or false"
        elif k == "betas":
            ok, want = isinstance(v, list) and len(v) == 2 and all(_strict_number(b) for b in v), "two numbers"
        elif k == "lr" and version >= 2 and isinstance(v, str):
            ok, want = len(v) <= 1000, "a number, or a schedule's repr"
        else:
            ok, want = _strict_number(v) and v >= 0, "a finite number >= 0"
        if not ok:
            raise CheckpointError(f"{where}: malformed checkpoint field 'optimizer': {k} must be {want}, "
                                  f"got {v!r}"[:300])
    settings = {k: (tuple(v) if k == "betas" else 0.0 if k == "lr" and isinstance(v, str) else v)
                for k, v in opt.items()}
    try:
        cls(**settings)
    except ConfigError as exc:
        raise CheckpointError(f"{where}: malformed checkpoint field 'optimizer': {exc}") from None


def _check_state_steps(value: Any, version: int, counted: set[int], momentum_ids: set[int],
                       where: str) -> dict[int, int]:
    """{counted state buffer: updates} from ``state_steps`` (version 2: [id, count >= 1] pairs)
    or ``momentum_started`` (version 1: ids of started SGD momentum buffers, count 1)."""
    field = "state_steps" if version >= 2 else "momentum_started"
    if version >= 2:
        ok = isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 and _strict_int(p[0])
                                             and _strict_int(p[1], lo=1) for p in value)
        if not ok:
            raise CheckpointError(f"{where}: malformed checkpoint field {field!r}: expected a list of "
                                  f"[state buffer id, updates >= 1] pairs, got {value!r}"[:500])
        pairs = [(p[0], p[1]) for p in value]
    else:
        if not isinstance(value, list) or not all(_strict_int(b) for b in value):
            raise CheckpointError(f"{where}: malformed checkpoint field {field!r}: expected a list of momentum "
                                  f"buffer ids, got {value!r}"[:500])
        pairs = [(b, 1) for b in value]
    ids = [b for b, _ in pairs]
    if len(set(ids)) != len(ids):
        raise CheckpointError(f"{where}: malformed checkpoint field {field!r}: a buffer appears twice")
    allowed = counted if version >= 2 else momentum_ids
    unknown = sorted(set(ids) - allowed)
    if unknown:
        raise CheckpointError(f"{where}: optimizer state does not match this plan (unknown state buffers "
                              f"{unknown[:5]})")
    return dict(pairs)


def _check_meta(meta: Any, t: "Trainer", where: str) -> tuple[int, dict[int, int]]:
    """Every field of the meta document, strictly typed; returns (steps, update counts)."""
    if not isinstance(meta, dict):
        kind = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
                type(None): "null"}.get(type(meta), type(meta).__name__)
        raise CheckpointError(f"{where}: malformed checkpoint: the meta document is a JSON {kind}, not an object")
    version = meta.get("version")
    if meta.get("format") != CHECKPOINT_FORMAT or not _strict_int(version) or version not in _META_KEYS:
        raise CheckpointError(f"{where}: unknown checkpoint format {meta.get('format')!r} {version!r} "
                              f"(this shardwise reads {CHECKPOINT_FORMAT!r} versions {sorted(_META_KEYS)})")
    keys = _META_KEYS[version]
    missing, unknown = sorted(keys - set(meta)), sorted(set(meta) - keys)
    if missing or unknown:
        raise CheckpointError(f"{where}: malformed checkpoint fields: "
                              + "; ".join(([f"missing {missing}"] if missing else [])
                                          + ([f"unknown {unknown}"] if unknown else [])))
    if meta["graph"] != t.graph.fingerprint():
        raise CheckpointError(f"{where}: written for another graph")
    if meta["plan"] != plan_fingerprint(t.plan):
        raise CheckpointError(f"{where}: written for another plan of this graph")
    for field in ("steps", "seed"):
        if not _strict_int(meta[field]):
            raise CheckpointError(f"{where}: malformed checkpoint field {field!r}: expected an int >= 0, "
                                  f"got {meta[field]!r}"[:500])
    _check_optimizer(meta["optimizer"], t, version, where)
    momentum_ids = {b.id for b in t.task_graph.buffers if b.kind == "momentum"}
    steps_field = meta["state_steps"] if version >= 2 else meta["momentum_started"]
    updates = _check_state_steps(steps_field, version, counted_buffers(t), momentum_ids, where)
    # every step updates a state buffer at most once: a count beyond the steps (Adam's bias
    # correction would then use it) comes from another tool or a hand edit, never from a save
    beyond = sorted(b for b, n in updates.items() if n > meta["steps"])
    if beyond:
        raise CheckpointError(f"{where}: malformed checkpoint: state buffer {beyond[0]} counts "
                              f"{updates[beyond[0]]} updates, more than the checkpoint's {meta['steps']} steps")
    return meta["steps"], updates


def read_checkpoint(t: "Trainer", path: str | os.PathLike) -> Checkpoint:
    """The checkpoint at ``path`` for trainer ``t``, every part checked; CheckpointError otherwise.
    Reads at most the size a checkpoint of ``t`` can have, and decompresses nothing but the
    meta document (at most _META_LIMIT bytes, checked first so that a foreign graph, plan or
    optimizer is named as such) until every member's name, declared size, dtype and shape
    have passed."""
    layout = _layout(t)
    arrays_max = sum(math.prod(s) * 8 for s in layout.values() if s is not None)
    size_limit = arrays_max + _META_LIMIT + (len(layout) + 1) * _MEMBER_SLACK
    try:
        with open(path, "rb") as f:
            raw = f.read(size_limit + 1)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint ({exc})") from None
    if len(raw) > size_limit:
        raise CheckpointError(f"{path}: larger than any checkpoint of this trainer can be ({size_limit} bytes)")
    head, _, rest = raw.partition(b"\n")
    digest, _, payload = rest.partition(b"\n")
    if head != _MAGIC or hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CheckpointError(f"{path}: not a shardwise checkpoint, or corrupt (checksum mismatch)")
    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as zf:
            # the meta document first, so that a checkpoint of another graph, plan or optimizer says so
            meta_name = _META_MEMBER + ".npy"
            if sum(i.filename == meta_name for i in zf.infolist()) != 1:
                raise CheckpointError(f"{path}: malformed checkpoint: it needs exactly one {_META_MEMBER} member")
            _check_member(zf, meta_name, None, str(path))
            text = bytes(_read_member(zf, meta_name)).decode("utf-8")
            meta = json.loads(text, parse_constant=_reject_constant)
            steps, updates = _check_meta(meta, t, str(path))
            _check_names(zf, layout, str(path))
            for name, want in layout.items():
                _check_member(zf, name, want, str(path))
            arrays = {name[:-4]: _read_member(zf, name) for name in layout if layout[name] is not None}
    except CheckpointError:
        raise
    except Exception as exc:  # a checksum-valid file that zipfile, numpy or json cannot read is still corrupt
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {str(exc)[:300]})") from None
    out = Checkpoint(steps, updates, {}, {})
    with np.errstate(over="ignore", invalid="ignore"):  # float64 beyond float32 becomes inf: refused below
        for key, a in arrays.items():
            kind, name = key.split("/", 1)
            if kind == "weight" and layout[key + ".npy"] == ():   # num_batches_tracked: an integer count
                out.weights[name] = a   # set_weights checks it
                continue
            a = np.asarray(a, dtype=np.float32)
            if not np.isfinite(a).all():
                raise CheckpointError(f"{path}: {key} contains NaN or infinity (or values beyond float32)")
            if kind == "weight":
                out.weights[name] = a
            else:
                out.state[int(name)] = a
    return out
