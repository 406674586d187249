"""What a large cluster of real nodes relies on, at test size: thin volumes
counted at what they take when made, and IPMI BMCs that must fit in the
memory a hypervisor has for them (real libvirt, virtualbmc, bridges;
embedded mode)."""


import libvirt
import pytest

from tenks import exceptions
from tenks import names
from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional

# IPMI ports of this module: 9760-9779.
PORT_BASE = 9760


@pytest.fixture
def env(tmp_path):
    env = cf.ClusterEnv(tmp_path, port_base=PORT_BASE)
    with cf.checked(env):
        yield env


def test_ipmi_bmcs_that_do_not_fit_in_memory_are_refused(env):
    # 512 KiB each in 1 MiB: two BMCs fit, three do not.
    env.conf.set_override('ipmi_free_memory_mb', 1, group='hostagent')
    env.conf.set_override('ipmi_bmc_memory_kib', 512, group='hostagent')
    with pytest.raises(exceptions.BmcMemoryExhausted) as raised:
        env.deploy(env.spec(count=3))
    assert str(raised.value) == (
        'Hypervisor %s has too little memory for the new IPMI BMCs: 3 of '
        'them need 1.5 MiB (1572864 bytes) at 512.0 KiB (524288 bytes) '
        'each, it has 1.0 MiB (1048576 bytes) free'
        % env.conf.hostagent.host)
    assert env.leftovers() == []
    assert env.nodes() == []

    env.deploy(env.spec(count=2))
    assert cf.ipmitool(PORT_BASE + 1, 'power', 'status').returncode == 0
    env.teardown()


def test_thin_volumes_let_a_cluster_larger_than_the_pool_deploy(
        small_pools, env):
    # Two nodes of a 4 GiB qcow2 volume on 3 GiB: only thin.
    env.conf.set_override('pool_dir', str(small_pools), group='hostagent')
    spec = env.spec(count=2, physical_networks=[], node_types={'small': {
        'memory_mb': 128, 'vcpus': 1, 'volumes': [{'capacity': '4GiB'}]}})
    with pytest.raises(exceptions.PoolSpaceExhausted) as raised:
        env.deploy(spec)
    assert 'they need 8.0 GiB (8589934592 bytes)' in str(raised.value)
    assert env.leftovers() == []
    assert env.nodes() == []

    env.conf.set_override('thin_volumes', True, group='hostagent')
    env.deploy(spec)
    conn = libvirt.open(cf.URI)
    try:
        pool = conn.storagePoolLookupByName(names.pool(env.cluster))
        for node in env.nodes():
            _, capacity, allocation = pool.storageVolLookupByName(
                '%svol0' % node['name']).info()
            assert capacity == 4 * 1024 ** 3
            assert allocation < 1024 ** 2
    finally:
        conn.close()
    env.teardown()
