"""The device sets the search places an op's workers on.

On a machine of interchangeable devices (the ``cpu`` and ``cluster`` presets: identical
devices in uniform nodes) the aligned contiguous blocks ``[j k, (j + 1) k)`` for every worker
count ``k`` cover the space: any other set of k devices is a relabelling of one of them.  On
a machine whose devices differ (kinds, nodes, link speeds) other groups are distinct, and a
plan on one of them can beat every plan on aligned blocks.  :func:`device_sets` adds the
groups that the machine's structure makes distinct:

* each node (devices with the same ``node``);
* each device kind (same FLOP/s, memory bandwidth and memory), and each kind within a node;
* each group of devices linked at a speed or faster: for every bandwidth of the machine, the
  classes of devices whose routes run at least that fast (widest routes make this an
  equivalence: a route from a to c is at least as fast as the slower of a-b and b-c);

and, inside every group, its aligned blocks of each worker count; also the k fastest devices
and each kind within each link-speed class.  Devices within a set are in index order, and on
such machines each set comes a second time with its best-connected device first (the first
worker of a replicated weight hosts its parameter server).  Sets are listed once, the aligned
blocks of the whole machine first.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from shardwise.machine.devices import DeviceGraph

Group = tuple[int, ...]


def _classes(keys: Sequence[object]) -> list[Group]:
    """Indices grouped by equal key, each group in index order, groups by first index."""
    groups: dict[object, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    return [tuple(g) for g in groups.values()]


def _link_classes(devices: DeviceGraph) -> list[Group]:
    """For every route bandwidth of the machine, the classes of devices whose routes to each
    other are at least that fast.  Widest-route bandwidths make "at least that fast" an
    equivalence, so a device's class is the row of devices it reaches that fast."""
    bw = devices.route_bandwidths()
    n = len(devices)
    off = bw[~np.eye(n, dtype=bool)]
    out: list[Group] = []
    # sorted(set()) rather than np.unique: NumPy 2.x imports numpy.ma on a process's first
    # np.unique (about 20 ms, a third of a first small search)
    for level in sorted(set(off[np.isfinite(off)].tolist())):
        fast = bw >= level
        np.fill_diagonal(fast, True)
        done = np.zeros(n, dtype=bool)
        for a in range(n):
            if not done[a]:
                members = np.flatnonzero(fast[a])
                done[members] = True
                out.append(tuple(int(i) for i in members))
    return out


def structure_groups(devices: DeviceGraph) -> list[Group]:
    """The groups of devices the machine's structure makes distinct (the whole machine first)."""
    n = len(devices)
    nodes = [d.node for d in devices.devices]
    kinds = [(d.flops, d.mem_bandwidth, d.memory, d.flops_bf16, d.flops_fp16) for d in devices.devices]
    groups = [tuple(range(n))]
    kind_classes = _classes(kinds)
    groups += _classes(nodes) + kind_classes + _classes(list(zip(nodes, kinds)))
    by_speed = sorted(range(n), key=lambda i: (-devices.devices[i].flops, i))
    if len({d.flops for d in devices.devices}) > 1:   # the k fastest devices
        groups += [tuple(sorted(by_speed[:k])) for k in range(2, n)]
    if n > 1:
        links = _link_classes(devices)
        groups += links
        for c in links:   # each kind within each link class
            groups += [g for g in (tuple(i for i in c if i in set(k)) for k in kind_classes) if len(g) > 1]
    return groups


def _hub_first(devices: DeviceGraph, bw: np.ndarray, s: Group) -> Group:
    """The set with its best-connected device first (the most route bandwidth to the rest of
    the set; ties: the lowest index), the others in index order.  The first worker of a
    replicated weight hosts its parameter server, so a set's order matters."""
    if len(s) < 2:
        return s
    idx = np.asarray(s)
    inner = bw[np.ix_(idx, idx)].copy()
    np.fill_diagonal(inner, 0.0)
    hub = s[int(np.argmax(inner.sum(axis=1)))]
    return (hub,) + tuple(i for i in s if i != hub)


def device_sets(devices: DeviceGraph, counts: Sequence[int]) -> list[Group]:
    """Every set an op's workers may occupy: within each structure group (the whole machine
    first), its aligned blocks of every worker count in ``counts`` that fits, and the group
    itself; on a machine of differing devices each of those also with its best-connected
    device first; each set once."""
    seen: set[Group] = set()
    out: list[Group] = []

    def add(s: Group) -> None:
        if s not in seen:
            seen.add(s)
            out.append(s)

    groups = structure_groups(devices)
    plain: list[Group] = []
    for g in groups:
        for k in sorted(counts):
            for j in range(len(g) // k):
                plain.append(g[j * k:(j + 1) * k])
        plain.append(g)
    for s in plain:
        add(s)
    if len(out) > len(aligned_blocks(len(devices), counts)):   # not interchangeable devices
        bw = devices.route_bandwidths()
        bw = np.where(np.isfinite(bw), bw, 0.0)
        for s in plain:
            add(_hub_first(devices, bw, s))
    return out


def aligned_blocks(ndev: int, counts: Sequence[int]) -> list[Group]:
    """The aligned contiguous blocks ``[j k, (j + 1) k)`` of every count (the default space)."""
    return [tuple(range(j * k, (j + 1) * k)) for k in sorted(counts) for j in range(ndev // k)]
