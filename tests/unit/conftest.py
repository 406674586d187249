import io
import json
import logging
import os
import types
import warnings

import pytest

from hostagent import deployments
from hostagent import manager
from tenks import conf as tenks_conf
from tenks import spec as tenks_spec
from tenks.cli import embedded
from tenks.cli import main
from tests.unit import fakes

warnings.filterwarnings('ignore', module='oslo_service')


def use_fake_drivers(monkeypatch, hv):
    """Hostagent managers made from now on drive the fake ``hv``."""
    drivers = {'tenks.virt_drivers': fakes.FakeVirt,
               'tenks.network_drivers': fakes.FakeNetwork,
               'tenks.bmc_drivers': fakes.FakeBmc,
               'tenks.redfish_drivers': fakes.FakeRedfish,
               'tenks.snmp_drivers': fakes.FakeSnmp}
    monkeypatch.setattr(
        manager, 'load_driver',
        lambda namespace, name, conf: drivers[namespace](conf, hv))


def fake_hypervisor(monkeypatch):
    """A fake hypervisor behind hostagent managers made from now on."""
    hv = fakes.Hypervisor()
    use_fake_drivers(monkeypatch, hv)
    monkeypatch.setattr(manager.netutils, 'udp_port_free',
                        lambda address, port: port not in hv.busy_ports)
    monkeypatch.setattr(manager, 'host_uplinks', lambda: hv.uplinks)
    monkeypatch.setattr(manager, 'interface_mark', hv.interfaces.get)
    return hv


@pytest.fixture(autouse=True)
def deployments_dir(tmp_path, monkeypatch):
    """Where the hostagents of a test note their deployments (see
    hostagent.deployments): the test's own, never the machine's."""
    directory = str(tmp_path / 'deployments')
    monkeypatch.setattr(manager, 'deployments', types.SimpleNamespace(
        Registry=lambda _, state_dir, host: deployments.Registry(
            directory, state_dir, host)))
    return directory


@pytest.fixture
def hypervisor(monkeypatch):
    """A fake hypervisor behind the real hostagent manager."""
    return fake_hypervisor(monkeypatch)


def make_conf(state_dir):
    """The unit tests' service options, with state in ``state_dir``."""
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', str(state_dir))
    # Beside the state directory, never the machine's (a process of its
    # own has no deployments_dir fixture).
    conf.set_override('deployments_dir',
                      os.path.join(os.path.dirname(str(state_dir)),
                                   'deployments'), group='hostagent')
    conf.set_override('pool_dir', os.path.join(
        os.path.dirname(str(state_dir)), 'pools'), group='hostagent')
    conf.set_override('host', 'hv1', group='hostagent')
    conf.set_override('agent_timeout', 10, group='conductor')
    return conf


@pytest.fixture
def conf(tmp_path):
    return make_conf(tmp_path / 'state')


@pytest.fixture
def conductor(conf, hypervisor):
    """A conductor and a hostagent on the in-memory bus, fake drivers."""
    with embedded.embedded(conf) as conductor:
        yield conductor


@pytest.fixture
def checked_conductor(conf, hypervisor):
    """A conductor that checks the policy on every call, as on RabbitMQ,
    and a hostagent on the in-memory bus, fake drivers."""
    with embedded.embedded(conf, check_policy=True) as conductor:
        yield conductor


def make_spec(count=2, **top):
    data = {
        'cluster': 'unit',
        'node_types': {'small': {
            'memory_mb': 128, 'vcpus': 1,
            'volumes': [{'capacity': '1GiB'}],
            'physical_networks': ['physnet1'],
        }},
        'specs': [{'type': 'small', 'count': count}],
        'physical_networks': ['physnet1'],
    }
    data.update(top)
    return tenks_spec.validate(data)


class Result:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    def json(self):
        return json.loads(self.out)


@pytest.fixture
def state_dir(tmp_path):
    return tmp_path / 'state'


@pytest.fixture
def tenks(state_dir, monkeypatch):
    """Run ``tenks --state-dir STATE ARGS...``; a Result."""
    monkeypatch.delenv('TENKS_TRANSPORT_URL', raising=False)

    def run(*args):
        app = main.TenksApp()
        app.stdout, app.stderr = io.StringIO(), io.StringIO()
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        try:
            code = app.run(['--state-dir', str(state_dir), *map(str, args)])
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        return Result(code, app.stdout.getvalue(), app.stderr.getvalue())
    return run
