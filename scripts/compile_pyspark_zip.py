"""Add compiled bytecode to pyspark's ``python/lib/pyspark.zip`` (run by scripts/bootstrap.sh).

Spark puts that zip first on the path of every Python process it starts: the workers that run
a Python data source's reads, the planner workers, and the process that plans a Python stream's
micro-batches. The wheel ships it with sources only, and Python caches no bytecode for a zip,
so each of them compiled pyspark again: 1.5-1.6 s of CPU to import the streaming source runner
against 0.6-0.7 s with the bytecode beside the sources (measured 2026-11-29 at load 30, where
it was 11-17 s of wall time and Spark gives that process 10 s to connect back). The bytecode is
hash-based and unchecked (the zip's sources never change); an interpreter of another version
ignores it and compiles the source as before. A zip that holds bytecode already is left alone.

Run it only while no Spark process uses the venv: a running Python process reads the zip by the
offsets it listed when it first imported from it.
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make `lakemq` importable
    sys.path.insert(0, str(ROOT))

from lakemq.common.durable import write_file_durably


def _bytecode(source: bytes, name: str) -> bytes:
    code = compile(source, name, "exec", dont_inherit=True)
    return bytes(importlib._bootstrap_external._code_to_hash_pyc(  # type: ignore[attr-defined]
        code, importlib.util.source_hash(source), False))


def compile_zip(path: Path) -> int:
    """Write ``path`` again with a ``.pyc`` beside each ``.py``; returns how many were added."""
    with zipfile.ZipFile(path) as old:
        names = old.namelist()
        if any(n.endswith(".pyc") for n in names):
            return 0
        entries = [(info, old.read(info)) for info in old.infolist()]
    buffer = io.BytesIO()
    added = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as new:
        for info, data in entries:
            new.writestr(info, data)
            if info.filename.endswith(".py"):
                try:
                    pyc = _bytecode(data, info.filename)
                except SyntaxError:
                    continue  # a file no interpreter imports (a template): left as it is
                new.writestr(zipfile.ZipInfo(info.filename + "c", info.date_time), pyc, zipfile.ZIP_DEFLATED)
                added += 1
    write_file_durably(path, buffer.getvalue())
    return added


def main() -> int:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        print("compile_pyspark_zip: pyspark is not installed", file=sys.stderr)
        return 1
    path = Path(os.path.dirname(spec.origin), "python", "lib", "pyspark.zip")
    if not path.exists():
        return 0  # a pyspark without the zip (a source build): its workers import the package
    added = compile_zip(path)
    if added:
        print(f"compile_pyspark_zip: {added} modules of {path} compiled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
