"""lakemq's Spark Connect client: SQL statements on a Spark Connect server, results as Arrow.

A lake command talking to the lake service (``tier serve``'s Spark Connect) needs SQL in and
rows out, nothing of a DataFrame API. pyspark's Connect client imports pandas and numpy before
anything else (2.0-2.4 s of a command's 2 s budget on a loaded machine), so this client speaks
Spark Connect's own protocol: the message classes are generated at set-up from the official
.proto files in Spark's spark-connect jar (scripts/gen_spark_connect.py, into the gitignored
lakemq/jobs/_connect_pb/), the calls go over grpc, and each result's Arrow IPC batches are
read with pyarrow alone.

One statement is one ``ExecutePlan`` of a ``SQL`` relation (under a ``Limit`` when the caller
caps the rows): Spark runs a command (``CREATE VIEW``, ``SET``) as it parses it, as
``spark.sql`` does, and answers a query with its rows. A session's temporary views live on the
server under this client's session id until :meth:`ConnectSession.close` releases it.

While a session is open, ``numpy`` is kept from being imported (if nothing imported it
before): pyarrow imports it when it is installed, and deltalake pandas through it, about 2 s
that reading Arrow batches and Delta logs never uses. Closing the session lifts that, as does
:func:`allow_numpy` for a part that needs numpy itself (it imports then as usual; pyarrow, if
imported meanwhile, stays without its numpy conversions).
"""

from __future__ import annotations

import os
import pickle
import sys
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ConnectError", "ConnectSession", "allow_numpy", "class_reference", "keep_out_numpy", "open_session"]

# The service's name as the wire carries it in each method's path (the generated messages live
# in the package lakemq.jobs.spark_connect; see scripts/gen_spark_connect.py).
_SERVICE = "/spark.connect.SparkConnectService/"
# Spark Connect sends Arrow batches of up to 4 MiB (spark.connect.grpc.arrow.maxBatchSize) and
# grpc's default limit is 4 MiB: pyspark's client allows 128 MiB, as here.
_MAX_MESSAGE = 128 * 1024 * 1024
_CLIENT_TYPE = "lakemq"


class ConnectError(Exception):
    """A failed Spark Connect call: the server's message (Spark's error class first), or the
    transport's when the server could not be reached."""


def _error(exc: Any) -> ConnectError:
    details = exc.details() if hasattr(exc, "details") else None
    return ConnectError(details or str(exc))


