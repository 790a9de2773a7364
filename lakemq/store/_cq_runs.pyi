"""Types of the compiled module lakemq/store/_cq_runs.pyx."""

from lakemq.store._scan import DispatchBatch

def consume_queue_runs(batch: DispatchBatch) -> tuple[list[tuple[str, int, int, bytes]], int | None]: ...
