"""Progress bars that suit where the output goes (`runner.progress_bar`).

`true`: a tqdm bar updated in place with carriage returns; `false`: none; `auto` (the default): the bar when
stderr is a terminal, else (a pipe, a redirected file, a cluster job's log) a plain line every `LOG_INTERVAL_S`
seconds and one when the bar closes, so that a log holds readable lines instead of carriage-return updates.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm as plain_tqdm
from tqdm.auto import tqdm

#: Seconds between two lines of a bar written to a log (`auto` without a terminal).
LOG_INTERVAL_S = 5.0


def log_lines(mode: bool | str, stream: TextIO | None = None) -> bool:
    """Whether bars of `mode` are written as plain lines: `auto` without a terminal on `stream` (stderr)."""
    if mode != "auto":
        return False
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return not (callable(isatty) and isatty())


class LineWriter:
    """A text stream for tqdm that turns its carriage-return updates into whole lines: every non-blank piece
    between two carriage returns or newlines is written as one line (trailing padding removed)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        lines = [part.rstrip() for chunk in text.split("\n") for part in chunk.split("\r")]
        out = "".join(f"{line}\n" for line in lines if line.strip())
        if out:
            self.stream.write(out)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


class LogLineBar(plain_tqdm):
    """A tqdm bar for a log: its postfix and description change without printing a line (the next line, at most
    every `mininterval` seconds, shows them)."""

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        super().set_postfix_str(s, refresh=False)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        super().set_description(desc, refresh=False)


def progress_bar(
    mode: bool | str, *, interval_s: float = LOG_INTERVAL_S, file: TextIO | None = None, **kwargs: Any
) -> Any:
    """A tqdm bar for `runner.progress_bar=mode` (`kwargs`: tqdm's, e.g. `total`, `desc`, `unit`, `initial`).

    In log mode (`auto` without a terminal) the bar is a line (description, count, elapsed time, rate, postfix)
    printed when it opens, at most every `interval_s` seconds while it advances, and when it closes.
    """
    stream = sys.stderr if file is None else file
    if mode is False:
        return tqdm(disable=True, **kwargs)
    if not log_lines(mode, stream):
        return tqdm(file=file, **kwargs)
    kwargs.pop("leave", None)
    return LogLineBar(  # never a notebook widget: the lines go to `stream`
        file=LineWriter(stream),
        mininterval=interval_s,
        miniters=1,
        leave=True,  # a last line with the totals
        position=0,  # no cursor movement between bars open at once
        ascii=True,
        bar_format="{desc}: {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}, {rate_fmt}{postfix}]",
        **kwargs,
    )
