"""Benchmarks: `switchyard bench engine` (engine_bench) and `switchyard bench transfer`."""
