"""The lake's jars (scripts/jvm_deps.sh spark-lake: delta-spark, hadoop-aws, the AWS SDK's S3
modules) add no class that pyspark's own jars already hold: two copies of a class on one
classpath load whichever comes first, and a version mismatch shows only at run time."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pyspark
import pytest

from lakemq.jobs.session import lake_jars


def _classes(jar: Path) -> set[str]:
    with zipfile.ZipFile(jar) as z:
        # META-INF/versions/N/ holds multi-release variants of the jar's own classes.
        return {n for n in z.namelist() if n.endswith(".class") and not n.startswith("META-INF/")}


def test_no_class_is_on_the_classpath_twice() -> None:
    jars = [Path(j) for j in lake_jars()]
    if not jars:
        pytest.fail("no spark-lake jars: scripts/test.sh fetches them (scripts/jvm_deps.sh spark-lake)")
    assert any(j.name.startswith("delta-spark_2.13-") for j in jars)
    assert any(j.name.startswith("hadoop-aws-") for j in jars)
    spark_classes: set[str] = set()
    for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar"):
        spark_classes |= _classes(jar)
    assert len(spark_classes) > 10_000  # pyspark's jars were read
    twice = {jar.name: sorted(_classes(jar) & spark_classes)[:3] for jar in jars}
    assert {name: some for name, some in twice.items() if some} == {}
