"""A Spark standalone cluster on this machine, from pyspark's own scripts: one master and N
workers on loopback, for trying the jobs on ``spark://`` (tests, benchmarks, a laptop).

    with standalone_cluster(work_dir, workers=2) as url:
        lakemq tier run ... --master url

Ports come from :func:`lakemq.launcher.reserved_port`; the cluster is ready once the master's
status page counts every worker alive.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lakemq.launcher import reserved_port

__all__ = ["alive_workers", "standalone_cluster"]


def _spark_class(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    import pyspark

    script = Path(pyspark.__file__).parent / "bin" / "spark-class"
    with open(log, "ab") as out:
        return subprocess.Popen([str(script), *args], stdout=out, stderr=subprocess.STDOUT, env=env)


def alive_workers(ui: str) -> int:
    """Workers the master at status page ``ui`` counts alive (0 while it is not up)."""
    try:
        with urllib.request.urlopen(f"{ui}/json/", timeout=5) as reply:
            return int(json.load(reply).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


@contextmanager
def standalone_cluster(work_dir: Path, *, workers: int = 2, cores: int = 1, memory: str = "768m",
                       timeout: float = 120.0) -> Iterator[str]:
    """``spark://127.0.0.1:port`` of a master with ``workers`` workers; each worker's files and
    its executors' logs are in ``work_dir/worker-<i>``."""
    import pyspark

    work_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SPARK_HOME=str(Path(pyspark.__file__).parent), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOG_DIR=str(work_dir / "logs"))
    port, ui_port = reserved_port(), reserved_port()
    url, ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}"
    procs = [_spark_class(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                           "--webui-port", str(ui_port)], work_dir / "master.log", env)]
    try:
        for i in range(workers):
            procs.append(_spark_class(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                                       "--cores", str(cores), "--memory", memory,
                                       "--webui-port", str(reserved_port()),
                                       "--work-dir", str(work_dir / f"worker-{i}")],
                                      work_dir / f"worker-{i}.log", env))
        deadline = time.monotonic() + timeout
        while alive_workers(ui) < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(work_dir.glob("*.log")))
                raise RuntimeError(f"the standalone cluster did not come up:\n{logs}")
            time.sleep(0.2)
        yield url
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
