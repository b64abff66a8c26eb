"""Pictures of the project's runs, drawn with matplotlib (the ``plot`` extra).

One module per picture: :mod:`.race` (the race timeline of ``race
--plot``), :mod:`.orders` (the orders benchmark's charts), :mod:`.production`
(the production shape and the production-shaped test's timeline). matplotlib
is imported only when a picture is drawn (:func:`pyplot`), with its
screen-less Agg backend; without it :class:`PlotExtraMissing` names the
extra to install. The format of a file follows its extension
(:func:`image_format`).
"""

from __future__ import annotations

import os
from typing import Any

#: What a missing ``plot`` extra's message tells to run.
INSTALL_HINT = "pip install 'openprocurement_feed[plot]'"
#: The picture formats, by file extension.
FORMATS = {".svg": "svg", ".png": "png"}


class PlotExtraMissing(RuntimeError):
    """matplotlib cannot be imported: the ``plot`` extra is not installed."""

    def __init__(self, reason: str = "") -> None:
        detail = f" ({reason})" if reason else ""
        super().__init__(f"drawing needs the 'plot' extra (matplotlib){detail}: {INSTALL_HINT}")


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend; :class:`PlotExtraMissing`
    when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError as error:
        raise PlotExtraMissing(str(error)) from None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "openprocurement_feed"  # stable ids in the SVG
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: smaller, searchable, readable by tests
    import matplotlib.pyplot as plt

    return plt


def image_format(path: str) -> str:
    """``svg`` or ``png`` from ``path``'s extension; :class:`ValueError`
    with a message that names the accepted ones otherwise."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in FORMATS:
        accepted = " or ".join(FORMATS)
        raise ValueError(f"{path!r}: the picture's file name must end in {accepted}")
    return FORMATS[extension]


def save(figure: Any, path: str) -> str:
    """Write ``figure`` to ``path`` in the format of its extension (SVG
    without a date, so that a regenerated figure differs only where the
    run did) and close it; returns ``path``."""
    kind = image_format(path)
    metadata = {"Date": None} if kind == "svg" else {}
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    figure.savefig(path, format=kind, metadata=metadata, bbox_inches="tight", dpi=110)
    pyplot().close(figure)
    return path
