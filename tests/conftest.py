"""Settings for every test session.

Engine processes that tests start skip the start-up latency profile (about a minute of CPU the
first time on a machine, then cached): most tests need no step-time model, and several engines
profiling at once on a small shared machine would measure each other. Tests of the profile set
SWITCHYARD_LATENCY_PROFILE (or call engine.core.latency_cache) themselves.
"""
from __future__ import annotations

import os

os.environ.setdefault("SWITCHYARD_LATENCY_PROFILE", "off")
