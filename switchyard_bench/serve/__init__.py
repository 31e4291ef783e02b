"""`switchyard bench serve`: open-loop load, policy x rate sweeps, per-request records and
summaries against a running router (see docs/benchmarking.md)."""
