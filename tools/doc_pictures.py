"""Draw the pictures docs/ shows (docs/pictures/*.png) from the library as it is:

    python tools/doc_pictures.py

The strategy picture of Inception-v3's searched plan on 4 P100s and the simulated timeline of
that plan (critical-path schedule), both as users get them from plan.plot() and
sim.plot_timeline()."""
from __future__ import annotations

import os
import time

import shardwise as sw

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "pictures")


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    g = sw.models.get("inception_v3", batch=32)
    plan = sw.search(g, sw.DeviceGraph.cluster(1, 4), progress=False)
    t = time.perf_counter()
    plan.plot(os.path.join(OUT, "inception_v3_plan.png"))
    print(f"plan.plot: {time.perf_counter() - t:.2f} s")
    sim = sw.simulate(plan, schedule=sw.schedule(plan))
    t = time.perf_counter()
    sim.plot_timeline(os.path.join(OUT, "inception_v3_timeline.png"))
    print(f"plot_timeline: {time.perf_counter() - t:.2f} s ({len(sim.events)} tasks)")


if __name__ == "__main__":
    main()
