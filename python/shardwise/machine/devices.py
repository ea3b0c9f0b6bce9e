"""Device graphs: devices (FLOP/s, memory, memory bandwidth) and the links between them.

    d = DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100")   # seed 003's cluster
    d = DeviceGraph.cpu(4)                                                 # 4 workers here
    d = DeviceGraph()
    a = d.add_device("gpu0", flops=9.3e12, memory=16e9)
    b = d.add_device("gpu1", flops=9.3e12, memory=16e9)
    d.add_link(a, b, bandwidth=20e9)

Transfers between devices that share no link follow the *widest* route (the
path whose slowest link is fastest; among those the one of fewest links, then
the smallest sequence of device numbers) and run at that slowest link's
bandwidth.  The C core searches the routes (csrc/core/routes.c) for the pairs
asked for; only the bandwidths of every pair are kept, not the paths.

A device graph holds at most :data:`MAX_DEVICES` devices (the planner's limit),
checked as it is built.  The presets know their structure (identical devices,
every pair linked, one bandwidth inside a node and one between nodes), so their
route bandwidths come from the node of each device instead of a search over
every pair, and their links are listed only when asked for.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise import _core
from shardwise.errors import DeviceGraphError

MAX_DEVICES: int = _core.MAX_DEVICES   # the most devices the planner takes (csrc/shardwise.h)


# PCIe 3.0 x16: 16 GB/s each way, the nominal host link of the GPUs below (AccUDNN section 3.3.3
# uses the same figure; measured copies reach 11-13 GB/s, which a profile or machine file can give).
PCIE3_X16 = 16e9
# PCIe 4.0 and 5.0 x16: 32 and 64 GB/s each way (A100; H100 and H200 SXM).
PCIE4_X16 = 32e9
PCIE5_X16 = 64e9
# 100 Gb/s EDR InfiniBand between nodes (the papers' clusters: one adapter per node).
INFINIBAND_EDR = 12.5e9
# 400 Gb/s NDR InfiniBand: 50 GB/s each way, one adapter per GPU in today's 8-GPU servers.
INFINIBAND_NDR = 50e9


@dataclass(frozen=True)
class DeviceSpec:
    """Nominal figures of one kind of device (fp32, and the dense peaks in bf16 and fp16)."""

    flops: float          # peak FLOP/s, float32
    memory: float         # bytes of device memory
    mem_bandwidth: float  # bytes/s of device memory
    intra_bandwidth: float  # bytes/s between two devices of one node
    host_bandwidth: float = 16e9   # bytes/s each way between the device and pinned host memory
    # Output elements a kernel needs to fill the device (0: it runs one kernel at a time).  A GPU
    # runs kernels of several streams at once; the simulator gives each the fraction its outputs
    # fill.  GPUs: SMs x 2 resident blocks x a 128 x 128 output tile (cuDNN's and cuBLAS's large
    # SGEMM tiles, 256 threads a block, two blocks an SM at their register use).
    fill_outputs: float = 0.0
    # Between nodes of a cluster: bytes/s each way of one network adapter, and whether every
    # device has its own adapter (today's GPU servers: one 400 Gb/s adapter per GPU) or the
    # node's devices share one (the papers' clusters: one 100 Gb/s adapter per node).
    network_bandwidth: float = INFINIBAND_EDR
    nic_per_device: bool = False
    # Dense peak FLOP/s of matrix products and convolutions in bfloat16 and float16 (the tensor
    # cores', without sparsity), what a plan with precision="bf16" / "fp16" uses for them;
    # None: the device has no faster path in that format, and such a plan uses ``flops``.
    flops_bf16: float | None = None
    flops_fp16: float | None = None


# Figures from the vendors' data sheets; links as in the papers' machines.
DEVICE_PRESETS: dict[str, DeviceSpec] = {
    # Tesla P100 SXM2: 10.6 TFLOP/s boost (9.3 base), 16 GB HBM2 at 732 GB/s, NVLink 20 GB/s per link,
    # PCIe 3.0 x16 to the host.
    # Half precision at twice the float32 rate (the data sheet: 21.2 TFLOP/s at boost); no bfloat16.
    "P100": DeviceSpec(9.3e12, 16e9, 732e9, 20e9, PCIE3_X16, fill_outputs=56 * 2 * 128 * 128,   # 56 SMs
                       flops_fp16=2 * 9.3e12),
    # One GK210 of a Tesla K80: 4.37 TFLOP/s boost, 12 GB at 240 GB/s, PCIe 3.0 x16 shared per card (~10 GB/s);
    # the card's one x16 host link is shared by its two GPUs: 8 GB/s each.
    "K80": DeviceSpec(4.37e12, 12e9, 240e9, 10e9, PCIE3_X16 / 2, fill_outputs=13 * 2 * 128 * 128),   # 13 SMXs
    # Tesla V100 SXM2: 15.7 TFLOP/s, 16 GB at 900 GB/s, NVLink 2 (25 GB/s per link), PCIe 3.0 x16 to the host;
    # tensor cores 125 TFLOP/s float16 (no bfloat16).
    "V100": DeviceSpec(15.7e12, 16e9, 900e9, 25e9, PCIE3_X16, fill_outputs=80 * 2 * 128 * 128,   # 80 SMs
                       flops_fp16=125e12),
    # Today's 8-GPU servers: every GPU reaches every other of its node through NVSwitch at its
    # full NVLink bandwidth (half the data sheets' bidirectional total, per direction), and the
    # other nodes through its own 400 Gb/s InfiniBand adapter.  ``flops`` is float32 (CUDA cores);
    # the bf16 / fp16 figures are the tensor cores' dense peaks, which plans costed in those
    # formats use for matrix products and convolutions (docs/machines.md gives the sources).
    # A100 SXM4 40 GB: 19.5 TFLOP/s, 1,555 GB/s HBM2, NVLink 3 600 GB/s (300 each way), PCIe 4.0;
    # tensor cores 312 TFLOP/s BF16 / FP16 dense.
    "A100-40GB": DeviceSpec(19.5e12, 40e9, 1555e9, 300e9, PCIE4_X16, fill_outputs=108 * 2 * 128 * 128,
                            network_bandwidth=INFINIBAND_NDR, nic_per_device=True,   # 108 SMs
                            flops_bf16=312e12, flops_fp16=312e12),
    # A100 SXM4 80 GB: the same GPU with 2,039 GB/s HBM2e.
    "A100-80GB": DeviceSpec(19.5e12, 80e9, 2039e9, 300e9, PCIE4_X16, fill_outputs=108 * 2 * 128 * 128,
                            network_bandwidth=INFINIBAND_NDR, nic_per_device=True,
                            flops_bf16=312e12, flops_fp16=312e12),
    # H100 SXM5 80 GB: 67 TFLOP/s, 3.35 TB/s HBM3, NVLink 4 900 GB/s (450 each way), PCIe 5.0;
    # tensor cores 989 TFLOP/s BF16 / FP16 dense.
    "H100": DeviceSpec(67e12, 80e9, 3350e9, 450e9, PCIE5_X16, fill_outputs=132 * 2 * 128 * 128,
                       network_bandwidth=INFINIBAND_NDR, nic_per_device=True,   # 132 SMs
                       flops_bf16=989e12, flops_fp16=989e12),
    # H200 SXM 141 GB: the H100's compute with 4.8 TB/s HBM3e.
    "H200": DeviceSpec(67e12, 141e9, 4800e9, 450e9, PCIE5_X16, fill_outputs=132 * 2 * 128 * 128,
                       network_bandwidth=INFINIBAND_NDR, nic_per_device=True,
                       flops_bf16=989e12, flops_fp16=989e12),
    # One CPU worker of this kind of machine: one core with AVX2 FMA, a share of DRAM bandwidth,
    # and copies between workers through shared memory; its "host" memory is the same DRAM, so a
    # swap is a memcpy (read and write: half the bandwidth).  Nominal; profiles replace it.
    "cpu": DeviceSpec(50e9, 4e9, 10e9, 5e9, 5e9),
}
DEVICE_PRESETS["A100"] = DEVICE_PRESETS["A100-80GB"]   # the A100 most clusters have today


@dataclass(frozen=True)
class Device:
    """A handle on one device of a device graph."""

    index: int
    name: str
    flops: float
    memory: float
    mem_bandwidth: float
    node: int = 0
    kind: str | None = None   # a label for devices of one kind ("P100", "cpu"); the figures are what counts
    host_bandwidth: float = PCIE3_X16   # bytes/s each way to pinned host memory (swapping feature maps)
    # dense peak FLOP/s of matrix products and convolutions in bfloat16 / float16; None: ``flops``
    flops_bf16: float | None = None
    flops_fp16: float | None = None

    def peak_flops(self, precision: str = "fp32") -> float:
        """Peak FLOP/s of a matrix product or convolution in ``precision`` ("fp32", "bf16",
        "fp16"): ``flops`` for fp32 and where the device states no faster figure."""
        from shardwise.planning.precision import check_precision

        check_precision(precision)
        half = {"fp32": None, "bf16": self.flops_bf16, "fp16": self.flops_fp16}[precision]
        return self.flops if half is None else half

    def __repr__(self) -> str:
        return f"Device({self.index}, {self.name!r})"


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise DeviceGraphError(f"{what} must be a positive number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise DeviceGraphError(f"{what} must be a positive number, got {value!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise DeviceGraphError(f"{what} must be a positive finite number, got {value!r}")
    return v


def _check_count(count: int, what: str) -> None:
    """Refuse a device graph larger than the planner takes before building any of it."""
    if count > MAX_DEVICES:
        raise DeviceGraphError(f"{what} makes {count} devices; shardwise plans for at most {MAX_DEVICES} "
                               f"devices (shardwise.MAX_DEVICES)")


@dataclass(frozen=True)
class _Uniform:
    """The structure of a preset: devices [n * per, (n + 1) * per) form node n, all alike, and
    every pair is linked, at ``intra`` inside a node and ``inter`` between nodes."""

    per: int
    intra: float
    inter: float

    def bandwidth(self, a: int, b: int) -> float:
        """Of the link between devices a and b."""
        return self.intra if a // self.per == b // self.per else self.inter

    def direct_is_widest(self, ndev: int) -> bool:
        """Is every link its pair's widest route?  Not when a node's links are slower than
        those between nodes and there is another node to go through."""
        return self.intra >= self.inter or ndev <= self.per


class DeviceGraph:
    """Devices and bidirectional (or one-way) links with bandwidths in bytes/s."""

    def __init__(self, name: str = "devices") -> None:
        self.name = name
        self.devices: list[Device] = []
        self._by_name: dict[str, int] = {}
        self._link_dict: dict[tuple[int, int], float] = {}
        self._uniform: _Uniform | None = None   # presets: links implied by the structure
        self._routes: np.ndarray | None = None
        self.shared_cores: int | None = None   # set for CPU workers that share a machine's cores
        self.shared_nics: bool = False          # set for clusters: one network adapter per node
        self.nic_per_device: bool = False       # set for clusters of today's GPUs: one adapter per device

    # ----- building ----------------------------------------------------------
    def add_device(self, name: str, flops: float, memory: float, mem_bandwidth: float | None = None,
                   node: int = 0, kind: str | None = None, host_bandwidth: float | None = None,
                   flops_bf16: float | None = None, flops_fp16: float | None = None) -> Device:
        """Add a device; ``mem_bandwidth`` defaults to 80 bytes per 1000 FLOPs (a GPU-like ratio),
        ``host_bandwidth`` (bytes/s each way to pinned host memory, what swapping feature maps
        uses) to its ``kind``'s preset, else PCIe 3.0 x16's nominal 16 GB/s.  ``flops`` is the
        float32 peak; ``flops_bf16`` and ``flops_fp16`` the dense peaks of matrix products and
        convolutions in those formats (plans with ``precision="bf16"`` / ``"fp16"``), by default
        its ``kind``'s preset's, else none (such plans use ``flops``).
        ``kind`` labels devices of one kind (the presets use their names); it is kept in machine
        files but the planner reads only the figures."""
        if not isinstance(name, str) or not name:
            raise DeviceGraphError(f"device name must be a non-empty string, got {name!r}")
        if kind is not None and (not isinstance(kind, str) or not kind):
            raise DeviceGraphError(f"device {name!r}: kind must be a non-empty string or None, got {kind!r}")
        if name in self._by_name:
            raise DeviceGraphError(f"a device named {name!r} already exists")
        _check_count(len(self.devices) + 1, f"adding device {name!r}")
        f = _positive(flops, f"device {name!r} flops")
        m = _positive(memory, f"device {name!r} memory")
        bw = _positive(mem_bandwidth, f"device {name!r} mem_bandwidth") if mem_bandwidth is not None else f * 0.08
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)) or node < 0:
            raise DeviceGraphError(f"device {name!r}: node must be a non-negative int, got {node!r}")
        preset = DEVICE_PRESETS.get(kind) if kind is not None else None
        if host_bandwidth is None:
            host_bandwidth = preset.host_bandwidth if preset is not None else PCIE3_X16
        hb = _positive(host_bandwidth, f"device {name!r} host_bandwidth")
        if flops_bf16 is None and preset is not None:
            flops_bf16 = preset.flops_bf16
        if flops_fp16 is None and preset is not None:
            flops_fp16 = preset.flops_fp16
        bf16 = None if flops_bf16 is None else _positive(flops_bf16, f"device {name!r} flops_bf16")
        fp16 = None if flops_fp16 is None else _positive(flops_fp16, f"device {name!r} flops_fp16")
        dev = Device(len(self.devices), name, f, m, bw, int(node), kind, hb, bf16, fp16)
        self._drop_structure()
        self.devices.append(dev)
        self._by_name[name] = dev.index
        self._routes = None
        self.__dict__.pop("_sim_machine", None)   # the simulator's resource table
        self.__dict__.pop("_link_arrays", None)   # the links as arrays, for the route searches
        return dev

    def _index(self, d: Device | str | int) -> int:
        if isinstance(d, Device):
            if d.index >= len(self.devices) or self.devices[d.index] is not d:
                raise DeviceGraphError(f"{d!r} does not belong to device graph {self.name!r}")
            return d.index
        if isinstance(d, str):
            if d not in self._by_name:
                raise DeviceGraphError(f"no device named {d!r} in device graph {self.name!r}")
            return self._by_name[d]
        if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and 0 <= d < len(self.devices):
            return int(d)
        raise DeviceGraphError(f"unknown device {d!r}")

    def add_link(self, a: Device | str | int, b: Device | str | int, bandwidth: float,
                 bidirectional: bool = True) -> None:
        """Connect two devices; ``bandwidth`` in bytes/s (per direction)."""
        i, j = self._index(a), self._index(b)
        if i == j:
            raise DeviceGraphError(f"a link needs two different devices, got {self.devices[i].name!r} twice")
        bw = _positive(bandwidth, f"bandwidth of link {self.devices[i].name}-{self.devices[j].name}")
        self._drop_structure()
        self._link_dict[(i, j)] = bw
        if bidirectional:
            self._link_dict[(j, i)] = bw
        self._routes = None
        self.__dict__.pop("_sim_machine", None)   # the simulator's resource table
        self.__dict__.pop("_link_arrays", None)   # the links as arrays, for the route searches

    @property
    def _links(self) -> dict[tuple[int, int], float]:
        """Every directed link; a preset's are listed here on first use (D * (D - 1) entries)."""
        if self._uniform is not None and not self._link_dict:
            u, n = self._uniform, len(self.devices)
            self._link_dict = {(i, j): u.bandwidth(i, j) for i in range(n) for j in range(n) if i != j}
        return self._link_dict

    def _drop_structure(self) -> None:
        """A preset changed by hand is an ordinary device graph from then on."""
        if self._uniform is not None:
            self._links  # noqa: B018  (lists the preset's links before they stop being implied)
            self._uniform = None

    # ----- presets -------------------------------------------------------------
    @classmethod
    def cluster(cls, nodes: int = 1, devices_per_node: int = 4, device: str = "P100",
                intra_bandwidth: float | None = None, inter_bandwidth: float | None = None) -> "DeviceGraph":
        """``nodes`` machines of ``devices_per_node`` devices: all-to-all links inside a node
        (NVLink for P100/V100, PCIe for K80, NVLink through NVSwitch for A100, H100 and H200)
        and ``inter_bandwidth`` between any two devices of different nodes.  The network is the
        preset's: for P100, K80 and V100 100 Gb/s InfiniBand through one adapter per node, which
        the simulator shares among the node's devices; for A100, H100 and H200 400 Gb/s
        InfiniBand through one adapter per device.  ``device`` names a preset
        (``DEVICE_PRESETS``: ``"P100"``, ``"K80"``, ``"V100"``, ``"A100"`` (80 GB),
        ``"A100-40GB"``, ``"A100-80GB"``, ``"H100"`` (SXM, 80 GB), ``"H200"``, ``"cpu"``)."""
        if not isinstance(device, str) or device not in DEVICE_PRESETS:
            raise DeviceGraphError(f"unknown device preset {device!r}; known: {sorted(DEVICE_PRESETS)}")
        for value, what in ((nodes, "nodes"), (devices_per_node, "devices_per_node")):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise DeviceGraphError(f"{what} must be a positive int, got {value!r}")
        _check_count(nodes * devices_per_node, f"cluster(nodes={nodes}, devices_per_node={devices_per_node})")
        spec = DEVICE_PRESETS[device]
        intra = spec.intra_bandwidth if intra_bandwidth is None else _positive(intra_bandwidth, "intra_bandwidth")
        inter = spec.network_bandwidth if inter_bandwidth is None else _positive(inter_bandwidth, "inter_bandwidth")
        g = cls(f"{nodes}x{devices_per_node} {device}")
        for n in range(nodes):
            for k in range(devices_per_node):
                g.add_device(f"n{n}.{device.lower()}-{k}", spec.flops, spec.memory, spec.mem_bandwidth, node=n,
                             kind=device)
        g._uniform = _Uniform(devices_per_node, intra, inter)   # links: all-to-all, implied
        # traffic between nodes goes through network adapters, which the simulator queues it on
        # (send side at the source, receive side at the destination): one per device, or one
        # per node shared by all of its devices
        g.nic_per_device = nodes > 1 and spec.nic_per_device
        g.shared_nics = nodes > 1 and not spec.nic_per_device
        return g

    @classmethod
    def cpu(cls, workers: int = 2) -> "DeviceGraph":
        """``workers`` CPU workers on this machine, each with its own memory (nominal figures)."""
        if isinstance(workers, bool) or not isinstance(workers, int) or workers <= 0:
            raise DeviceGraphError(f"workers must be a positive int, got {workers!r}")
        _check_count(workers, f"cpu({workers})")
        spec = DEVICE_PRESETS["cpu"]
        g = cls(f"cpu x{workers}")
        # the workers share this machine's cores: the simulator queues worker d on core d % cores
        g.shared_cores = min(workers, os.cpu_count() or 1)
        for k in range(workers):
            g.add_device(f"cpu{k}", spec.flops, spec.memory, spec.mem_bandwidth, kind="cpu")
        g._uniform = _Uniform(workers, spec.intra_bandwidth, spec.intra_bandwidth)   # one node, all-to-all
        return g

    @classmethod
    def local_gpus(cls, logical: int | None = None) -> "DeviceGraph":
        """This machine's GPUs as ``logical`` devices (default: one per GPU), several sharing a
        GPU when there are more devices than GPUs; their FLOP/s, memory and memory bandwidth
        come from the driver (divided among the devices sharing a GPU), links between GPUs are
        nominal.  ``gpu_of`` lists each device's GPU, which ``sw.Trainer(..., backend="cuda")``
        follows.  Raises BackendUnavailableError naming what is missing where no GPU can be
        used (the CUDA backend not built, its libraries, the driver, a GPU)."""
        from shardwise.machine.cuda import local_gpus

        return local_gpus(logical)

    @classmethod
    def parse(cls, text: str, device: str = "P100") -> "DeviceGraph":
        """``"16"`` (one node) or ``"4x4"`` (nodes x devices per node), as the CLI takes them."""
        text = str(text).strip().lower()
        try:
            if "x" in text:
                nodes, per = (int(p) for p in text.lower().split("x"))
            else:
                nodes, per = 1, int(text)
        except ValueError:
            raise DeviceGraphError(f"cannot read device count {text!r}: use N or NODESxDEVICES") from None
        if device == "cpu":
            if nodes != 1:
                raise DeviceGraphError("cpu workers live on one machine: use a plain count")
            return cls.cpu(per)
        return cls.cluster(nodes=nodes, devices_per_node=per, device=device)

    # ----- machine files ---------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Write this machine as a JSON machine file, atomically (a temporary file, then
        ``os.replace``); the schema is in docs/machines.md (:mod:`shardwise.machine.machine_file`)."""
        from shardwise.machine.machine_file import save_machine

        save_machine(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "DeviceGraph":
        """Read a machine file written by :meth:`save` or by hand (docs/machines.md).  A
        malformed file raises DeviceGraphError naming the file, the field and the problem;
        the loaded machine has the saved one's fingerprint, so its plan files still load."""
        from shardwise.machine.machine_file import load_machine

        return load_machine(path)

    def to_dict(self) -> dict[str, Any]:
        """The machine file's JSON object (docs/machines.md)."""
        from shardwise.machine.machine_file import machine_to_dict

        return machine_to_dict(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "machine") -> "DeviceGraph":
        """A device graph from a machine file's JSON object, validated (``where`` prefixes errors)."""
        from shardwise.machine.machine_file import machine_from_dict

        return machine_from_dict(data, where)

    # ----- queries -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, d: str | int) -> Device:
        return self.devices[self._index(d)]

    @property
    def links(self) -> dict[tuple[int, int], float]:
        return dict(self._links)

    def route_bandwidths(self) -> np.ndarray:
        """(D, D) bandwidth of the widest route between every ordered pair of devices.

        Presets: from each device's node.  Links that all run both ways at one bandwidth:
        merging devices along the fastest links first (Kruskal), where two groups first meet
        is their widest route.  Otherwise one widest-path search from every device in the C
        core (D searches of O(L log L) for L links).
        Raises DeviceGraphError naming two devices with no route between them."""
        if self._routes is not None:
            return self._routes
        n = len(self.devices)
        if n == 0:
            raise DeviceGraphError(f"device graph {self.name!r} has no devices")
        if self._uniform is not None:
            u = self._uniform
            node = np.arange(n) // u.per
            # inside a node: the link, or two hops through another node when that is wider
            within = u.intra if u.direct_is_widest(n) else u.inter
            bw = np.where(node[:, None] == node[None, :], within, u.inter)
        elif all(self._link_dict.get((j, i)) == b for (i, j), b in self._link_dict.items()):
            bw = _widest_symmetric(n, self._link_dict)
        else:
            src, dst, link_bw = self._link_table()
            bw = _core.widest_bandwidths(n, src, dst, link_bw, np.arange(n, dtype=np.int32))
        np.fill_diagonal(bw, np.inf)
        missing = np.argwhere(bw <= 0)
        if len(missing):
            i, j = missing[0]
            raise DeviceGraphError(f"no route from device {self.devices[i].name!r} to {self.devices[j].name!r}")
        self._routes = bw
        return bw

    def route(self, a: Device | str | int, b: Device | str | int) -> list[tuple[int, int]]:
        """The links (u, v) of the widest route from device ``a`` to ``b``: among the widest,
        one of the fewest links, and among those the one whose devices, read from ``a``, come
        first in number order; its bandwidth is :meth:`route_bandwidths`'s.  The simulator
        queues a transfer on every link of its route, so routes that share a link contend."""
        a, b = self._index(a), self._index(b)
        self.route_bandwidths()  # raises if some pair has no route
        if a == b:
            return []
        if self._uniform is not None and self._uniform.direct_is_widest(len(self.devices)):
            return [(a, b)]   # every pair is linked and no detour is wider
        src, dst, _ = self._link_table()
        _, links = self._widest_routes(np.array([a]), np.array([b]))
        return [(int(src[k]), int(dst[k])) for k in links]

    def _link_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every directed link as arrays (source, destination: int32; bandwidth: float64) sorted by
        source, then destination: a link's position is its number in the C route searches and
        the simulator's resource table (kept until a device or link is added)."""
        table = self.__dict__.get("_link_arrays")
        if table is None:
            items = sorted(self._links.items())
            ends = np.array([pair for pair, _ in items], np.int32).reshape(-1, 2)
            table = (np.ascontiguousarray(ends[:, 0]), np.ascontiguousarray(ends[:, 1]),
                     np.array([b for _, b in items], np.float64))
            self.__dict__["_link_arrays"] = table
        return table

    def _widest_routes(self, pair_src: np.ndarray, pair_dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The routes (:meth:`route`'s rule) of the pairs pair_src[i] -> pair_dst[i], searched in
        the C core for these pairs only: (ptr int64 (P + 1,), links int32), pair i's route being
        the link numbers (:meth:`_link_table`) links[ptr[i]:ptr[i + 1]], first hop first.
        Raises DeviceGraphError naming the first pair with no route."""
        src, dst, bw = self._link_table()
        pair_src = np.asarray(pair_src, np.int32)
        pair_dst = np.asarray(pair_dst, np.int32)
        ptr, links, width = _core.widest_routes(len(self.devices), src, dst, bw, pair_src, pair_dst)
        missing = np.flatnonzero(width <= 0)
        if len(missing):
            i = missing[0]
            raise DeviceGraphError(f"no route from device {self.devices[pair_src[i]].name!r} to "
                                   f"{self.devices[pair_dst[i]].name!r}")
        return ptr, links

    def fingerprint(self) -> str:
        """A hash of devices and links, stamped into plan files: the SHA-256 of
        ``json.dumps({"devices": [...], "links": sorted([i, j, bandwidth], ...)})``, fed in
        pieces so that a preset's links are never listed."""
        h = hashlib.sha256()
        devices = [[d.name, d.flops, d.memory, d.mem_bandwidth, d.node] for d in self.devices]
        h.update(('{"devices": ' + json.dumps(devices) + ', "links": [').encode())
        if self._uniform is not None and not self._link_dict:
            u, n, first = self._uniform, len(self.devices), True
            text = {u.intra: json.dumps(u.intra), u.inter: json.dumps(u.inter)}
            for i in range(n):   # rows in sorted order: by source, then destination
                rows = ", ".join(f"[{i}, {j}, {text[u.bandwidth(i, j)]}]" for j in range(n) if j != i)
                if rows:
                    h.update(((", " if not first else "") + rows).encode())
                    first = False
        else:
            h.update(", ".join(json.dumps([i, j, b]) for i, j, b in
                               sorted([i, j, b] for (i, j), b in self._links.items())).encode())
        h.update(b"]}")
        return h.hexdigest()[:16]

    def summary(self) -> str:
        nodes = len({d.node for d in self.devices})
        n = len(self.devices)
        links = n * (n - 1) if self._uniform is not None and not self._link_dict else len(self._link_dict)
        return (f"DeviceGraph {self.name!r}: {n} devices on {nodes} node(s), {links} directed links")

    def __repr__(self) -> str:
        return f"DeviceGraph({self.name!r}, {len(self.devices)} devices)"


def _widest_symmetric(n: int, links: dict[tuple[int, int], float]) -> np.ndarray:
    """Widest-route bandwidths when every link runs both ways at one bandwidth: join groups of
    devices along links from the fastest down (Kruskal); two groups first meet at the bandwidth
    of their widest route.  O(L log L + D^2), every entry written once.  A group's members are
    an array (joining copies the larger one, O(D^2) in all, but never converts D^2 Python ints:
    a chain of 4,096 devices took 1.5 s doing so)."""
    bw = np.zeros((n, n))
    members = [np.array([i]) for i in range(n)]
    group = np.arange(n)
    for (i, j), b in sorted(links.items(), key=lambda item: -item[1]):
        gi, gj = group[i], group[j]
        if gi == gj:
            continue
        if len(members[gi]) < len(members[gj]):
            gi, gj = gj, gi
        a, c = members[gi], members[gj]
        bw[np.ix_(a, c)] = b
        bw[np.ix_(c, a)] = b
        group[c] = gi
        members[gi] = np.concatenate([a, c])
        members[gj] = a[:0]
    return bw


def executor_threads(devices: int, shared_cores: int | None) -> int:
    """Threads a step runs on: one per device, at most ``shared_cores`` (thread c runs the
    devices c, c + threads, ... in program order).  Four workers on two cores as four
    threads only made the operating system interleave them."""
    return max(1, min(devices, shared_cores or devices))
