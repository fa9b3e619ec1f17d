"""Legends beside the data, never on it: every picture's legend sits right of its axes, or
below them (:func:`legend_outside`), so no dot, bar or band is hidden behind it.
``fig.tight_layout()`` (``client.render.figures.save_figure``) makes room for it."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.legend import Legend

__all__ = ["legend_outside"]


def legend_outside(ax: Axes, fontsize: float = 9, *, below: bool = False,
                   wrap: int | None = None) -> Legend | None:
    """The legend of ``ax`` right of its axes, top-aligned, or ``below`` them (under the x
    label), each label on lines of at most ``wrap`` characters; None when nothing is
    labelled."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    if wrap:
        labels = ["\n".join(textwrap.wrap(label, wrap)) or label for label in labels]
    if below:
        # right-aligned with the axes: a wide legend grows to the left, into the figure,
        # never past its right edge
        return ax.legend(handles, labels, loc="upper right", bbox_to_anchor=(1.0, -0.1),
                         borderaxespad=0.0, fontsize=fontsize, frameon=False)
    return ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                     borderaxespad=0.0, fontsize=fontsize, frameon=False)
