"""An operation's progress, written to its record as its flow runs."""

import time


class ProgressRecorder:
    """Writes an operation's progress every half second at most, and
    once when it ends (an operation shorter than that: once). The first
    failure is written at once, as the operation's error while it rolls
    back: whoever follows it sees why before the rollback ends."""

    INTERVAL = 0.5

    def __init__(self, db, operation_id):
        self.db = db
        self.operation_id = operation_id
        self.progress = None
        self.failure = None
        self._written = time.monotonic()

    def __call__(self, progress, failure=None):
        self.progress = progress
        if failure is not None and self.failure is None:
            self.failure = failure
            self.flush()
        elif time.monotonic() - self._written >= self.INTERVAL:
            self.flush()

    def flush(self):
        if self.progress is not None:
            self.db.set_operation_progress(self.operation_id, self.progress,
                                           self.failure)
            self._written = time.monotonic()
