"""The ceiling benchmark's null server answers every request, in order, with its opaque, and
in the shape of a send response: otherwise its row would not be a ceiling for anything."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from bench.broker_bench import _spawn
from bench.broker_load import Connection, send_frame
from bench.ceiling_bench import NULL_READY
from lakemq.common.codes import ResponseCode
from lakemq.remoting.codec import FLAG_RESPONSE

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "ceiling_bench.py"


def test_null_server_answers_each_frame_with_its_opaque(tmp_path: Path) -> None:
    proc, addr = _spawn("null", [sys.executable, str(SCRIPT), "_null-server"], tmp_path, NULL_READY)
    try:
        conn = Connection(addr)
        one = conn.call(send_frame("T", 0, b"x" * 1024, opaque=7))
        assert (one.code, one.opaque, one.flag & FLAG_RESPONSE) == (ResponseCode.SUCCESS, 7, FLAG_RESPONSE)
        assert set(one.ext_fields) >= {"msgId", "queueId", "queueOffset"}
        # Three frames in one write, the last split across two: three answers, in order.
        frames = b"".join(send_frame("T", 0, b"y", opaque=o) for o in (11, 12, 13))
        conn.sock.sendall(frames[:-5])
        conn.sock.sendall(frames[-5:])
        assert [conn.read().opaque for _ in range(3)] == [11, 12, 13]
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
