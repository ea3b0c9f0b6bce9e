"""Machine files: a :class:`~shardwise.machine.devices.DeviceGraph` as a JSON document.

    d.save("machine.json")                  # DeviceGraph.save: written atomically
    d = sw.DeviceGraph.load("machine.json")  # validated; errors name the field
    python -m shardwise plan --model vgg16 --devices machine.json

The schema (version 1, documented in docs/machines.md)::

    {"format": "shardwise-machine", "version": 1, "name": "two GPUs",
     "devices": [{"name": "gpu0", "kind": "V100", "flops": 1.57e13, "memory": 1.6e10,
                  "mem_bandwidth": 9e11, "node": 0, "host_bandwidth": 1.6e10, "flops_fp16": 1.25e14}, ...],
     "links": [{"from": 0, "to": 1, "bandwidth": 2.5e10, "bidirectional": true}, ...],
     "all_to_all": {"devices_per_node": 4, "intra_bandwidth": 2e10, "inter_bandwidth": 1.25e10},
     "shared_cores": null, "shared_nics": false, "nic_per_device": false}

``links`` and ``all_to_all`` are exclusive: the presets (``cluster``, ``cpu``) are written
with ``all_to_all``, their structure (every pair linked, one bandwidth inside a node and one
between nodes), so that a machine of 1,024 devices is 1,024 device rows, not a million
links.  A device whose ``kind`` names a preset (``P100``, ``V100``, ``H100``, ... ``cpu``: ``DEVICE_PRESETS``) takes
the figures it leaves out from that preset.  Every check names the file, the field (as
``devices[3].flops``) and the problem, as a :class:`~shardwise.errors.DeviceGraphError`;
unknown fields are refused, so a misspelt one never goes unnoticed.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from shardwise.atomic import write_atomically
from shardwise.machine.devices import DEVICE_PRESETS, MAX_DEVICES, DeviceGraph, _Uniform
from shardwise.errors import DeviceGraphError

MACHINE_FORMAT = "shardwise-machine"
MACHINE_VERSION = 1

_TOP = ("format", "version", "name", "devices", "links", "all_to_all", "shared_cores", "shared_nics",
        "nic_per_device")
_DEVICE = ("name", "kind", "flops", "memory", "mem_bandwidth", "node", "host_bandwidth", "flops_bf16", "flops_fp16")
_HALF_PEAKS = ("flops_bf16", "flops_fp16")   # optional: written when the device has them
_LINK = ("from", "to", "bandwidth", "bidirectional")
_ALL_TO_ALL = ("devices_per_node", "intra_bandwidth", "inter_bandwidth")
_MAX_INT = 2**31 - 1   # nodes, cores and devices per node: far beyond any machine, inside a C int


# ------------------------------------------------------------------------------------ writing
def machine_to_dict(d: DeviceGraph) -> dict[str, Any]:
    """The JSON object of a machine file; a preset keeps its structure instead of its links."""
    devices = []
    for dev in d.devices:
        row: dict[str, Any] = {"name": dev.name}
        if dev.kind is not None:
            row["kind"] = dev.kind
        row.update(flops=dev.flops, memory=dev.memory, mem_bandwidth=dev.mem_bandwidth, node=dev.node,
                   host_bandwidth=dev.host_bandwidth)
        row.update({key: getattr(dev, key) for key in _HALF_PEAKS if getattr(dev, key) is not None})
        devices.append(row)
    out: dict[str, Any] = {"format": MACHINE_FORMAT, "version": MACHINE_VERSION, "name": d.name, "devices": devices}
    uniform = d._uniform
    if uniform is not None:   # a preset untouched by hand: its links are implied by the structure
        out["all_to_all"] = {"devices_per_node": uniform.per, "intra_bandwidth": uniform.intra,
                             "inter_bandwidth": uniform.inter}
    else:
        links = d._link_dict
        rows = []
        for (i, j), bw in sorted(links.items()):
            if links.get((j, i)) == bw:   # both ways at one bandwidth: one row, written from the lower index
                if i < j:
                    rows.append({"from": i, "to": j, "bandwidth": bw})
            else:
                rows.append({"from": i, "to": j, "bandwidth": bw, "bidirectional": False})
        out["links"] = rows
    out["shared_cores"] = d.shared_cores
    out["shared_nics"] = d.shared_nics
    out["nic_per_device"] = d.nic_per_device
    return out


def save_machine(d: DeviceGraph, path: str | os.PathLike) -> None:
    """Write ``d`` to ``path`` atomically: a temporary file beside it, then ``os.replace``."""
    if len(d) == 0:
        raise DeviceGraphError(f"device graph {d.name!r} has no devices: nothing to save")
    write_atomically(path, machine_json(d).encode())


def machine_json(d: DeviceGraph) -> str:
    """The machine file's text: one line per field, per device and per link (a 64-device
    machine reads as a table, and a diff of two machines shows the rows that differ)."""
    lines = []
    for key, value in machine_to_dict(d).items():
        if isinstance(value, list):
            rows = ",\n".join("  " + _compact(row) for row in value)
            lines.append(f" {json.dumps(key)}: [\n{rows}\n ]" if value else f" {json.dumps(key)}: []")
        else:
            lines.append(f" {json.dumps(key)}: {_compact(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _compact(value: Any) -> str:
    """JSON on one line, large floats in the shortest exponent form that reads back to the same
    float (9.3e+12, not 9300000000000.0)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_compact(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float) and math.isfinite(value) and abs(value) >= 1e6:
        return np.format_float_scientific(value, unique=True, trim="-")
    return json.dumps(value, allow_nan=False)


