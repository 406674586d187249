"""The conductor: runs deploy and teardown flows for clusters.

It reaches hypervisors only through their hostagents, over the bus, and
records everything it creates in the state database as it goes.
"""

import contextlib
import os
import uuid

import fasteners
from oslo_log import log as logging

from conductor import agents
from conductor import manager
from conductor import plans
from conductor import runner
from conductor import services
from conductor import waiters
from flows import deploy
from flows import records
from flows import teardown
from tenks import exceptions
from tenks import rpc
from tenks import scheduler
from tenks.db import api as db_api

LOG = logging.getLogger(__name__)


def ensure_private_dir(path):
    """Create ``path`` readable by its owner only (it holds secrets)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


class Conductor:

    def __init__(self, conf, bus):
        self.conf = conf
        self.state_dir = ensure_private_dir(conf.state_dir)
        self.lock_dir = ensure_private_dir(
            os.path.join(self.state_dir, 'locks'))
        engine = db_api.create_engine(
            conf.conductor.database_connection
            or db_api.default_url(self.state_dir))
        self.db = db_api.StateDB(engine)
        self.runner = runner.FlowRunner(engine, conf.conductor.workers)
        self.waiters = waiters.Waiters()
        self.agents = agents.AgentClient(
            bus, self.waiters, conf.conductor.host,
            conf.conductor.agent_timeout)
        services.install(services.Services(db=self.db, agents=self.agents))
        self.server = bus.get_server(
            rpc.CONDUCTOR_TOPIC, conf.conductor.host,
            [manager.ConductorManager(self.waiters)])

    def start(self):
        self.server.start()

    def stop(self):
        self.server.stop()
        self.server.wait()

    def hypervisors(self):
        # One local hypervisor until hostagents register themselves.
        return [self.conf.hostagent.host]

    @contextlib.contextmanager
    def _lock(self, name):
        lock = fasteners.InterProcessLock(
            os.path.join(self.lock_dir, '%s.lock' % name))
        if not lock.acquire(blocking=False):
            raise exceptions.ClusterBusy(name=name)
        try:
            yield
        finally:
            lock.release()

    def deploy(self, spec):
        """Create the cluster ``spec`` describes, or repair it; idempotent.

        Returns {'operation': id, 'changed': [tasks that changed
        something]}, and 'resumed': True when it finished a deploy that a
        dead process left half done. Raises OperationFailed after rolling
        back.
        """
        name = spec['cluster']
        with self._lock(name):
            cluster = self.db.get_cluster(name)
            if cluster is not None and cluster.spec != spec:
                fields = sorted(k for k in set(spec) | set(cluster.spec)
                                if spec.get(k) != cluster.spec.get(k))
                raise exceptions.SpecChanged(name=name,
                                             fields=', '.join(fields))
            interrupted = self._interrupted(name)
            if interrupted is not None and interrupted.kind == 'deploy':
                LOG.info('Resuming deploy %s of cluster %s', interrupted.id,
                         name)
                result = self._finish(interrupted.id, 'deploy', name,
                                      False, self.runner.resume,
                                      interrupted.id)
                return dict(result, resumed=True)
            facts = self._inspect(spec)
            with self._lock('allocation'):
                recorded = [n.as_dict() for n in self.db.list_nodes()]
                missing = scheduler.schedule(spec, facts, recorded)
                if cluster is None:
                    self.db.save_cluster(name, spec,
                                         records.CLUSTER_SCHEDULED)
                self.db.add_nodes(missing)
            nodes = [n.as_dict() for n in self.db.list_nodes(cluster=name)]
            plan = plans.deploy_plan(spec, nodes, facts)
            return self._run('deploy', name, cluster is not None,
                             deploy.get_deploy_flow, {'plan': plan})

    def teardown(self, name):
        """Remove everything recorded for cluster ``name``."""
        with self._lock(name):
            if self.db.get_cluster(name) is None:
                raise exceptions.ClusterNotFound(name=name)
            self._interrupted(name)
            resources = [
                {'hypervisor': r.hypervisor, 'kind': r.kind, 'name': r.name,
                 'remove_args': r.remove_args}
                for r in self.db.list_resources(name)]
            return self._run('teardown', name, True,
                             teardown.get_teardown_flow,
                             {'cluster': name, 'resources': resources})

    def _interrupted(self, name):
        """The last operation a dead process left running, if any.

        Called under the cluster's lock, so nothing else runs it now;
        older ones are closed as interrupted.
        """
        running = self.db.unfinished_operations(name)
        for operation in running[:-1]:
            self.db.finish_operation(operation.id, 'interrupted')
        if not running:
            return None
        last = running[-1]
        if last.kind != 'deploy':
            self.db.finish_operation(last.id, 'interrupted')
        return last

    def _inspect(self, spec):
        """Ask each hypervisor what it has; fail before creating anything."""
        mappings = spec['physnet_mappings']
        ports = list(range(spec['ipmi_port_range_start'],
                           spec['ipmi_port_range_end'] + 1))
        facts = {}
        for host in self.hypervisors():
            facts[host] = self.agents.request(
                host, 'inspect', 'inspect/%s' % uuid.uuid4(),
                interfaces=sorted(set(mappings.values())),
                ipmi_address=spec['ipmi_address'], ipmi_ports=ports)
        for physnet, source in sorted(mappings.items()):
            missing = [h for h, f in facts.items()
                       if source in f['missing_interfaces']]
            if len(missing) == len(facts):
                raise exceptions.InterfaceNotFound(
                    'Interface %s mapped to physical network %s does not '
                    'exist on %s' % (source, physnet, ', '.join(missing)))
        return facts

    def _run(self, kind, name, existed, factory, factory_kwargs):
        operation_id = str(uuid.uuid4())
        self.db.create_operation(operation_id, name, kind)
        store = {'operation_id': operation_id, 'cluster': name}
        return self._finish(operation_id, kind, name, existed,
                            self.runner.run,
                            operation_id, '%s:%s' % (kind, name), factory,
                            factory_kwargs, store)

    def _finish(self, operation_id, kind, name, existed, run, *args):
        try:
            outcome = run(*args)
        except exceptions.OperationFailed as e:
            self.db.finish_operation(operation_id, 'failed', str(e))
            raise exceptions.OperationFailed(
                operation=kind.capitalize(), cluster=name,
                reason='%s%s' % (e, self._after_failure(kind, name,
                                                        existed)),
                failed_tasks=e.kwargs.get('failed_tasks', [])) from None
        self.db.finish_operation(operation_id, 'succeeded')
        return {'operation': operation_id, 'changed': outcome.changed,
                'resumed': False}

    def _after_failure(self, kind, name, existed):
        if self.db.get_cluster(name) is None:
            return '. Everything this deploy created was rolled back'
        left = len(self.db.list_resources(name))
        if kind == 'teardown':
            return ('. %d resource(s) remain recorded: run the teardown '
                    'again to finish it' % left)
        if not existed:
            return ('. %d resource(s) could not be rolled back: run "tenks '
                    'teardown %s" to remove them' % (left, name))
        return ('. What this deploy created was rolled back; the cluster '
                'deployed before is kept')


def main():
    from tenks import service
    service.run('conductor', lambda conf, bus: Conductor(conf, bus))
