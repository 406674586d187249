"""etc/tenks/tenks.conf.sample is what oslo-config-generator makes now,
and lists every option a service reads; the README's examples parse."""

import configparser
import os
import re

from oslo_config import cfg
from oslo_config import generator
from oslo_log import log as logging

from tenks import conf as tenks_conf
from tenks import policy
from tenks import rpc

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


def service_conf():
    """The options a tenks-conductor or tenks-hostagent reads: those
    tenks.daemon registers, and [oslo_policy], which the conductor's
    policy enforcer registers when it starts."""
    conf = tenks_conf.new_conf()
    logging.register_options(conf)
    rpc.register_opts(conf)
    policy.Enforcer(conf)
    return conf


def test_sample_lists_every_option_a_service_reads():
    sample = configparser.RawConfigParser(strict=False)
    with open(os.path.join(ROOT, 'etc', 'tenks', 'tenks.conf.sample')) as f:
        # Options are commented out in the sample: uncomment them.
        sample.read_string(re.sub(r'^#(\w+) =', r'\1 =', f.read(),
                                  flags=re.M))
    conf = service_conf()
    missing = []
    for key in conf:
        if isinstance(conf[key], cfg.ConfigOpts.GroupAttr):
            missing += ['[%s] %s' % (key, option) for option in conf[key]
                        if not sample.has_option(key, option)]
        elif key not in sample.defaults():
            missing.append('[DEFAULT] %s' % key)
    # Command-line only options of oslo.config itself.
    missing = [m for m in missing if m not in (
        '[DEFAULT] config_file', '[DEFAULT] config_dir',
        '[DEFAULT] config_source', '[DEFAULT] shell_completion')]
    assert missing == []
    for option in ('transport_url', 'debug', 'log_file', 'host'):
        assert option in sample.defaults()
    assert sample.has_option('oslo_messaging_rabbit', 'heartbeat_rate')
    assert sample.has_option('oslo_policy', 'policy_file')


def test_readme_ini_examples_have_no_inline_comments():
    """oslo.config keeps "value  # comment" as the value."""
    with open(os.path.join(ROOT, 'README.md')) as f:
        blocks = re.findall(r'```ini\n(.*?)```', f.read(), flags=re.S)
    assert blocks
    inline = [line for block in blocks for line in block.splitlines()
              if re.match(r'\s*[\w.]+\s*=.*#', line)]
    assert inline == []
