"""The columns a ``lakemq`` read returns: every column of ``messages``, or the ones a schema
given to the reader names.

PySpark's Python Data Source API prunes no columns. Whatever a query selects, each column a
read task yields goes to the JVM as Arrow, and Spark turns every one of them into its own rows
there. For ``messages`` that is 21 columns, eight of them strings and one a map. Giving the
reader a schema is how a query asks a Python source for fewer columns:

    spark.readStream.format("lakemq").schema("queue_offset bigint, body binary")...

The source then yields only those columns, in that order. Each must be a column of
``messages`` with its type. It may be declared NOT NULL only where ``messages`` holds no nulls.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from lakemq.errors import ConfigError
from lakemq.tiering.tables import MESSAGES_SCHEMA, SPARK_ARROW_SCHEMA

__all__ = ["Columns", "columns_of"]


@dataclass(frozen=True, slots=True)
class Columns:
    """The columns a read yields, and their Arrow schema as Spark expects it."""

    names: tuple[str, ...]
    schema: pa.Schema

    def of(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (rows in ``messages``' schema) cut down to these columns."""
        return pa.RecordBatch.from_arrays([batch.column(n) for n in self.names], schema=self.schema)


def columns_of(schema: StructType) -> Columns | None:
    """The columns ``schema`` asks for; None when it is ``messages``' own (nothing to cut)."""
    wanted = to_arrow_schema(schema)
    if wanted.equals(SPARK_ARROW_SCHEMA):
        return None
    if len(set(wanted.names)) != len(wanted.names):
        raise ConfigError(f"the lakemq source's schema names a column twice: {', '.join(wanted.names)}")
    for field in wanted:
        index = MESSAGES_SCHEMA.get_field_index(field.name)
        if index < 0:
            raise ConfigError(f"the lakemq source's schema names {field.name!r}, which is not a column of messages "
                              f"(its columns: {', '.join(MESSAGES_SCHEMA.names)})")
        own = MESSAGES_SCHEMA.field(index)
        if field.type != own.type:
            raise ConfigError(f"the lakemq source's schema gives {field.name!r} the type {field.type}; "
                              f"messages holds it as {own.type}")
        if not field.nullable and own.nullable:
            raise ConfigError(f"the lakemq source's schema declares {field.name!r} NOT NULL, but messages "
                              "may hold nulls there")
    return Columns(tuple(wanted.names), wanted)
