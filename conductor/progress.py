"""An operation's progress, written to its record as its flow runs."""

import time


class ProgressRecorder:
    """Writes an operation's progress, at most a few times a second."""

    INTERVAL = 0.25

    def __init__(self, db, operation_id):
        self.db = db
        self.operation_id = operation_id
        self.progress = None
        self._written = 0.0

    def __call__(self, progress):
        self.progress = progress
        if time.monotonic() - self._written >= self.INTERVAL:
            self.flush()

    def flush(self):
        if self.progress is not None:
            self.db.set_operation_progress(self.operation_id, self.progress)
            self._written = time.monotonic()
