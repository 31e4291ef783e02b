"""Benchmark runners: `switchyard bench router` (router overhead) and `bench router-core`."""
