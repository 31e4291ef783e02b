"""Policies written as a user writes them, for benchmarks and tests of the policy runtime."""
