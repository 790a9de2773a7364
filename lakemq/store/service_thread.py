"""ServiceThread: the one background-loop shape every store service uses (flush, reput,
clean, schedule): a daemon thread, a wake-up event, a clean stop that joins."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod

__all__ = ["ServiceThread"]

log = logging.getLogger(__name__)


class ServiceThread(ABC):
    def __init__(self, name: str) -> None:
        self.name = name
        self._stop_event = threading.Event()
        self._wake_event = threading.Event()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def run(self) -> None:
        """The loop: ``while not self.stopped: self.wait_for_running(...); work``; then any
        final work (a last flush) before returning."""

    @property
    def stopped(self) -> bool:
        return self._stop_event.is_set()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            self.run()
        except Exception:  # a dying service must say so; the store keeps running without it
            log.exception("%s stopped by an error", self.name)

    def wakeup(self) -> None:
        if not self._wake_event.is_set():  # set() takes the event's lock even when already set
            self._wake_event.set()

    def wait_for_running(self, interval_s: float) -> None:
        self._wake_event.wait(interval_s)
        self._wake_event.clear()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        self._stop_event.set()
        self._wake_event.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                log.warning("%s did not stop within %.1f s", self.name, timeout_s)
