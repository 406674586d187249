"""An Ironic with the snmp hardware type, for one test.

The test services' Ironic (tools/openstack_services.py) no longer ships
it; Ironic 29 (2025.1), the last that does, runs from its own venv
(``.venv-ironic-snmp``, made by ``tools/setup.sh ironic_snmp``) as the
all-in-one ``ironic`` on port 6398, with a SQLite database and its state
under the test's tmp_path. It is stopped after the test.
"""

import os
import subprocess
import time

import openstack
import pytest
from keystoneauth1 import noauth
from keystoneauth1 import session

from tests.functional import openstack_fixtures as of

services = of.services
VENV = os.path.join(services.REPO, '.venv-ironic-snmp')
PORT = 6398
URL = 'http://%s:%d' % (services.HOST, PORT)


def ironic_conf(d):
    return services.ini({
        'DEFAULT': {
            'auth_strategy': 'noauth',
            'rpc_transport': 'none',
            'state_path': d,
            'tempdir': os.path.join(d, 'tmp'),
            'enabled_hardware_types': 'snmp',
            'enabled_power_interfaces': 'snmp',
            # What the snmp type supports that needs no more set-up:
            # a node reaches available without images or a ramdisk
            # since automated cleaning is off (as in the test services).
            'enabled_management_interfaces': 'noop',
            'enabled_boot_interfaces': 'pxe',
            'enabled_deploy_interfaces': 'direct',
            'enabled_network_interfaces': 'noop',
            'enabled_inspect_interfaces': 'no-inspect',
        },
        'api': {'host_ip': services.HOST, 'port': PORT},
        'conductor': {'automated_clean': 'false'},
        'database': {'connection': services.sqlite(d, 'ironic')},
        'deploy': {'http_root': os.path.join(d, 'httpboot')},
        'dhcp': {'dhcp_provider': 'none'},
        'oslo_concurrency': {'lock_path': os.path.join(d, 'lock')},
        'pxe': {'tftp_root': os.path.join(d, 'tftpboot'),
                'tftp_master_path': os.path.join(d, 'tftpboot', 'master'),
                'images_path': os.path.join(d, 'images'),
                'instance_master_path': os.path.join(d, 'master_images')},
    })


@pytest.fixture
def ironic_snmp(tmp_path):
    """Ironic 29 with the snmp power interface; returns its URL."""
    ironic = os.path.join(VENV, 'bin', 'ironic')
    if not os.access(ironic, os.X_OK):
        why = 'no %s (tools/setup.sh ironic_snmp makes it)' % VENV
        # CI runs tools/setup.sh: a missing venv there is a broken step.
        if os.environ.get('CI'):
            pytest.fail(why)
        pytest.skip(why)
    assert services.port_free(PORT), '%s:%d is in use' % (services.HOST,
                                                          PORT)
    d = str(tmp_path / 'ironic-snmp')
    os.makedirs(os.path.join(d, 'tmp'))
    conf = os.path.join(d, 'ironic.conf')
    services.write(conf, ironic_conf(d))
    # BEGIN IMMEDIATE: its API and conductor threads write at once.
    services.write(os.path.join(d, 'sitecustomize.py'),
                   services.SQLITE_SITECUSTOMIZE)
    log = os.path.join(d, 'ironic.log')
    services.run_logged([os.path.join(VENV, 'bin', 'ironic-dbsync'),
                         '--config-file', conf, 'create_schema'], log)
    with open(log, 'ab') as out:
        proc = subprocess.Popen(
            [ironic, '--config-file', conf], cwd=d,
            env=dict(os.environ, PYTHONPATH=d), stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not services.answers(PORT):
            assert proc.poll() is None and time.monotonic() < deadline, (
                'Ironic 29 did not start; %s ends:\n%s'
                % (log, services.tail(log)))
            time.sleep(0.2)
        yield URL
    finally:
        services.kill_group(proc.pid)
        proc.wait()


def connection(url):
    """An openstacksdk Connection to the Ironic at ``url``."""
    return openstack.connection.Connection(
        session=session.Session(auth=noauth.NoAuth()),
        baremetal_endpoint_override=url)
