"""etc/tenks/tenks.conf.sample is what oslo-config-generator makes now."""

import os

from oslo_config import generator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def test_sample_config_is_current(tmp_path):
    output = tmp_path / 'tenks.conf.sample'
    generator.main(['--config-file', os.path.join(
        ROOT, 'etc', 'oslo-config-generator', 'tenks.conf'),
        '--output-file', str(output)])
    with open(os.path.join(ROOT, 'etc', 'tenks', 'tenks.conf.sample')) as f:
        committed = f.read()
    assert output.read_text() == committed, (
        'etc/tenks/tenks.conf.sample is stale: run tox -e genconfig')
