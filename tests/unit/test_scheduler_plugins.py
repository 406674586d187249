"""An operator's own filter and weigher: installed as a package with
entry points, enabled by configuration, they change the host choice."""

import textwrap

import pytest
from stevedore import extension

from tenks import conf as tenks_conf
from tenks import exceptions
from tenks import scheduler
from tenks.cli import embedded
from tests.unit.test_filter_scheduler import facts
from tests.unit.test_filter_scheduler import hosts_of
from tests.unit.test_filter_scheduler import spec

PLUGINS = '''
from tenks.scheduler import filters
from tenks.scheduler import weights


class QuarantineFilter(filters.BaseHostFilter):
    name = 'quarantine'

    def host_passes(self, host, request):
        return 'CUSTOM_QUARANTINE' not in host.traits

    def reason(self, host, request):
        return 'quarantine', 'in quarantine'


class SsdWeigher(weights.BaseHostWeigher):
    name = 'ssd'

    def weigh(self, host, request):
        return 1.0 if 'CUSTOM_SSD' in host.traits else 0.0
'''
ENTRY_POINTS = '''
[tenks.scheduler.filters]
quarantine = tenks_lab:QuarantineFilter
broken = tenks_lab:NoSuchFilter

[tenks.scheduler.weighers]
ssd = tenks_lab:SsdWeigher
'''


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The package tenks-lab, installed on sys.path as pip would."""
    site = tmp_path / 'site'
    info = site / 'tenks_lab-1.0.dist-info'
    info.mkdir(parents=True)
    (info / 'METADATA').write_text(
        'Metadata-Version: 2.1\nName: tenks-lab\nVersion: 1.0\n')
    (info / 'entry_points.txt').write_text(ENTRY_POINTS)
    (site / 'tenks_lab.py').write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(site))
    # stevedore keeps the entry points it read, per group, per process.
    monkeypatch.setattr(extension.ExtensionManager, 'ENTRY_POINT_CACHE', {})


def conf_with(tmp_path, text):
    """A service configuration read from a file of ``text``."""
    path = tmp_path / 'tenks.conf'
    path.write_text(textwrap.dedent(text))
    conf = tenks_conf.new_conf()
    conf(['--config-file', str(path)], default_config_files=[])
    return conf


HOSTS = {'hv1': facts('hv1', memory_mb=8192),
         'hv2': facts('hv2', memory_mb=4096, traits=['CUSTOM_SSD']),
         'hv3': facts('hv3', memory_mb=16384, traits=['CUSTOM_QUARANTINE'])}


def chosen(conf):
    options = scheduler.options_from_conf(conf)
    return hosts_of(scheduler.schedule(spec(), HOSTS, [], None, options))


def test_an_operators_filter_and_weigher_change_the_host_choice(
        installed, tmp_path):
    # The built-in weighers pick the biggest host first.
    assert chosen(conf_with(tmp_path, '')) == ['hv3']
    assert chosen(conf_with(tmp_path, '''
        [scheduler]
        enabled_filters = enabled,quarantine,capacity,bmc_port
        ''')) == ['hv1']
    assert chosen(conf_with(tmp_path, '''
        [scheduler]
        enabled_filters = enabled,quarantine,capacity,bmc_port
        enabled_weighers = cpu,ram,disk,ssd
        ssd_weight_multiplier = 5
        ''')) == ['hv2']
    # Its multiplier, as any weigher's: negative avoids SSDs.
    assert chosen(conf_with(tmp_path, '''
        [scheduler]
        enabled_weighers = cpu,ram,disk,ssd
        ssd_weight_multiplier = -5
        ''')) == ['hv3']
    assert chosen(conf_with(tmp_path, '''
        [scheduler]
        enabled_weighers = ssd
        ssd_weight_multiplier = -5
        ''')) == ['hv1']


def test_no_valid_host_gives_an_operators_filter_reason(installed, tmp_path):
    conf = conf_with(tmp_path, '''
        [scheduler]
        enabled_filters = enabled,quarantine,capacity,bmc_port
        ''')
    hosts = {name: facts(name, traits=['CUSTOM_QUARANTINE'])
             for name in ('hv1', 'hv2')}
    with pytest.raises(exceptions.NoValidHost) as refused:
        scheduler.schedule(spec(), hosts, [], None,
                           scheduler.options_from_conf(conf))
    assert str(refused.value) == (
        'No valid host for node type t (specs[0]): 2 hypervisors; '
        'quarantine removed 2 (hv1: in quarantine; hv2: in quarantine)')


def test_only_registered_names_are_choices(installed, tmp_path):
    conf = conf_with(tmp_path, '''
        [scheduler]
        enabled_filters = enabled,rack
        ''')
    with pytest.raises(exceptions.ConfigError) as refused:
        scheduler.options_from_conf(conf)
    assert 'no tenks.scheduler.filters registered as rack (registered: ' \
        'aggregate_metadata, availability_zone, bmc_memory, bmc_port, ' \
        'bridge_ports, broken, capacity, enabled, firmware, machine, ' \
        'network_driver, physnets, pool_space, quarantine, traits)' \
        in str(refused.value)


def test_a_plugin_that_cannot_load_is_a_configuration_error(installed):
    with pytest.raises(exceptions.ConfigError,
                       match='tenks.scheduler.filters broken '
                             r'\(tenks_lab:NoSuchFilter\) cannot be loaded'):
        scheduler.load_options(enabled_filters=['enabled', 'broken'])


def test_a_conductor_with_an_unknown_filter_does_not_start(conf, hypervisor):
    conf.set_override('enabled_filters', ['enabled', 'rack'],
                      group='scheduler')
    with pytest.raises(exceptions.ConfigError, match='registered as rack'):
        with embedded.embedded(conf):
            pass
