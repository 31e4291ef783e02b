"""The tournament as one picture: a row per cell, a column per policy, colour = SLO
attainment (red 0% to green 100%), the value written in each square, the best fixed policy of
each row outlined. Adaptive policies' columns are named in italics."""
from __future__ import annotations

from collections.abc import Sequence

from switchyard_bench.tournament.report import CellVerdict


def write_heatmap(path: str, rows: Sequence[CellVerdict], policies: Sequence[str],
                  title: str) -> str:
    try:
        import matplotlib
    except ImportError as err:  # serving images leave the plotting extra out
        raise SystemExit("PNG output needs matplotlib: pip install 'switchyard[plot]'") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    values = np.array([[np.nan if r.attainment[p] is None else r.attainment[p]
                        for p in policies] for r in rows], dtype=float)
    height = 2.0 + 0.24 * len(rows)
    fig, ax = plt.subplots(figsize=(max(8.0, 4.6 + 1.05 * len(policies)), height))
    image = ax.imshow(values, cmap="RdYlGn", vmin=0.0, vmax=100.0, aspect="auto")
    ax.set_xticks(range(len(policies)))
    ax.set_xticklabels(policies, rotation=30, ha="right", fontsize=8)
    adaptive = {p for r in rows for p in r.regret}
    for label in ax.get_xticklabels():
        if label.get_text() in adaptive:
            label.set_fontstyle("italic")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r.cell.label} ({r.rate:.3g}/s)" for r in rows], fontsize=7)
    for i, r in enumerate(rows):
        for j, p in enumerate(policies):
            value = r.attainment[p]
            ax.text(j, i, "-" if value is None else f"{value:.0f}", ha="center", va="center",
                    fontsize=6)
            if p in r.best_fixed:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black",
                                       linewidth=1.4))
    fig.colorbar(image, ax=ax, label="SLO attainment (%)", fraction=0.04, pad=0.02)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
