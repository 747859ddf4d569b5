"""Where a long command's progress goes: one line redrawn in place on a terminal, a line per update otherwise.

``ProgressOutput(stream)`` is a context manager. ``update(line)`` replaces the progress line: on a
terminal (``stream.isatty()``) it is one line that rich redraws in place (``rich.live.Live``, the last
state left on screen when the block ends); anywhere else (a pipe, a file, a CI log) each update is
printed as its own line, flushed, so that a log keeps the whole history and a script can read it.
``note(line)`` prints a line that stays in both modes (above the live line on a terminal).

Lines are printed as plain text, never as rich markup (topic names may contain brackets).
"""

from __future__ import annotations

from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text


class ProgressOutput:
    def __init__(self, stream: TextIO, *, terminal: bool | None = None) -> None:
        self.stream = stream
        self.terminal = _is_terminal(stream) if terminal is None else terminal
        self._console = Console(file=stream, force_terminal=self.terminal, highlight=False) if self.terminal else None
        self._live: Live | None = None

    def __enter__(self) -> ProgressOutput:
        if self._console is not None:
            # Other prints while it runs (errors on stderr) go above the line instead of through it.
            self._live = Live(Text(""), console=self._console, auto_refresh=False, transient=False)
            self._live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def update(self, line: str) -> None:
        if self._live is not None:
            self._live.update(Text(line), refresh=True)
        else:
            print(line, file=self.stream, flush=True)

    def note(self, line: str) -> None:
        if self._live is not None and self._console is not None:
            self._console.print(Text(line))
        else:
            print(line, file=self.stream, flush=True)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        return False
