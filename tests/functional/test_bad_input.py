"""Specs that would exhaust the host, given to the real ``tenks`` command
under a memory limit: refused at once, naming where, instead of taking
the machine's memory."""

import resource
import subprocess

import pytest

from tenks import exceptions
from tests.functional import cluster_fixtures as cf

pytestmark = pytest.mark.functional

MEMORY_LIMIT = 1024 ** 3  # bytes of address space for the command
TIMEOUT = 60  # s; the refusals take well under a second


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def validate(tmp_path, text):
    path = tmp_path / 'cluster.yaml'
    path.write_text(text)
    return path, subprocess.run(
        [cf.TENKS, '--state-dir', str(tmp_path / 'state'), 'validate',
         str(path)], capture_output=True, text=True, timeout=TIMEOUT,
        preexec_fn=limited)


BASE = '''node_types:
  small: {memory_mb: 128, vcpus: 1}
specs:
  - type: small
    count: 1
'''


def alias_bomb(levels=9, width=9):
    """A value whose YAML aliases expand to width ** levels values."""
    lines = ['a0: &a0 [x]']
    for level in range(1, levels + 1):
        lines.append('a%d: &a%d [%s]' % (
            level, level, ', '.join(['*a%d' % (level - 1)] * width)))
    return '\n'.join(lines) + '\n'


def test_an_alias_bomb_is_refused_naming_where(tmp_path):
    text = BASE + '    ironic_config:\n      resource_class: gold\n' \
        '      properties:\n' + ''.join(
            '        ' + line + '\n' for line in alias_bomb().splitlines())
    path, done = validate(tmp_path, text)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(
        '%s: invalid cluster spec:\n  specs[0].ironic_config.properties.'
        % path), done.stderr
    assert ('the spec holds more than 1000000 values with its YAML aliases '
            'expanded' in done.stderr)


def test_a_huge_file_is_refused_unread(tmp_path):
    path, done = validate(tmp_path, BASE + '# %s\n' % ('x' * 5 * 1024 ** 2))
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        '%s: invalid cluster spec:\n  the file is larger than 4 MiB, more '
        'than any cluster spec needs\n' % path)


def test_thousands_of_entries_validate(tmp_path):
    entries = ''.join('  - {type: small, count: 1, node_name_prefix: n%d}\n'
                      % (i % 997) for i in range(16000))
    path, done = validate(tmp_path, 'node_types:\n  small: {memory_mb: 128, '
                          'vcpus: 1, volumes: [{capacity: 1GiB}]}\n'
                          'specs:\n' + entries)
    assert done.returncode == 0, done.stderr
    assert 'valid: cluster default, 16000 node(s)' in done.stdout


@pytest.mark.parametrize('address, why', [
    ('198.51.100.77', 'not an address of this hypervisor'),
    ('127.255.255.255', 'a broadcast address'),
])
def test_a_bmc_address_not_the_host_s_is_refused_naming_the_field(
        tmp_path, address, why):
    """Checked by the hostagent that would serve the BMCs, for plan and
    deploy alike, before anything is made."""
    env = cf.ClusterEnv(tmp_path, port_base=9640)
    with cf.checked(env):
        spec = env.spec(count=1, ipmi_address=address)
        for attempt in (env.plan, env.deploy):
            with pytest.raises(exceptions.BmcAddressInvalid) as raised:
                attempt(spec)
            assert str(raised.value) == (
                'ipmi_address: %s cannot be where the BMCs of hypervisor %s '
                'listen: it is %s (on %s)' % (
                    address, env.conf.hostagent.host, why,
                    env.conf.hostagent.host))
        assert env.nodes() == []
