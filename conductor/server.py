"""The tenks-conductor process: a Conductor on the message bus, which
resumes what it was running when it last stopped."""

from conductor import conductor as tenks_conductor


def main():
    from tenks import daemon
    daemon.run('conductor', run_conductor)


def run_conductor(conf, bus):
    conductor = tenks_conductor.Conductor(conf, bus)
    conductor.resume_interrupted()
    return conductor
