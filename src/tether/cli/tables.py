"""Tables that fit the terminal: no cell is cut, key columns stay whole, less important ones are left out.

A narrow terminal (80 columns) used to cut labels, ids and tool names to a few characters. Now every
column is measured first; when the table does not fit, the optional columns are left out in the order
their `drop` rank says until every word of what remains fits, and a footer line names what was left
out and how to see it (`--wide`, a wider terminal or `COLUMNS=N`; `--json` has every field). Text still wraps at spaces
(a `<= 0.008263` cost may take two lines); a word is never cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

UNBOUNDED = 100_000
"""A width no table reaches: what a table is measured against to learn the room it needs."""
WideOpt = Annotated[
    bool, typer.Option("--wide", help="Show every column however narrow the terminal (lines may wrap).")
]


@dataclass(frozen=True)
class Column:
    """A table column; `drop` ranks an optional column (1 is left out first), 0 means it is always shown."""

    header: str
    drop: int = 0
    justify: Literal["left", "right"] = "left"


@dataclass(frozen=True)
class Fitted:
    """The table to print, the headers of the columns left out to make it fit, and whether `--wide` asked for all."""

    table: Table
    left_out: tuple[str, ...]
    wide: bool = False


def _build(columns: Sequence[Column], rows: Sequence[Sequence[str]], keep: Sequence[int], title: str | None) -> Table:
    table = Table(title=title)
    for i in keep:
        column = columns[i]
        widest_word = max((_longest_word(row[i]) for row in rows), default=0)
        # overflow="fold": even a word wider than the terminal is broken across lines, never cut with an ellipsis
        table.add_column(column.header, justify=column.justify, overflow="fold", min_width=widest_word or None)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def _longest_word(markup: str) -> int:
    return max((len(word) for word in Text.from_markup(markup).plain.split()), default=0)


def fit(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]], *, title: str | None = None,
        wide: bool = False) -> Fitted:
    """The table over `rows` (rich markup cells) that fits `console.width`, and what was left out."""
    keep = list(range(len(columns)))
    table = _build(columns, rows, keep, title)
    if wide:
        return Fitted(table, (), wide=True)
    optional = sorted((c.drop, i) for i, c in enumerate(columns) if c.drop)
    left_out: list[str] = []
    for _, i in optional:
        if _natural(console, table).minimum <= console.width:
            break
        keep.remove(i)
        left_out.append(columns[i].header)
        table = _build(columns, rows, keep, title)
    return Fitted(table, tuple(left_out))


def _natural(console: Console, table: Table) -> Measurement:
    """The table's widths with no terminal to fit (a console's own measure never exceeds its width)."""
    return console.measure(table, options=console.options.update_width(UNBOUNDED))


def print_fitted(console: Console, fitted: Fitted) -> None:
    """Print the table, then (when columns were left out) one line saying which and how to see them.

    `--wide` prints at the table's natural width, so no cell folds; the terminal wraps what is wider.
    """
    if fitted.wide:
        console.width = max(console.width, _natural(console, fitted.table).maximum)
    console.print(fitted.table)
    if fitted.left_out:
        console.print(f"[dim]left out {', '.join(fitted.left_out)} to fit {console.width} columns: add --wide for "
                      f"every column (or widen the terminal, or set COLUMNS=N)[/dim]")
