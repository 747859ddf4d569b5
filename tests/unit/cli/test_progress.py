"""Progress output: a line redrawn in place on a terminal, a line per update anywhere else."""

from __future__ import annotations

import io

from tidelog.cli.progress import ProgressOutput


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_pipe_gets_one_plain_line_per_update() -> None:
    out = io.StringIO()
    with ProgressOutput(out) as progress:
        progress.update("0/2 partitions done")
        progress.note("orders-1: INVALID_REPLICA_ASSIGNMENT")
        progress.update("2/2 partitions done [done]")
    assert out.getvalue().splitlines() == [
        "0/2 partitions done", "orders-1: INVALID_REPLICA_ASSIGNMENT", "2/2 partitions done [done]"]


def test_a_terminal_gets_one_line_redrawn_in_place() -> None:
    out = FakeTerminal()
    with ProgressOutput(out) as progress:
        assert progress.terminal
        for done in range(5):
            progress.update(f"{done}/4 partitions done")
    text = out.getvalue()
    assert "\x1b[" in text  # cursor movement and erasing: the same line redrawn
    assert text.count("\n") <= 2, "a line per update on a terminal"
    assert text.split("\r")[-1].endswith("4/4 partitions done\n\x1b[?25h")  # the last state stays on screen


def test_a_note_on_a_terminal_stays_above_the_progress_line() -> None:
    out = FakeTerminal()
    with ProgressOutput(out) as progress:
        progress.update("0/1 partitions done")
        progress.note("orders-0: refused")
        progress.update("1/1 partitions done")
    text = out.getvalue()
    assert text.index("orders-0: refused") < text.rindex("1/1 partitions done")
