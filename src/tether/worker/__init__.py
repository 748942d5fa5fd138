"""The queue worker shell: `tether worker` processes on any number of hosts share one PostgreSQL store."""

from tether.worker.loop import Worker, WorkerStats

__all__ = ["Worker", "WorkerStats"]
