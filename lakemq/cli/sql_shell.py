"""The statements of ``lakemq sql`` without a query: from a script on stdin, or a shell.

Statements end with ``;``, anywhere on a line: several may share a line, and one may span
lines. A ``;`` inside a quoted string ('...', "...", `...`), a ``--`` comment or a ``/* */``
comment ends nothing (:class:`StatementSplitter`).

On a terminal the shell reads lines with GNU readline (Python's ``readline`` module): line
editing, and history kept per user in ``~/.lakemq/sql_history`` (``LAKEMQ_SQL_HISTORY`` names
another file). Ctrl-C clears the line being typed (or stops the running statement), Ctrl-D
ends the shell after running what was typed, and a failed statement is one error line: the
shell carries on and ends with status 0. From a script, the command ends with status 1 when
any statement failed.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from lakemq.errors import LakeMQError

__all__ = ["HISTORY_LENGTH", "StatementSplitter", "history_file", "interactive", "run_script", "run_shell"]

PROMPT, MORE = "lakemq-sql> ", "        ...> "
HISTORY_LENGTH = 1000
_QUIT = frozenset({"quit", "exit"})

RunStatement = Callable[[str], None]  # runs one statement; raises LakeMQError on failure


class StatementSplitter:
    """Text in, complete statements out; what follows the last ``;`` waits for more text.
    The state (inside a string or comment) carries across :meth:`feed` calls."""

    def __init__(self) -> None:
        self._buffer: list[str] = []
        self._quote = ""  # the open quote character, if any
        self._comment = ""  # "--" or "/*" while inside a comment
        self._content = False  # whether the buffer holds more than comments and blanks

    def feed(self, text: str) -> list[str]:
        """The statements ``text`` completes (trimmed, empty ones dropped)."""
        done: list[str] = []
        i, n = 0, len(text)
        while i < n:
            ch, pair = text[i], text[i : i + 2]
            if self._comment == "--":
                self._comment = "" if ch == "\n" else "--"
            elif self._comment == "/*":
                if pair == "*/":
                    self._buffer.append(pair)
                    self._comment, i = "", i + 2
                    continue
            elif self._quote:
                if ch == "\\" and self._quote != "`" and i + 1 < n:
                    self._buffer.append(pair)  # an escaped character, the quote included
                    self._content = True
                    i += 2
                    continue
                if ch == self._quote:
                    self._quote = ""
            elif pair in ("--", "/*"):
                self._comment = pair
                self._buffer.append(pair)
                i += 2
                continue
            elif ch in "'\"`":
                self._quote = ch
            elif ch == ";":
                if self._content:
                    done.append("".join(self._buffer).strip())
                self._buffer.clear()
                self._content = False
                i += 1
                continue
            if not self._comment and not ch.isspace():
                self._content = True
            self._buffer.append(ch)
            i += 1
        return done

    @property
    def pending(self) -> str:
        """What was fed after the last complete statement (trimmed; "" when only comments)."""
        return "".join(self._buffer).strip() if self._content else ""

    def clear(self) -> None:
        self._buffer.clear()
        self._quote = self._comment = ""
        self._content = False


def _is_quit(line: str) -> bool:
    return line.strip().rstrip(";").strip().lower() in _QUIT


def run_script(lines: Iterator[str], run: RunStatement) -> int:
    """Every statement of ``lines`` (a file's lines, newlines kept); returns how many failed.
    The text after the last ``;`` is a statement too."""
    splitter, failed = StatementSplitter(), 0
    for line in lines:
        if not splitter.pending and _is_quit(line):
            break
        for statement in splitter.feed(line):
            failed += _run_one(run, statement)
    if splitter.pending:
        failed += _run_one(run, splitter.pending)
    return failed


def _run_one(run: RunStatement, statement: str) -> int:
    try:
        run(statement)
    except LakeMQError as exc:
        click.echo(f"error: {exc}", err=True)
        return 1
    return 0


def history_file() -> Path:
    named = os.environ.get("LAKEMQ_SQL_HISTORY")
    return Path(named) if named else Path.home() / ".lakemq" / "sql_history"


def run_shell(run: RunStatement) -> None:
    """The interactive shell on the terminal, until Ctrl-D, ``quit`` or ``exit``."""
    import readline

    path = history_file()
    try:
        readline.read_history_file(path)
    except OSError:
        pass  # no history yet (or unreadable: the shell works without it)
    readline.set_history_length(HISTORY_LENGTH)
    # A SIGINT handler installed after start-up (PySpark's, which cancels running jobs) is set
    # to interrupt system calls, and readline then never sees Ctrl-C at the prompt; restarting
    # them gives it back, and the handler still runs.
    signal.siginterrupt(signal.SIGINT, False)
    splitter = StatementSplitter()
    try:
        while True:
            try:
                line = input(MORE if splitter.pending else PROMPT)
            except KeyboardInterrupt:  # Ctrl-C: drop what is being typed, as a shell does
                splitter.clear()
                click.echo("")
                continue
            except EOFError:  # Ctrl-D: run what was typed, on a line of its own
                click.echo("")
                if splitter.pending:
                    _interruptible(run, splitter.pending)
                return
            if not splitter.pending and _is_quit(line):
                return
            for statement in splitter.feed(line + "\n"):
                _interruptible(run, statement)
    finally:
        _save_history(path)


def _interruptible(run: RunStatement, statement: str) -> None:
    """Run one statement; Ctrl-C stops it (PySpark cancels the session's jobs) and the shell
    goes on."""
    try:
        _run_one(run, statement)
    except KeyboardInterrupt:
        click.echo("\nstatement interrupted", err=True)


def _save_history(path: Path) -> None:
    import readline

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        readline.write_history_file(path)
    except OSError as exc:
        click.echo(f"note: history not saved to {path}: {exc.strerror}", err=True)


def interactive() -> bool:
    """Whether stdin and stdout are a terminal (the shell), not a script or a pipe."""
    return sys.stdin.isatty() and sys.stdout.isatty()