# ------------------------------------------------------------------------------------ reading
class _Reader:
    """Checks fields of one JSON document, naming each as ``<where>: <path>: <problem>``."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, field: str, problem: str) -> DeviceGraphError:
        return DeviceGraphError(f"{self.where}: {field}: {problem}" if field else f"{self.where}: {problem}")

    def obj(self, value: Any, field: str, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(field, f"must be a JSON object, got {_kind(value)}")
        unknown = [k for k in value if k not in allowed]
        if unknown:
            raise self.fail(field, f"unknown field {unknown[0]!r}; the fields are {', '.join(allowed)}")
        return value

    def number(self, value: Any, field: str, unit: str) -> float:
        """A positive finite JSON number (not a bool, not a string)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(field, f"must be a positive number ({unit}), got {_kind(value)}")
        try:
            v = float(value)
        except OverflowError:   # an integer beyond any float
            v = math.inf
        if not math.isfinite(v) or v <= 0:
            raise self.fail(field, f"must be a positive number ({unit}), got {_shown(value)}")
        return v

    def integer(self, value: Any, field: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field, f"must be an integer, got {_kind(value)}")
        if not minimum <= value <= _MAX_INT:
            raise self.fail(field, f"must be an integer from {minimum} to {_MAX_INT}, got {_shown(value)}")
        return value

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(field, f"must be a non-empty string, got {_kind(value)}")
        return value

    def boolean(self, value: Any, field: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(field, f"must be true or false, got {_kind(value)}")
        return value


def _shown(number: int | float) -> str:
    """A number as JSON writes it (NaN, not nan), or its size when it is too long to read."""
    text = json.dumps(number)
    return text if len(text) <= 40 else f"a number of {len(text)} digits"


def _kind(value: Any) -> str:
    """How a JSON value reads in a message: its type, and the value when short."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
             int: "a number", float: "a number"}
    text = json.dumps(value) if not isinstance(value, (dict, list)) else ""
    return names.get(type(value), type(value).__name__) + (f" {text}" if text and len(text) <= 40 else "")


def _device_row(r: _Reader, row: Any, k: int) -> dict[str, Any]:
    """devices[k] as add_device's arguments; a preset kind fills the figures left out."""
    field = f"devices[{k}]"
    row = r.obj(row, field, _DEVICE)
    if "name" not in row:
        raise r.fail(field, "missing field 'name'")
    out: dict[str, Any] = {"name": r.string(row["name"], f"{field}.name")}
    kind = r.string(row["kind"], f"{field}.kind") if "kind" in row else None
    preset = DEVICE_PRESETS.get(kind) if kind is not None else None
    defaults = {"flops": preset.flops, "memory": preset.memory, "mem_bandwidth": preset.mem_bandwidth} if preset else {}
    for key, unit in (("flops", "FLOP/s"), ("memory", "bytes"), ("mem_bandwidth", "bytes/s")):
        if key in row:
            out[key] = r.number(row[key], f"{field}.{key}", unit)
        elif key in defaults:
            out[key] = defaults[key]
        elif key != "mem_bandwidth":   # add_device's default: 80 bytes per 1000 FLOPs
            raise r.fail(field, f"missing field {key!r} (or a preset kind: {', '.join(sorted(DEVICE_PRESETS))})")
    out["node"] = r.integer(row.get("node", 0), f"{field}.node", 0)
    out["kind"] = kind
    if "host_bandwidth" in row:   # else add_device's default: the preset's, or PCIe 3.0 x16's
        out["host_bandwidth"] = r.number(row["host_bandwidth"], f"{field}.host_bandwidth", "bytes/s")
    for key in _HALF_PEAKS:   # else add_device's default: the preset's, or none (the float32 peak)
        if key in row:
            out[key] = r.number(row[key], f"{field}.{key}", "FLOP/s")
    return out


def _endpoint(r: _Reader, value: Any, field: str, names: dict[str, int], count: int) -> int:
    """A link's end: a device index or a device name."""
    if isinstance(value, str):
        if value not in names:
            raise r.fail(field, f"no device named {value!r}")
        return names[value]
    if isinstance(value, bool) or not isinstance(value, int):
        raise r.fail(field, f"must be a device index or name, got {_kind(value)}")
    if not 0 <= value < count:
        raise r.fail(field, f"device index {value} is out of range: the machine has devices 0..{count - 1}")
    return value


def _links(r: _Reader, rows: Any, g: DeviceGraph) -> None:
    if not isinstance(rows, list):
        raise r.fail("links", f"must be an array, got {_kind(rows)}")
    names = {dev.name: dev.index for dev in g.devices}
    seen: dict[tuple[int, int], int] = {}
    for k, row in enumerate(rows):
        field = f"links[{k}]"
        row = r.obj(row, field, _LINK)
        for key in ("from", "to", "bandwidth"):
            if key not in row:
                raise r.fail(field, f"missing field {key!r}")
        a = _endpoint(r, row["from"], f"{field}.from", names, len(g))
        b = _endpoint(r, row["to"], f"{field}.to", names, len(g))
        if a == b:
            raise r.fail(field, f"links device {g.devices[a].name!r} to itself")
        bw = r.number(row["bandwidth"], f"{field}.bandwidth", "bytes/s")
        both = r.boolean(row.get("bidirectional", True), f"{field}.bidirectional")
        for pair in ((a, b), (b, a)) if both else ((a, b),):
            if pair in seen:
                raise r.fail(field, f"duplicate link {g.devices[pair[0]].name} -> {g.devices[pair[1]].name} "
                                    f"(also links[{seen[pair]}])")
            seen[pair] = k
        g.add_link(a, b, bw, bidirectional=both)


def _all_to_all(r: _Reader, value: Any, g: DeviceGraph) -> None:
    spec = r.obj(value, "all_to_all", _ALL_TO_ALL)
    for key in _ALL_TO_ALL:
        if key not in spec:
            raise r.fail("all_to_all", f"missing field {key!r}")
    per = r.integer(spec["devices_per_node"], "all_to_all.devices_per_node", 1)
    intra = r.number(spec["intra_bandwidth"], "all_to_all.intra_bandwidth", "bytes/s")
    inter = r.number(spec["inter_bandwidth"], "all_to_all.inter_bandwidth", "bytes/s")
    if len(g) % per:
        raise r.fail("all_to_all.devices_per_node", f"{per} does not divide the {len(g)} devices into whole nodes")
    for dev in g.devices:   # the structure is devices [n * per, (n + 1) * per) on node n
        if dev.node != dev.index // per:
            raise r.fail(f"devices[{dev.index}].node", f"is {dev.node}, but all_to_all with {per} devices per "
                                                       f"node puts device {dev.index} on node {dev.index // per}")
    g._uniform = _Uniform(per, intra, inter)


def machine_from_dict(data: Any, where: str = "machine") -> DeviceGraph:
    """A device graph from a machine file's JSON object, every field checked."""
    r = _Reader(where)
    if not isinstance(data, dict) or data.get("format") != MACHINE_FORMAT:
        raise r.fail("", f"not a shardwise machine file (\"format\" must be {MACHINE_FORMAT!r})")
    r.obj(data, "", _TOP)
    if "version" not in data:
        raise r.fail("version", "missing field")
    version = data["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version != MACHINE_VERSION:
        raise r.fail("version", f"machine file version {json.dumps(version)} is not supported "
                                f"(this shardwise reads version {MACHINE_VERSION})")
    g = DeviceGraph(r.string(data["name"], "name") if "name" in data else "machine")
    rows = data.get("devices")
    if not isinstance(rows, list) or not rows:
        raise r.fail("devices", "must be a non-empty array of devices" if "devices" in data else "missing field")
    if len(rows) > MAX_DEVICES:
        raise r.fail("devices", f"{len(rows)} devices; shardwise plans for at most {MAX_DEVICES}")
    first: dict[str, int] = {}
    for k, row in enumerate(rows):
        args = _device_row(r, row, k)
        if args["name"] in first:
            raise r.fail(f"devices[{k}].name",
                         f"duplicate device name {args['name']!r} (also devices[{first[args['name']]}])")
        first[args["name"]] = k
        g.add_device(**args)
    if "links" in data and "all_to_all" in data:
        raise r.fail("", "give either \"links\" or \"all_to_all\", not both")
    if "all_to_all" in data:
        _all_to_all(r, data["all_to_all"], g)
    else:
        _links(r, data.get("links", []), g)
    cores = data.get("shared_cores")
    g.shared_cores = None if cores is None else r.integer(cores, "shared_cores", 1)
    g.shared_nics = r.boolean(data.get("shared_nics", False), "shared_nics")
    g.nic_per_device = r.boolean(data.get("nic_per_device", False), "nic_per_device")
    if g.shared_nics and g.nic_per_device:
        raise r.fail("nic_per_device", "and shared_nics are both true: a node's devices share one network adapter "
                                       "or each has its own, not both")
    return g


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict; a key given twice (which json would silently resolve to the
    last) is an error: one of the two values was meant, and we cannot tell which."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"the key {key!r} appears twice in one JSON object")
        out[key] = value
    return out


def load_machine(path: str | os.PathLike) -> DeviceGraph:
    """Read and check a machine file (OSError when it cannot be read, as ``open`` raises it)."""
    where = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        raise DeviceGraphError(f"{where}: {exc}") from None
    except UnicodeDecodeError:
        raise DeviceGraphError(f"{where}: not a machine file (not UTF-8 text)") from None
    except (ValueError, RecursionError) as exc:   # JSONDecodeError (with line and column), nesting limits
        raise DeviceGraphError(f"{where}: not a machine file (invalid JSON: {exc})") from None
    return machine_from_dict(data, where)
