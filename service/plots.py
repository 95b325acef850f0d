"""PNG histograms of random-pair cosines, drawn from the binned counts stored with each index."""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure  # object API: thread-safe, no GUI backend


def histogram_png(histograms: list[dict], small: bool = False) -> bytes:
    fig = Figure(figsize=(3.2, 1.6) if small else (7, 3.6))
    ax = fig.subplots()
    for h in histograms:
        counts = np.asarray(h["counts"], dtype=float)
        density = counts / max(counts.sum(), 1.0) / np.diff(h["edges"])
        # An index's name is a folder's name: "$" escaped, or matplotlib reads "v$\\frac$" as (broken) mathtext.
        ax.stairs(density, h["edges"], label=h["name"].replace("$", r"\$"), lw=1.5)
    ax.set_xlim(-1, 1)
    if small:
        ax.set_yticks([])
        ax.tick_params(labelsize=7)
    else:
        ax.set(xlabel="cosine of random document pairs", ylabel="density", title="Where unrelated pairs score")
        ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
