"""Sends one message with the official C++ client (PyPI rocketmq 0.4.4) and its session
credentials; run as a subprocess by test_acl_broker.py so the native library cannot take
pytest down. Prints one JSON line: {"status", "offset"} or {"error"}.

    cpp_acl_producer.py NAMESRV TOPIC GROUP LOG_DIR [ACCESS_KEY SECRET_KEY]
"""

from __future__ import annotations

import json
import sys

from rocketmq.client import Message, Producer
from rocketmq.ffi import _CLogLevel, dll


def main() -> None:
    namesrv, topic, group, log_dir, *credentials = sys.argv[1:]
    producer = Producer(group)
    producer.set_namesrv_addr(namesrv)
    producer.set_timeout(5000)
    dll.SetProducerLogPath(producer._handle, log_dir.encode())
    dll.SetProducerLogLevel(producer._handle, _CLogLevel.INFO)
    if credentials:
        producer.set_session_credentials(credentials[0], credentials[1], "ALIYUN")
    producer.start()
    try:
        msg = Message(topic)
        msg.set_body("from the C++ client")
        msg.set_keys("cpp-acl")
        msg.set_property("origin", "cpp")
        try:
            result = producer.send_sync(msg)
            print(json.dumps({"status": result.status.name, "offset": result.offset}), flush=True)
        except Exception as exc:  # noqa: BLE001 - the refusal, of whatever kind, is the outcome some tests expect
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