class ConnectSession:
    """One Spark Connect session on ``sc://host:port`` (see the module docstring)."""

    def __init__(self, url: str) -> None:
        import grpc

        from lakemq.jobs._connect_pb import base_pb2

        host, _, port = url.removeprefix("sc://").rstrip("/").rpartition(":")
        self.url = url
        self.session_id = str(uuid.uuid4())
        self._pb = base_pb2
        self._user = base_pb2.UserContext(user_id=os.environ.get("USER") or _CLIENT_TYPE)  # as pyspark's client
        self._channel = grpc.insecure_channel(
            f"{host}:{port}", options=[("grpc.max_receive_message_length", _MAX_MESSAGE)])
        self._execute = self._channel.unary_stream(
            _SERVICE + "ExecutePlan", request_serializer=base_pb2.ExecutePlanRequest.SerializeToString,
            response_deserializer=base_pb2.ExecutePlanResponse.FromString)
        self._analyze = self._channel.unary_unary(
            _SERVICE + "AnalyzePlan", request_serializer=base_pb2.AnalyzePlanRequest.SerializeToString,
            response_deserializer=base_pb2.AnalyzePlanResponse.FromString)
        self._release = self._channel.unary_unary(
            _SERVICE + "ReleaseSession", request_serializer=base_pb2.ReleaseSessionRequest.SerializeToString,
            response_deserializer=base_pb2.ReleaseSessionResponse.FromString)

    @property
    def version(self) -> str:
        """The server's Spark version (one AnalyzePlan round trip)."""
        import grpc

        pb = self._pb
        request = pb.AnalyzePlanRequest(session_id=self.session_id, user_context=self._user,
                                        client_type=_CLIENT_TYPE,
                                        spark_version=pb.AnalyzePlanRequest.SparkVersion())
        try:
            return str(self._analyze(request).spark_version.version)
        except grpc.RpcError as exc:
            raise _error(exc) from exc

    def _run(self, plan: Any) -> Iterator[bytes]:
        """ExecutePlan of ``plan``: the data of each Arrow batch it answers."""
        import grpc

        pb = self._pb
        request = pb.ExecutePlanRequest(session_id=self.session_id, user_context=self._user,
                                        client_type=_CLIENT_TYPE, plan=plan)
        try:
            for response in self._execute(request):
                if response.HasField("arrow_batch"):
                    yield response.arrow_batch.data
        except grpc.RpcError as exc:
            raise _error(exc) from exc

    def sql(self, statement: str, limit: int | None = None) -> pa.Table:
        """Run ``statement``; its rows (at most ``limit``) as one Arrow table."""
        import pyarrow as pa
        import pyarrow.ipc

        from lakemq.jobs._connect_pb import relations_pb2

        relation = relations_pb2.Relation(sql=relations_pb2.SQL(query=statement))
        if limit is not None:
            relation = relations_pb2.Relation(limit=relations_pb2.Limit(input=relation, limit=limit))
        tables = [pyarrow.ipc.open_stream(data).read_all() for data in self._run(self._pb.Plan(root=relation))]
        if not tables:  # Spark sends at least one (empty) batch with the schema; a command may send none
            return pa.schema([]).empty_table()
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def register_data_source(self, name: str, module: str, qualname: str) -> None:
        """Register the PySpark data source class ``module.qualname`` as ``name`` on this session,
        as pyspark's ``spark.dataSource.register`` does: the server's Python workers unpickle
        the command, here a reference to the class (the bytes pickle writes for a class), so
        neither it nor pyspark is imported in this process."""
        from lakemq.jobs._connect_pb import commands_pb2, relations_pb2

        source = relations_pb2.CommonInlineUserDefinedDataSource(
            name=name, python_data_source=relations_pb2.PythonDataSource(
                command=class_reference(module, qualname), python_ver=f"{sys.version_info[0]}.{sys.version_info[1]}"))
        for _ in self._run(self._pb.Plan(command=commands_pb2.Command(register_data_source=source))):
            pass

    def close(self) -> None:
        """Release the session on the server (its temporary views go) and close the channel."""
        import grpc

        try:
            self._release(self._pb.ReleaseSessionRequest(session_id=self.session_id, user_context=self._user,
                                                         client_type=_CLIENT_TYPE))
        except grpc.RpcError:
            pass  # a server that went away has released it already
        finally:
            self._channel.close()
            allow_numpy()


def class_reference(module: str, qualname: str) -> bytes:
    """What pickle writes for the class ``module.qualname`` (a reference: unpickling imports
    it), made without importing it."""
    def text(part: str) -> bytes:
        data = part.encode()
        return pickle.SHORT_BINUNICODE + bytes([len(data)]) + data

    return b"".join((pickle.PROTO, bytes([pickle.DEFAULT_PROTOCOL]), text(module), text(qualname),
                     pickle.STACK_GLOBAL, pickle.STOP))


def keep_out_numpy() -> None:
    """Keep numpy from being imported (see the module docstring) until :func:`allow_numpy`,
    unless it is imported already: a command that will ask the lake service calls it before it
    imports pyarrow (through lakemq's lake modules), and allows numpy again if it falls back to
    a Spark of its own."""
    if "numpy" not in sys.modules:
        sys.modules["numpy"] = None  # type: ignore[assignment]  # an import of it raises ImportError


def allow_numpy() -> None:
    """Let numpy be imported again (for a part of a client that needs it)."""
    if "numpy" in sys.modules and sys.modules["numpy"] is None:
        del sys.modules["numpy"]


def open_session(url: str) -> ConnectSession:
    """A session on the Spark Connect server at ``url`` (``sc://host:port``), checked with one
    round trip (a port that is not Spark Connect fails here); raises ConnectError."""
    keep_out_numpy()
    session = ConnectSession(url)
    try:
        session.version  # noqa: B018 - the first RPC
    except BaseException:
        session.close()
        raise
    return session
