"""`switchyard bench soak`: mixed traffic and random engine kills against `switchyard serve` for N
minutes; reports requests lost silently (target 0), errors by type and KV pages leaked (target 0).
Not part of `make test` (docs/reliability.md has a report)."""
