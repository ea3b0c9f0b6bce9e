"""Shared test setup: hypothesis profiles and the tests folder on sys.path.

Profiles (choose with HYPOTHESIS_PROFILE=...):
  default  the normal run: no per-example deadline (the C core's first call
           builds tables, and CI machines have 2 cores), fixed example counts
           set by each test
  thorough 10x the examples of every hypothesis test (see strategies_random.examples),
           for a long local run
"""
from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # `import strategies_random`

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
