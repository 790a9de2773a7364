"""``lakemq demo``: the main job end to end on embedded defaults (see lakemq/demo.py)."""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lakemq.cli import main
from lakemq.cli.output import print_rows
from lakemq.common.logs import close_logging, setup_logging


@main.command("demo")
@click.option("--work-dir", type=click.Path(file_okay=False),
              help="keep everything here: cluster, lake and logs (default: a temp dir, removed after)")
@click.option("--keep", "keep_lake", type=click.Path(file_okay=False),
              help="keep the lake here (a new directory), to query it afterwards with lakemq sql")
@click.option("--messages", default=5000, show_default=True, help="messages to produce")
@click.option("--body-size", default=1024, show_default=True, help="body bytes per message")
@click.option("--master", help="Spark master (default local[*])")
def demo_cmd(work_dir: str | None, keep_lake: str | None, messages: int, body_size: int, master: str | None) -> None:
    """Start a NameServer and a broker, produce, consume, tier to a local Delta lake, query it."""
    from lakemq.demo import run_demo

    keep = Path(keep_lake).resolve() if keep_lake else None
    if keep is not None and keep.exists():
        raise click.ClickException(f"--keep {keep}: already exists; name a new directory")
    root = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="lakemq-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    log_path = setup_logging("lakemq-demo", root / "logs")
    console = Console()
    console.print(f"lakemq demo in {root} (logs: {log_path.parent})", soft_wrap=True)
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
            console.print(f"[bold]{title}[/bold]: {query}", soft_wrap=True)
            print_rows(columns, [["NULL" if v is None else str(v) for v in row] for row in rows], console=console)
        lake = root / "lake"
        if keep is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(lake), keep)
            lake = keep
        console.print(f"produced {result.produced}, consumed {result.consumed}, "
                      f"{result.lake_rows} rows in the lake at {lake}", soft_wrap=True)
        if keep is not None or work_dir:
            query = "SELECT tags, count(*) FROM messages GROUP BY tags ORDER BY tags"
            console.print("query it with:", soft_wrap=True)
            program = sys.argv[0] if Path(sys.argv[0]).name == "lakemq" else "lakemq"
            console.print(f"  {program} sql --lake {shlex.quote(str(lake))} {shlex.quote(query)}", soft_wrap=True,
                          highlight=False)
    finally:
        if not work_dir:
            close_logging()
            shutil.rmtree(root, ignore_errors=True)
