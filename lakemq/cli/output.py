"""Tables on the command line that never cut a value short.

An id cut to ``7F00…`` cannot be copied, and rich shrinks a table to its width (the terminal's,
or ``$COLUMNS`` / 80 in a pipe) by cutting cells. So a table is printed only when that width
holds every cell whole (free text such as a body preview may wrap between words, never an id);
otherwise each row is printed as one ``column: value`` line per field, a blank line between
rows. Control characters in values are escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from lakemq.common.logs import escape_control

__all__ = ["print_rows"]

_UNBOUNDED = 1 << 20


def print_rows(headers: Sequence[str], rows: Sequence[Sequence[str]], *, wrap: Sequence[str] = (),
               console: Console | None = None) -> None:
    """Print ``rows`` under ``headers``; only the columns named in ``wrap`` may wrap."""
    out = console or Console()
    table = Table(*headers)
    cells = [[escape_control(cell) for cell in row] for row in rows]
    for i, column in enumerate(table.columns):
        if column.header not in wrap:
            # A cell that may not wrap needs its whole width: rich measures a cell's minimum
            # as its longest word, so "[65536, 131072)" would otherwise be cut to fit.
            column.no_wrap = True
            column.min_width = max(cell_len(str(column.header)), *(cell_len(row[i]) for row in cells))
    for row in cells:
        table.add_row(*row)
    if Measurement.get(out, out.options.update_width(_UNBOUNDED), table).minimum <= out.width:
        out.print(table)
        return
    label_width = max(len(h) for h in headers)
    for i, row in enumerate(cells):
        if i:
            out.out("")
        for header, cell in zip(headers, row):
            # soft wrap: a long value runs on past the edge instead of being broken or cut
            out.print(f"{header:>{label_width}}: {cell}", markup=False, highlight=False, soft_wrap=True)
