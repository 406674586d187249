"""A jobboard and tooz coordination in memory, shared by the conductors
of one test: the interfaces of conductor.jobboard.Board and
Coordination, without a server."""

import threading
import types
import uuid


class Server:
    """What several conductors' boards and coordinations share."""

    def __init__(self):
        self.mutex = threading.Lock()
        self.jobs = {}       # uuid -> job
        self.owners = {}     # uuid -> host
        self.locks = {}      # name -> threading.Lock
        self.members = {}    # host -> capabilities

    def board(self, backend, host, expiry):
        return Board(self, host, expiry)

    def coordination(self, backend, host):
        return Coordination(self, host)


class Board:

    def __init__(self, server, host, expiry):
        self.server = server
        self.host = host
        self.expiry = expiry

    def connect(self):
        pass

    def close(self):
        pass

    def post(self, operation_id, kind, cluster, before, args):
        job = types.SimpleNamespace(uuid=str(uuid.uuid4()), details={
            'operation': operation_id, 'kind': kind, 'cluster': cluster,
            'before': before, 'args': list(args)})
        with self.server.mutex:
            self.server.jobs[job.uuid] = job

    def jobs(self, only_unclaimed=False):
        with self.server.mutex:
            return [job for job in self.server.jobs.values()
                    if not only_unclaimed
                    or job.uuid not in self.server.owners]

    def find(self, operation_id):
        return next((job for job in self.jobs()
                     if job.details['operation'] == operation_id), None)

    def owner(self, job):
        return self.server.owners.get(job.uuid)

    def claim(self, job):
        with self.server.mutex:
            if job.uuid not in self.server.jobs or \
                    job.uuid in self.server.owners:
                return False
            self.server.owners[job.uuid] = self.host
            return True

    def renew(self, job):
        return self.owner(job) == self.host

    def consume(self, job):
        with self.server.mutex:
            assert self.server.owners.pop(job.uuid) == self.host
            del self.server.jobs[job.uuid]

    def abandon(self, job):
        with self.server.mutex:
            assert self.server.owners.pop(job.uuid) == self.host


class Coordination:

    def __init__(self, server, host):
        self.server = server
        self.host = host

    def start(self, capabilities):
        self.heartbeat(capabilities)

    def stop(self):
        with self.server.mutex:
            self.server.members.pop(self.host, None)

    def heartbeat(self, capabilities):
        with self.server.mutex:
            self.server.members[self.host] = capabilities

    def lock(self, name):
        with self.server.mutex:
            return self.server.locks.setdefault(name, threading.Lock())

    def members(self):
        with self.server.mutex:
            return list(self.server.members.values())
