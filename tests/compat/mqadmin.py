"""Runs Apache RocketMQ's mqadmin (MQAdminStartup from rocketmq-tools 4.9.8) as a user would,
many commands in one JVM (tests/compat/java AdminBatch): each command's printed output."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.jvm import java_command, rocketmq_home

ADMIN_MAIN = "org.lakemq.compat.AdminBatch"


@dataclass(frozen=True)
class AdminOutput:
    command: list[str]
    stdout: str
    stderr: str
    ms: int

    @property
    def failed(self) -> bool:
        """mqadmin prints a failure's stack trace to stderr (and still exits 0 from a shell)."""
        return "Exception" in self.stderr

    def __str__(self) -> str:
        return f"mqadmin {' '.join(self.command)}\n{self.stdout}\n{self.stderr}"


def run_mqadmin(commands: list[list[str]], work_dir: Path, timeout: float = 180.0) -> list[AdminOutput]:
    home = rocketmq_home(work_dir / "home", work_dir / "logs", "tools")
    argv = java_command(ADMIN_MAIN, [], options=(f"-Duser.home={work_dir}", "-XX:TieredStopAtLevel=1"))
    stdin = "".join(json.dumps(c) + "\n" for c in commands)
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=work_dir, env=dict(os.environ, ROCKETMQ_HOME=str(home)))
    outputs = [AdminOutput(**json.loads(line)) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(outputs) == len(commands), f"mqadmin batch stopped early:\n{done.stderr[-3000:]}"
    return outputs
