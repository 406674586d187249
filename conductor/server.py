"""The tenks-conductor process: a Conductor on the message bus, which
resumes what it was running when it last stopped."""

from conductor import conductor as tenks_conductor
from tenks import runtime


def main():
    runtime.tune_malloc()
    from tenks import daemon
    daemon.run('conductor', run_conductor)


def run_conductor(conf, bus):
    return ConductorService(tenks_conductor.Conductor(conf, bus))


class ConductorService:
    """A conductor as the process runs it: started, then resuming what
    it was running when it last stopped (once it listens, and has heard
    from the hostagents again)."""

    def __init__(self, conductor):
        self.conductor = conductor

    def start(self):
        self.conductor.start()
        self.conductor.resume_interrupted()

    def stop(self):
        return self.conductor.stop()
