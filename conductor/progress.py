"""An operation's progress, written to its record as its flow runs."""

import threading
import time


class ProgressRecorder:
    """Writes an operation's progress every half second at most, and
    once when it ends (an operation shorter than that: once). The first
    failure is written at once, as the operation's error while it rolls
    back: whoever follows it sees why before the rollback ends.

    Told of the progress by several threads (the flow's engine, and its
    tasks as they do their steps: flows.context.step): while one waits
    to write (the database lets one writer in at a time), the others go
    on; the record gets the progress as it is when written.
    """

    INTERVAL = 0.5

    def __init__(self, db, operation_id):
        self.db = db
        self.operation_id = operation_id
        self.progress = None
        self.failure = None
        self._written = time.monotonic()
        self._lock = threading.Lock()
        # Held by the thread writing the record.
        self._writing = threading.Lock()

    def __call__(self, progress, failure=None):
        with self._lock:
            self.progress = progress
            first_failure = failure is not None and self.failure is None
            if first_failure:
                self.failure = failure
            elif time.monotonic() - self._written < self.INTERVAL:
                return
        if first_failure:
            self.flush()
        elif self._writing.acquire(blocking=False):
            try:
                self._write()
            finally:
                self._writing.release()

    def flush(self):
        """Write the progress now (after a write under way)."""
        with self._writing:
            self._write()

    def _write(self):
        with self._lock:
            if self.progress is None:
                return
            progress = {stage: list(counts)
                        for stage, counts in self.progress.items()}
            failure = self.failure
            self._written = time.monotonic()
        self.db.set_operation_progress(self.operation_id, progress, failure)
