"""Comma-separated command-line lists the bench commands share (serve, simulate, tournament)."""
from __future__ import annotations

import argparse


def name_list(text: str) -> list[str]:
    """`a,b,c` -> ["a", "b", "c"], blanks dropped; an argparse type."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list of names")
    return names


def rate_list(text: str) -> list[float]:
    """`0.5,1,inf` -> requests/s, each > 0 (inf: all at once); an argparse type."""
    try:
        rates = [float(r) for r in text.split(",") if r.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected rates like 0.5,1,inf: {exc}") from exc
    if not rates or any(not r > 0 for r in rates):
        raise argparse.ArgumentTypeError("rates must be > 0 (inf = all at once)")
    return rates
