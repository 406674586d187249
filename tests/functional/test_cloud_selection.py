"""Choosing the cloud as the openstack CLI does: clouds.yaml selected by
OS_CLIENT_CONFIG_FILE + OS_CLOUD or by --os-cloud, and the openrc
variables, each enrolling a node in the real standalone Ironic through
the real ``tenks`` command."""

import os
import subprocess

import pytest
import yaml

from tests.functional import cluster_fixtures as cf
from tests.functional import openstack_fixtures as of

pytestmark = pytest.mark.functional

# This helper's IPMI ports: 8400-8499.
PORT_BASE = 8400


@pytest.fixture
def env(tmp_path, cloud):
    cluster = cf.ClusterEnv(tmp_path, port_base=PORT_BASE)
    yield cluster
    left = of.cleaned_up(cluster, cloud)
    assert left == [], 'the test left %s behind' % left


def run_tenks(env, tmp_path, environ, *args):
    clean = {k: v for k, v in os.environ.items() if not k.startswith('OS_')}
    return subprocess.run(
        [cf.TENKS, '--state-dir', env.state_dir, *args],
        capture_output=True, text=True, timeout=180,
        env=dict(clean, **environ))


def write_clouds_yaml(tmp_path, ironic_url):
    path = tmp_path / 'clouds.yaml'
    path.write_text(yaml.safe_dump({'clouds': {
        # A decoy first, so that nothing picks "the only cloud".
        'elsewhere': {'auth_type': 'none',
                      'baremetal_endpoint_override': 'http://127.0.0.1:9'},
        'mycloud': {'auth_type': 'none',
                    'baremetal_endpoint_override': ironic_url},
    }}))
    return str(path)


def enrolled_spec_file(env, tmp_path):
    spec = env.spec(
        count=1,
        specs=[{'type': 'small', 'count': 1,
                'node_name_prefix': env.node_prefix,
                'ironic_config': {'resource_class': 'tenks-os-cloud'}}])
    path = tmp_path / 'cluster.yaml'
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def selections(tmp_path, ironic_url):
    clouds = write_clouds_yaml(tmp_path, ironic_url)
    return {
        'OS_CLOUD': ({'OS_CLIENT_CONFIG_FILE': clouds,
                      'OS_CLOUD': 'mycloud'}, []),
        # --os-cloud wins over an OS_CLOUD naming another cloud.
        '--os-cloud': ({'OS_CLIENT_CONFIG_FILE': clouds,
                        'OS_CLOUD': 'elsewhere'},
                       ['--os-cloud', 'mycloud']),
        'openrc': ({'OS_AUTH_TYPE': 'none',
                    'OS_BAREMETAL_ENDPOINT_OVERRIDE': ironic_url}, []),
    }


@pytest.mark.parametrize('how', ['OS_CLOUD', '--os-cloud', 'openrc'])
def test_cloud_chosen_like_openstack_cli_enrols(env, tmp_path,
                                               openstack_services, how):
    environ, options = selections(
        tmp_path, openstack_services['baremetal'])[how]
    spec = enrolled_spec_file(env, tmp_path)

    done = run_tenks(env, tmp_path, environ, *options, 'deploy', spec)
    assert done.returncode == 0, done.stderr

    cloud = of.connection()
    [node] = [n for n in cloud.baremetal.nodes(details=True)
              if n.name == env.node_name(0)]
    assert node.provision_state == 'available'
    assert node.resource_class == 'tenks-os-cloud'
    assert int(node.driver_info['ipmi_port']) == PORT_BASE

    gone = run_tenks(env, tmp_path, environ, *options, 'teardown',
                     env.cluster)
    assert gone.returncode == 0, gone.stderr
    assert [n for n in cloud.baremetal.nodes()
            if n.name == env.node_name(0)] == []


def test_no_cloud_anywhere_is_named_before_anything_is_made(env, tmp_path):
    spec = enrolled_spec_file(env, tmp_path)
    done = run_tenks(env, tmp_path,
                     {'OS_CLIENT_CONFIG_FILE': str(tmp_path / 'none.yaml')},
                     'deploy', spec)
    assert done.returncode != 0
    assert 'Cannot reach Ironic at (none configured)' in done.stderr
    assert 'OS_CLOUD' in done.stderr
    assert env.leftovers() == []
