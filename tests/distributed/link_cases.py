"""The rank side of tests/distributed/test_link.py: `mpiexec -n N python link_cases.py CASE`.

Each case prints "[case ok: rank R]" when its checks passed on rank R and fails through an
exception otherwise (sw.distributed.init's hook then aborts every rank).  No timing is
compared with anything: the figures only have to be positive and the same on every rank.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np

import shardwise as sw


def link(comm):
    """measure_link: a positive bandwidth and latency, the same on every rank."""
    bandwidth, latency = sw.distributed.measure_link(comm, sizes=(1 << 10, 64 << 10, 1 << 20), repeats=3,
                                                     timeout=30)
    assert np.isfinite(bandwidth) and bandwidth > 0, bandwidth
    assert np.isfinite(latency) and latency > 0, latency
    mine = np.array([bandwidth, latency]).tobytes()
    assert all(x == mine for x in comm.allgather_bytes(mine, timeout=30)), "the ranks got different figures"
    print(f"rank {comm.rank}: rank link {bandwidth / 1e9:.3f} GB/s, {latency * 1e6:.1f} us", flush=True)


def profile(comm):
    """sw.profile(..., comm=comm) on every rank: rank 0 measures, the others get its profile, the
    rank link measured in it, and the cached file holds it too."""
    g = sw.Graph("tiny")
    x = g.input("x", (4, 2, 6, 6))
    x = g.conv2d(x, 4, kernel=3, padding=1, name="c1")
    x = g.linear(g.flatten(x, name="f"), 3, name="fc")
    g.softmax(x, name="prob")
    cache = os.environ["PROFILE_CACHE"]
    prof = sw.profile(g, sw.DeviceGraph.cpu(1), repeats=1, cache_dir=cache, comm=comm)
    assert prof.rank_bandwidth > 0 and prof.rank_latency > 0, (prof.rank_bandwidth, prof.rank_latency)
    assert len(prof) > 0
    digest = hashlib.sha256(json.dumps(prof.to_dict(), sort_keys=True).encode()).digest()
    assert all(x == digest for x in comm.allgather_bytes(digest, timeout=30)), "the ranks got different profiles"
    if comm.rank == 0:
        (name,) = [f for f in os.listdir(cache) if f.startswith("profile-")]
        saved = sw.Profile.load(os.path.join(cache, name), g)
        assert (saved.rank_bandwidth, saved.rank_latency) == (prof.rank_bandwidth, prof.rank_latency)


def main() -> None:
    case = sys.argv[1]
    comm = sw.distributed.init()
    if case == "link":
        link(comm)
    elif case == "profile":
        profile(comm)
    else:
        raise SystemExit(f"unknown case {case}")
    print(f"[case ok: rank {comm.rank}]", flush=True)


if __name__ == "__main__":
    main()
