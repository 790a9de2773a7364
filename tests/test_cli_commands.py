"""The ``lakemq`` command loads a command's modules only when it runs: a NameServer or broker
process does not import the client, the SQL92 parser or Spark's glue."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click

from lakemq.cli import COMMANDS, main


def _modules(command: click.Command) -> set[str]:
    """Every module that defines ``command`` or one of its subcommands, at any depth."""
    found = {command.callback.__module__} if command.callback is not None else set()
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            found |= _modules(sub)
    return found


def test_each_command_names_every_module_that_registers_part_of_it() -> None:
    for modules in COMMANDS.values():
        for module in modules:
            importlib.import_module(module)
    assert set(main.commands) == set(COMMANDS)
    for name, command in main.commands.items():
        assert _modules(command) <= set(COMMANDS[name]), name


def test_a_server_command_loads_neither_the_client_nor_sqlglot_nor_pyspark() -> None:
    """(`consume`, a client command, does load the client: the probe sees imports.)"""
    probe = ("import sys; from click.testing import CliRunner; from lakemq.cli import main; "
             "result = CliRunner().invoke(main, [sys.argv[1], '--help']); "
             "print(result.exit_code, *(m in sys.modules for m in ('lakemq.client', 'sqlglot', 'pyspark')))")
    for command, loaded in (("namesrv", "0 False False False"), ("broker", "0 False False False"),
                            ("consume", "0 True False False")):
        out = subprocess.run([sys.executable, "-c", probe, command], capture_output=True, text=True, check=True)
        assert out.stdout.split() == loaded.split(), (command, out.stdout, out.stderr[-2000:])
