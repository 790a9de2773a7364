"""What the peer tests check of every peer: a round trip through its usual client, and that the
processes it started are gone after it stopped."""

from __future__ import annotations

import os
from pathlib import Path

from bench.peers.base import Peer


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it has exited and only waits to be reaped.
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


async def round_trip(peer: Peer, timeout: float) -> list[bytes]:
    """One send and a batch of two to topic "harness", read back by consumer group "g1"."""
    client = peer.client()
    await client.create_topic("harness")
    producer = await client.producer("harness")
    await producer.send(b"one")
    await producer.send_batch([b"two", b"three"])
    await producer.close()
    bodies: list[bytes] = []
    count = await client.consume("harness", "g1", 3, bodies.append, timeout=timeout)
    await client.close()
    assert count == 3
    return bodies
