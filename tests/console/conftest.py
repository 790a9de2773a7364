"""One console environment (cluster, lake, console process) shared by the console tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.console.console_env import ConsoleEnv, console_env


@pytest.fixture(scope="session")
def console(spark: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleEnv]:
    with console_env(tmp_path_factory.mktemp("console"), spark) as env:
        yield env
