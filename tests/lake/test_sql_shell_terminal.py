"""The ``lakemq sql`` shell on a real pseudo-terminal, keys as a user types them: several
statements on a line, line editing and history (readline), Ctrl-C, Ctrl-D, a typo."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path
from typing import Any

import pytest
from lake_helpers import WriteStore, user_messages

from lakemq.jobs.compact import compact
from tests.cluster import lakemq_command

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")
PROMPT, MORE = "lakemq-sql> ", "...> "
UP, LEFT, CTRL_C, CTRL_D = "\x1b[A", "\x1b[D", "\x03", "\x04"


class Terminal:
    """A process on a pseudo-terminal: what it shows (escape sequences dropped) and keys to type."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.fd, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
        # Its own session with the terminal as controlling terminal, so Ctrl-C is a SIGINT to it
        # (the hook makes one ioctl call, nothing a thread could hold a lock for).
        self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
                                     preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))  # noqa: PLW1509
        os.close(slave)
        self.shown, self.cursor = "", 0

    def _read(self, deadline: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, min(1.0, deadline - time.monotonic())))
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the process closed the terminal
            return False
        self.shown += _ANSI.sub("", chunk.decode(errors="replace")).replace("\r", "")
        return bool(chunk)

    def expect(self, pattern: str, timeout: float = 120) -> str:
        """Wait for ``pattern`` (a regex) after what was matched before; returns the text up to it."""
        deadline, regex = time.monotonic() + timeout, re.compile(pattern, re.DOTALL)
        while True:
            found = regex.search(self.shown, self.cursor)
            if found:
                before, self.cursor = self.shown[self.cursor : found.end()], found.end()
                return before
            if time.monotonic() > deadline or not self._read(deadline):
                raise AssertionError(f"no {pattern!r} in {self.shown[self.cursor:][-3000:]!r}")

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def wait(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while self._read(deadline) and time.monotonic() < deadline:
            pass
        os.close(self.fd)
        return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))


@pytest.mark.timeout(400)
def test_shell_on_a_terminal(spark: Any, store_dir: Path, write_store: WriteStore, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write_store(user_messages(20))
    compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TERM": "xterm", "LAKEMQ_LOG_DIR": str(tmp_path / "logs"),
           "LAKEMQ_SPARK_DEFAULTS": os.environ["LAKEMQ_SPARK_DEFAULTS"]}
    term = Terminal(lakemq_command("sql", "--lake", str(lake), "--master", "local[1]"), env)
    try:
        term.expect(re.escape(PROMPT), timeout=300)
        # Two statements on one line, then a typo: one error line, and the shell goes on.
        term.type("SELECT 1 AS one; SELECT count(*) AS n FROM messages;\r")
        shown = term.expect(r"1 row\(s\).*1 row\(s\)\n" + re.escape(PROMPT))
        assert re.search(r"one.*1\b.*\bn\b.*20\b", shown, re.DOTALL), shown
        term.type("SELEC typo;\r")
        assert "error: query failed: [PARSE_SYNTAX_ERROR]" in term.expect(re.escape(PROMPT))
        term.type("SELECT 40 + 1 AS answer;\r")
        assert "41" in term.expect(r"1 row\(s\)\n" + re.escape(PROMPT))
        # Ctrl-C clears the line being typed and the shell stays; a new prompt, not "...>".
        term.type("SELECT 999 AS dropped\r")
        term.expect(re.escape(MORE))
        term.type("AND more")
        term.expect("AND more")
        # As a person types: CPython's readline checks signals only when its select() is
        # interrupted, so a SIGINT landing between echoing a key and the next select() waits
        # for the next key (a window a loaded machine can stretch; the Python REPL has it too).
        time.sleep(0.5)
        term.type(CTRL_C)
        term.expect(re.escape(PROMPT))
        # History (the up arrow, past the line dropped) and editing (the left arrow): no escape
        # codes typed into SQL.
        term.type(UP + UP + "\r")
        recalled = term.expect(r"1 row\(s\)\n" + re.escape(PROMPT))
        assert "┃ answer ┃" in recalled and "│ 41 " in recalled and "dropped ┃" not in recalled, recalled
        term.type("SELECT 6 AS si;" + LEFT + "x\r")
        assert re.search(r"\bsix\b.*\b6\b", term.expect(r"1 row\(s\)\n" + re.escape(PROMPT)), re.DOTALL)
        # Ctrl-D runs what was typed, its table on a line of its own, and ends the shell with
        # status 0 though a statement failed earlier.
        term.type("SELECT 7\r")
        term.expect(re.escape(MORE))
        term.type("AS seven\r")
        term.expect(re.escape(MORE))
        term.type(CTRL_D)
        ended = term.expect(r"1 row\(s\)\n")
        assert re.match(r"\n┏[^\n]*\n┃ seven", ended), ended  # after the "...> " prompt: a new line
        assert term.wait() == 0, term.shown[-3000:]
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait()
    history = (home / ".lakemq" / "sql_history").read_text()
    assert "SELECT 40 + 1 AS answer;" in history and "SELECT 6 AS six;" in history
    assert "PARSE_SYNTAX_ERROR" in (tmp_path / "logs" / "lakemq-sql.log").read_text()
