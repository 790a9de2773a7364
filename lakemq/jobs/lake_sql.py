"""SQL on a Spark that is here or behind the lake service, answered as Arrow.

The lake commands that may run on the lake service (``admin message query --lake``,
``replay``, ``lakemq sql``) express their reads as Spark SQL, so one code path serves both
sessions: :class:`SqlSession` is what they need, a statement in and its rows out as an Arrow
table. A Spark Connect session of lakemq's own client
(:class:`lakemq.jobs.connect_client.ConnectSession`) is one; :class:`LocalSql` makes a
SparkSession of this process one (:func:`sql_session` takes either).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from lakemq.tiering.lake_fs import LakeLocation

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = ["TRANSACTIONS_TABLE", "VIEWS", "LocalSql", "SqlSession", "delta_table", "names_live_views", "session_errors",
           "sql_session", "sql_string"]

# The names :mod:`lakemq.jobs.sql` gives the lake's views over ``messages`` and the
# transactions table, here so that a client can tell which a statement names before it
# imports that module (and pyarrow, with the lake's schemas).
TRANSACTIONS_TABLE = "transactions"
VIEWS = ("user_messages", "schedule_messages", "timer_messages", "transactions_half", "transactions_op",
         "transactions_derived")
# The names register_live_views makes views over the live ``messages``.
_VIEW_NAMES = re.compile(rf"\b({'|'.join((*VIEWS, TRANSACTIONS_TABLE))})\b", re.IGNORECASE)


def names_live_views(statement: str) -> bool:
    """Whether ``statement`` names a view over ``messages`` (or ``transactions``, which may be
    one): only then must the live views be registered for it (comments and strings count too,
    which registers them when not needed, never the reverse)."""
    return _VIEW_NAMES.search(statement) is not None


@runtime_checkable
class SqlSession(Protocol):
    """A Spark session as the lake commands use it."""

    def sql(self, statement: str, limit: int | None = None) -> pa.Table:
        """Run ``statement`` (a command runs as it is parsed); its rows, at most ``limit``."""
        ...

    def close(self) -> None:
        ...


class LocalSql:
    """A SparkSession of this process as a :class:`SqlSession`; :meth:`close` leaves it running
    (its owner stops it)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def sql(self, statement: str, limit: int | None = None) -> pa.Table:
        import pyarrow as pa

        df = self.spark.sql(statement)
        df = df if limit is None else df.limit(limit)
        try:
            return df.toArrow()
        except pa.ArrowInvalid:
            # toArrow casts to the schema Spark declares, which some commands' results break
            # (Delta's OPTIMIZE: nulls in fields its metrics struct calls non-nullable); the
            # rows themselves are fine.
            return pa.Table.from_pylist([row.asDict(recursive=True) for row in df.collect()])

    def close(self) -> None:
        pass


def sql_session(session: Any) -> SqlSession:
    """``session`` if it is a :class:`SqlSession`, else a SparkSession wrapped in :class:`LocalSql`."""
    return session if isinstance(session, SqlSession) else LocalSql(session)


def session_errors(session: SqlSession) -> tuple[type[BaseException], ...]:
    """What a failed statement of ``session`` raises (pyspark is imported only for a local one)."""
    if isinstance(session, LocalSql):
        from lakemq.jobs.session import spark_errors

        return spark_errors()
    from lakemq.jobs.connect_client import ConnectError

    return (ConnectError,)


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal (backslash escapes, Spark's default)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def delta_table(session: SqlSession, lake: LakeLocation, table: str, version: int | None = None) -> str:
    """The lake table ``table`` as a SQL table reference (``delta.`uri```, at ``version`` if
    given). A local Spark is pointed at the lake's S3 bucket first; the lake service's own
    session was, when it registered the lake."""
    from lakemq.jobs.lake_tables import configure_s3a, spark_uri

    if isinstance(session, LocalSql):
        configure_s3a(session.spark, lake)
    ref = "delta.`" + spark_uri(lake, table).replace("`", "``") + "`"
    return ref if version is None else f"{ref} VERSION AS OF {int(version)}"
