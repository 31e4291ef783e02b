"""Decision arithmetic the seeds' policies share, kept apart from the verbs so it is unit-tested
on its own: latency-constrained chunk sizes, tandem split points, SLO fits."""
