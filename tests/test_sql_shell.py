"""How ``lakemq sql`` cuts its input into statements, and its script mode (no Spark: the
statements go to a recorder). The shell on a terminal: tests/lake/test_sql_shell_terminal.py."""

from __future__ import annotations

import pytest

from lakemq.cli.sql_shell import StatementSplitter, run_script
from lakemq.errors import LakeError


def split(*chunks: str) -> tuple[list[str], str]:
    splitter = StatementSplitter()
    done = [s for chunk in chunks for s in splitter.feed(chunk)]
    return done, splitter.pending


def test_semicolons_end_statements_anywhere_on_a_line() -> None:
    assert split("SELECT 1; SELECT 2;\n") == (["SELECT 1", "SELECT 2"], "")
    assert split("SELECT 1;SELECT 2") == (["SELECT 1"], "SELECT 2")
    assert split("SELECT\n", "  1\n", ";\n") == (["SELECT\n  1"], "")
    assert split(";;  ;\n") == ([], "")


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 'a;b' AS s;",
        'SELECT "a;b" AS s;',
        "SELECT `a;b` FROM t;",
        "SELECT 'it''s; here' AS s;",
        "SELECT 'a\\';b' AS s;",
        "SELECT 1 -- not here; nor here\n AS x;",
        "SELECT /* a ; b */ 1;",
        "SELECT /* a\n ; \n b */ 1;",
    ],
)
def test_semicolons_in_strings_and_comments_do_not_split(text: str) -> None:
    assert split(text) == ([text.removesuffix(";")], "")


def test_state_carries_across_lines() -> None:
    # A string and a block comment left open at the end of a line stay open on the next.
    assert split("SELECT 'a;\n", "b;' AS s;\n") == (["SELECT 'a;\nb;' AS s"], "")
    assert split("SELECT /* ;\n", "; */ 2;\n") == (["SELECT /* ;\n; */ 2"], "")


def test_comment_only_input_is_no_statement() -> None:
    assert split("-- nothing to run; really\n") == ([], "")
    assert split("/* x; */\n") == ([], "")


def test_clear_forgets_an_open_string() -> None:
    splitter = StatementSplitter()
    assert splitter.feed("SELECT 'never closed;\n") == []
    splitter.clear()
    assert splitter.feed("SELECT 1;") == ["SELECT 1"]


def test_script_runs_every_statement_and_counts_failures(capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[str] = []

    def run(statement: str) -> None:
        ran.append(statement)
        if statement.startswith("SELEC "):
            raise LakeError("query failed: [PARSE_SYNTAX_ERROR]")

    lines = ["SELECT 1; SELEC typo;\n", "SELECT 'x;y'\n", "  AS s;\n", "SELECT 3\n"]
    assert run_script(iter(lines), run) == 1
    assert ran == ["SELECT 1", "SELEC typo", "SELECT 'x;y'\n  AS s", "SELECT 3"]
    assert capsys.readouterr().err == "error: query failed: [PARSE_SYNTAX_ERROR]\n"
    ran.clear()
    assert run_script(iter(["SELECT 1;\n", "quit\n", "SELECT 2;\n"]), run) == 0
    assert ran == ["SELECT 1"]
