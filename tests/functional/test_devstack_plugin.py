"""The DevStack plugin (devstack/) as stack.sh, unstack.sh and clean.sh
run it, with DevStack's functions stood in (tests/devstack) and the test
OpenStack services as the DevStack cloud: a node made by Tenks from
Ironic's variables, enrolled to ``available``, and nothing left after."""

import os
import subprocess
import sys

import pytest
import yaml

from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of
from tests.functional.test_cli import ports_of
from tests.functional.test_cli import source_bridge
from tests.unit.test_devstack_spec import DEVSTACK
from tests.unit.test_devstack_spec import STANDIN

pytestmark = pytest.mark.functional

# This module's IPMI ports: 7370-7379.
PORT_BASE = 7370


@pytest.fixture
def env(tmp_path, cloud):
    cluster = cf.ClusterEnv(tmp_path, port_base=PORT_BASE)
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


def run(env, tmp_path, endpoints, bridge, *phases):
    """DevStack's plugin phases (``mode phase`` strings), in one shell as
    stack.sh runs them, with this local.conf."""
    clouds = tmp_path / 'clouds.yaml'
    clouds.write_text(yaml.safe_dump({'clouds': {'devstack-system-admin': {
        'auth_type': 'none',
        'baremetal_endpoint_override': endpoints['baremetal'],
        'placement_endpoint_override': endpoints['placement']}}}))
    local_conf = {
        'DATA_DIR': tmp_path, 'HOST_IP': '127.0.0.1', 'IRONIC_VM_COUNT': 1,
        'IRONIC_VM_SPECS_RAM': 128, 'IRONIC_VM_SPECS_DISK': 1,
        'IRONIC_BOOT_MODE': 'bios', 'IRONIC_VM_INTERFACE_COUNT': 1,
        'IRONIC_NETWORK_SIMULATOR': 'linuxbridge',
        'IRONIC_VM_NETWORK_BRIDGE': bridge, 'PHYSICAL_NETWORK': 'physnet-ds',
        'IRONIC_VBMC_PORT_RANGE_START': PORT_BASE,
        'TENKS_CLUSTER': env.cluster,
        'TENKS_NODE_NAME_PREFIX': env.node_prefix,
        'TENKS_BRIDGE_PREFIX': env.bridge_prefix,
        'TENKS_STATE_DIR': env.state_dir,
        'TENKS_VENV': os.path.dirname(os.path.dirname(sys.executable)),
    }
    lines = ['set -o errexit -o nounset -o pipefail',
             'source %s' % STANDIN]
    lines += ['%s=%s' % item for item in local_conf.items()]
    lines += ['source %s/settings' % DEVSTACK]
    lines += ['source %s/plugin.sh %s' % (DEVSTACK, phase)
              for phase in phases]
    clean = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    return subprocess.run(
        ['bash', '-c', '\n'.join(lines)], capture_output=True, text=True,
        timeout=300, env=dict(clean, OS_CLIENT_CONFIG_FILE=str(clouds)))


def test_stack_enrols_available_nodes_unstack_and_clean_leave_nothing(
        env, tmp_path, openstack_services, cloud):
    bridge = 'fx' + env.node_prefix[1:]
    with source_bridge(bridge) as bridge_index:
        stacked = run(env, tmp_path, openstack_services, bridge,
                      'stack install', 'stack post-config', 'stack extra',
                      'stack test-config')
        assert stacked.returncode == 0, stacked.stdout + stacked.stderr
        assert 'Tenks already installed' in stacked.stdout
        assert os.path.exists(tmp_path / 'tenks-cluster.json')

        [node] = [n for n in cloud.baremetal.nodes(details=True)
                  if n.name == env.node_name(0)]
        assert node.provision_state == 'available'
        assert (node.driver, node.resource_class) == ('ipmi', 'baremetal')
        assert int(node.driver_info['ipmi_port']) == PORT_BASE
        assert node.driver_info['ipmi_address'] == '127.0.0.1'
        assert node.properties['memory_mb'] == 128
        assert node.properties['capabilities'] == 'boot_mode:bios'
        assert node.traits == ['CUSTOM_GOLD']
        [port] = list(cloud.baremetal.ports(node_id=node.id, details=True))
        assert port.physical_network == 'physnet-ds'
        # The physical network reaches DevStack's bridge.
        assert len(ports_of(bridge_index)) == 1
        assert cf.ipmitool(PORT_BASE, 'power', 'status').returncode == 0

        # clean.sh runs unstack.sh first, then the clean phase.
        cleaned = run(env, tmp_path, openstack_services, bridge,
                      'unstack', 'clean')
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        assert [n for n in cloud.baremetal.nodes()
                if n.name == env.node_name(0)] == []
        assert ports_of(bridge_index) == []
        assert env.leftovers() == []
        assert not os.path.exists(env.state_dir)
        assert not os.path.exists(tmp_path / 'tenks-cluster.json')
