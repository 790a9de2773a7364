"""``lakemq demo``: the main job end to end on embedded defaults (see lakemq/demo.py)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from lakemq.cli import main
from lakemq.common.logs import setup_logging


@main.command("demo")
@click.option("--work-dir", type=click.Path(file_okay=False), help="keep everything here (default: a temp dir, removed after)")
@click.option("--messages", default=5000, show_default=True, help="messages to produce")
@click.option("--body-size", default=1024, show_default=True, help="body bytes per message")
@click.option("--master", help="Spark master (default local[*])")
def demo_cmd(work_dir: str | None, messages: int, body_size: int, master: str | None) -> None:
    """Start a NameServer and a broker, produce, consume, tier to a local Delta lake, query it."""
    from lakemq.demo import run_demo

    root = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="lakemq-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    log_path = setup_logging("lakemq-demo", root / "logs")
    console = Console()
    console.print(f"lakemq demo in {root} (log: {log_path})")
    try:
        with Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console) as bar:
            tasks: dict[str, Any] = {}

            def progress(step: str, done: int, total: int) -> None:
                if step not in tasks:
                    tasks[step] = bar.add_task(step, total=max(total, 1))
                bar.update(tasks[step], completed=done if total else 1, total=max(total, 1))

            result = run_demo(root, messages=messages, body_size=body_size, progress=progress, master=master)
        for title, query, columns, rows in result.queries:
            console.print(f"[bold]{title}[/bold]: {query}")
            table = Table(*columns)
            for row in rows:
                table.add_row(*("NULL" if v is None else str(v) for v in row))
            console.print(table)
        console.print(f"produced {result.produced}, consumed {result.consumed}, "
                      f"{result.lake_rows} rows in the lake at {root / 'lake'}")
    finally:
        if not work_dir:
            shutil.rmtree(root, ignore_errors=True)
