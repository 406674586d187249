"""Service configuration (oslo.config).

The options are registered on a ConfigOpts object by :func:`register`,
never at import time, so tests and embedded runs can use a private
``cfg.ConfigOpts()``. ``list_opts`` feeds oslo-config-generator.
"""

import os
import socket

from oslo_config import cfg

STATE_DIR_ENV = 'TENKS_STATE_DIR'
# What a service name may be on the bus (an AMQP routing key part); a
# name with spaces is most often an inline comment oslo.config kept.
HOST_REGEX = r'^[A-Za-z0-9._-]+$'
# The checkout Tenks runs from, where tools/setup.sh makes its venvs.
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The built-in filters and weighers of tenks.scheduler (setup.cfg
# registers them), in the order they run by default.
SCHEDULER_FILTERS = ('enabled', 'network_driver', 'firmware', 'machine',
                     'physnets',
                     'traits', 'availability_zone', 'aggregate_metadata',
                     'pool_space', 'capacity', 'bmc_memory', 'bridge_ports',
                     'bmc_port')
SCHEDULER_WEIGHERS = ('cpu', 'ram', 'disk')
# KiB of memory each IPMI BMC takes in the IPMI host: the growth of its
# PSS from 100 to 1,000 BMCs that each answered once (tools/bench_ipmi.py:
# 9.4 KiB), rounded up for a few more sessions each.
IPMI_BMC_MEMORY_KIB = 16


def default_state_dir():
    if os.environ.get(STATE_DIR_ENV):
        return os.environ[STATE_DIR_ENV]
    if os.geteuid() == 0:
        return '/var/lib/tenks'
    base = os.environ.get('XDG_STATE_HOME',
                          os.path.expanduser('~/.local/state'))
    return os.path.join(base, 'tenks')


default_opts = [
    cfg.StrOpt('host',
               default=socket.gethostname(),
               regex=HOST_REGEX,
               sample_default='<hostname>',
               help='Name of this service on the bus, as in Nova and Ironic: '
                    'the server a conductor or a hostagent listens as. It '
                    'need not be a hostname, but may hold only letters, '
                    'digits, ".", "_" and "-" (no inline comments: '
                    'oslo.config keeps them in the value). [conductor] '
                    'host and [hostagent] host override it.'),
    cfg.StrOpt('state_dir',
               default=default_state_dir(),
               sample_default='/var/lib/tenks',
               help='Directory for the state database, the flow '
                    'persistence and the daemons Tenks starts. Created '
                    'with mode 0700: it holds BMC passwords. Also set by '
                    'the %s environment variable.' % STATE_DIR_ENV),
]

conductor_opts = [
    cfg.StrOpt('host',
               regex=HOST_REGEX,
               help='Name of this conductor on the bus; hostagents send '
                    'their results to it. Default: [DEFAULT] host.'),
    cfg.IntOpt('agent_timeout',
               default=120, min=1,
               help='Seconds a flow task waits for a hostagent to report '
                    'the result of one request.'),
    cfg.IntOpt('agent_retries',
               default=1, min=0,
               help='Times a request a hostagent did not answer within '
                    'agent_timeout is sent again before the task fails.'),
    cfg.IntOpt('workers',
               default=16, min=1,
               help='Tasks that run at the same time, counted across '
                    'every flow (deploys, teardowns) of this conductor: '
                    'they share one pool of threads.'),
    cfg.IntOpt('max_operations',
               default=8, min=1,
               help='Operations (deploys, teardowns) that run at the same '
                    'time; more are accepted and wait, in the order they '
                    'came, until one ends.'),
    cfg.IntOpt('agent_down_time',
               default=30, min=1,
               help='Seconds without a heartbeat after which a hostagent '
                    'counts as down and gets no new nodes.'),
    cfg.IntOpt('graceful_shutdown_timeout',
               default=60, min=0,
               help='Seconds a stopping conductor lets running operations '
                    'finish; what still runs is resumed at its next start.'),
    cfg.FloatOpt('operation_retention_days',
                 default=7, min=0,
                 help='Days an operation that has ended, the events and '
                      'the requests no hostagent answered are kept in the '
                      'state database (0: for ever). The flow of an '
                      'operation that has ended is forgotten whatever '
                      'this says: it is never resumed. A conductor prunes '
                      'as it starts, and every hour.'),
    cfg.StrOpt('jobboard_url',
               secret=True,
               help='Where several conductors share their operations: a '
                    'TaskFlow jobboard, on which every operation is '
                    'posted as a job that one running conductor claims '
                    'and runs, and another resumes if that one dies; its '
                    'server also holds the conductors\' locks and '
                    'membership (tooz). redis://[:PASSWORD@]HOST:PORT[/DB]'
                    '[?namespace=NAME] or zookeeper://HOST:PORT[,HOST:PORT]'
                    '[/NAMESPACE]; the namespace (default: tenks) '
                    'separates the conductors of one state database from '
                    'those of another on the same server. Needs a '
                    'shared [database] connection and tenks[jobboard]. '
                    'Unset (the default): this conductor runs what it '
                    'accepts and resumes it when it starts again.'),
    cfg.IntOpt('jobboard_claim_expiry',
               default=30, min=3,
               help='Seconds after which the claim of a conductor that '
                    'stopped renewing it (one killed, or cut off from the '
                    'jobboard) expires and another conductor takes its '
                    'jobs over; also how long a dead conductor stays in '
                    '"tenks conductor list" and holds its locks. A '
                    'running conductor renews its claims every third of '
                    'it.'),
]

database_opts = [
    cfg.StrOpt('connection',
               secret=True,
               deprecated_opts=[cfg.DeprecatedOpt('database_connection',
                                                  group='conductor')],
               help='SQLAlchemy URL of the state database, which '
                    'conductors share: postgresql+psycopg://USER:PASSWORD@'
                    'HOST/DB (pip extra tenks[postgresql]) or '
                    'mysql+pymysql://USER:PASSWORD@HOST/DB (tenks[mysql]). '
                    '"tenks-manage db sync" creates and upgrades its schema; '
                    'a conductor refuses one older than its code. Default: '
                    'a SQLite file in state_dir, which Tenks upgrades '
                    'itself.'),
]

hostagent_opts = [
    cfg.StrOpt('host',
               regex=HOST_REGEX,
               help='Name of this hypervisor: the server the conductor '
                    'addresses casts to. Default: [DEFAULT] host.'),
    cfg.StrOpt('libvirt_uri',
               default='qemu:///system',
               help='libvirt connection URI of this hypervisor.'),
    cfg.IntOpt('libvirt_keepalive_interval', default=0, min=0,
               help='Seconds between the keepalive messages the hostagent '
                    'sends libvirtd when it has heard nothing from it; after '
                    'libvirt_keepalive_count of them go unanswered, the '
                    'connection is closed and the requests waiting on it '
                    'fail ("connection closed due to keepalive timeout"), '
                    'rather than waiting for a hung libvirtd until the '
                    'conductor gives up (agent_timeout). It needs libvirt\'s '
                    'event loop, which wakes on every libvirt call: a '
                    '1,000-node re-run takes about 5 % longer. 0 (the '
                    'default): none.'),
    cfg.IntOpt('libvirt_keepalive_count', default=5, min=1,
               help='Unanswered keepalive messages after which the '
                    'connection to libvirtd counts as dead (see '
                    'libvirt_keepalive_interval).'),
    cfg.StrOpt('virt_driver', default='libvirt',
               help='Virtualisation driver (tenks.virt_drivers entry '
                    'point).'),
    cfg.ListOpt('network_drivers',
                default=['linuxbridge', 'openvswitch'],
                deprecated_name='network_driver',
                help='Network drivers this hypervisor offers '
                     '(tenks.network_drivers entry points): a cluster '
                     'spec\'s bridge_type names one of them.'),
    cfg.StrOpt('ovsdb_connection',
               default='unix:/var/run/openvswitch/db.sock',
               help='OVSDB server of the local Open vSwitch, for the '
                    'openvswitch network driver.'),
    cfg.IntOpt('ovsdb_timeout', default=10, min=1,
               help='Seconds an Open vSwitch transaction may take.'),
    cfg.StrOpt('ovs_datapath_type', default='netdev',
               choices=['netdev', 'system'],
               help='datapath_type of the Open vSwitch bridges Tenks '
                    'makes: netdev (userspace, works without the '
                    'kernel\'s openvswitch module) or system (the '
                    'kernel datapath).'),
    cfg.StrOpt('bmc_driver', default='virtualbmc',
               help='IPMI BMC driver (tenks.bmc_drivers entry point).'),
    cfg.StrOpt('redfish_driver', default='sushy-tools',
               help='Redfish BMC driver (tenks.redfish_drivers entry '
                    'point).'),
    cfg.StrOpt('snmp_driver', default='virtualpdu',
               help='SNMP power driver (tenks.snmp_drivers entry point).'),
    cfg.StrOpt('virtualpdu_python',
               default=os.path.join(REPOSITORY, '.venv-virtualpdu', 'bin',
                                    'python'),
               sample_default='<repository>/.venv-virtualpdu/bin/python',
               help='Python of the venv VirtualPDU runs in (its own: it '
                    'needs older pysnmp and pyasn1 than Tenks); '
                    'tools/setup.sh makes it.'),
    cfg.StrOpt('pool_dir',
               default='/var/lib/libvirt/tenks_pool',
               help='Parent directory of the clusters\' storage pools.'),
    cfg.StrOpt('deployments_dir',
               default='/var/lib/libvirt/tenks_deployments',
               help='Where hostagents note, outside their state '
                    'directories, the state directory of each deployment '
                    'they make things for: "tenks audit" removes the '
                    'things of a deployment whose state directory is gone '
                    'or no longer records it, and leaves those another '
                    'state directory holds. Shared by the hostagents of '
                    'the machine.'),
    cfg.StrOpt('console_log_dir',
               help='Directory for the nodes\' serial console logs. '
                    'Default: logs/console in state_dir.'),
    cfg.BoolOpt('keep_console_logs',
                default=False,
                help='Keep a node\'s console log when the node is '
                     'removed (teardown, count down), for a look after '
                     'a CI job; by default it goes with the node.'),
    cfg.StrOpt('nvram_dir',
               default='/var/lib/libvirt/qemu/nvram',
               help='Directory of the UEFI nodes\' NVRAM files '
                    '(<node>_VARS.fd, one per node); QEMU\'s user must '
                    'be able to reach it.'),
    cfg.ListOpt('firmware_dirs',
                default=['/etc/qemu/firmware', '/usr/share/qemu/firmware'],
                help='Directories of QEMU firmware descriptors (JSON), '
                     'where UEFI and secure boot firmware (OVMF) is '
                     'looked for; a file name in an earlier directory '
                     'hides the same name in a later one.'),
    cfg.PortOpt('vbmcd_control_port',
                deprecated_for_removal=True,
                deprecated_reason='Ignored: the IPMI BMCs are controlled '
                                  'over a Unix socket in state_dir, and '
                                  'no TCP port is opened for it.',
                help='Ignored (was the loopback TCP port of the virtualbmc '
                     'daemon Tenks ran).'),
    cfg.IntOpt('heartbeat_interval',
               default=10, min=1,
               help='Seconds between the registrations a hostagent sends '
                    'the conductors, with its current facts.'),
    cfg.IntOpt('graceful_shutdown_timeout',
               default=60, min=0,
               help='Seconds a stopping hostagent lets the requests it runs '
                    'finish. Then it exits without those still running: '
                    'their conductors see them unanswered, as from a '
                    'hostagent that was killed, and retry or roll back.'),
    cfg.DictOpt('physnet_mappings',
                default={},
                help="physnet:interface mappings of this hypervisor; they "
                     "take precedence over a cluster spec's."),
    cfg.IPOpt('ipmi_address',
              help="Address this hypervisor's BMCs listen on, instead of "
                   "the cluster spec's ipmi_address."),
    cfg.IPOpt('transfer_address',
              help="Address this hypervisor serves the volumes of nodes "
                   "moving away on (host maintenance), while they move; "
                   "the other hypervisors must reach it. Default: "
                   "ipmi_address, else 127.0.0.1 (moves only between "
                   "hostagents of this machine)."),
    cfg.IntOpt('transfer_timeout',
               default=3600, min=1,
               help='Seconds the volumes of a node moving away stay '
                    'served, at most.'),
    cfg.IPOpt('redfish_address',
              help="Address this hypervisor's Redfish emulators listen on, "
                   "instead of the cluster spec's redfish_address. "
                   "Default: ipmi_address when that is set."),
    cfg.PortOpt('redfish_port',
                help="TCP port of this hypervisor's Redfish emulator, "
                     "instead of the cluster spec's redfish_port (one "
                     "emulator per cluster: set it only for one cluster "
                     "per hypervisor)."),
    cfg.StrOpt('redfish_tls_certificate',
               help='PEM certificate (chain) the Redfish emulators serve '
                    'HTTPS with; with redfish_tls_key. Unset: plain HTTP. '
                    'Copied next to each emulator, readable by root only.'),
    cfg.StrOpt('redfish_tls_key',
               help='PEM private key of redfish_tls_certificate.'),
    cfg.StrOpt('resource_prefix',
               default='',
               regex=r'^[a-z0-9]{0,4}$',
               help='Prefix of the bridges and storage pools made on this '
                    'hypervisor, so several hostagents can share a '
                    'machine as distinct hypervisors.'),
    cfg.BoolOpt('enable_on_register',
                default=True,
                help='Whether this hypervisor takes new nodes from its '
                     'first registration on. False: it registers disabled, '
                     'so an operator can add it to its aggregates first '
                     '("tenks hypervisor set --enable").'),
    cfg.BoolOpt('thin_volumes',
                default=False,
                help='Count the qcow2 volumes made empty or over a backing '
                     'file at what they take when made (their metadata, '
                     'under 1 MiB) rather than at their capacity, in the '
                     'free-space check of the pool and in DISK_GB: they '
                     'grow only as their nodes write. For large clusters '
                     'of nodes that write little; the pool can then fill '
                     'up as they do. Volumes that copy an image always '
                     'count at their capacity.'),
    cfg.IntOpt('ipmi_bmc_memory_kib',
               default=IPMI_BMC_MEMORY_KIB, min=0,
               help='Memory each IPMI BMC takes in the process that serves '
                    'the BMCs, in KiB (the default is measured by '
                    'tools/bench_ipmi.py). A deploy is refused before it '
                    'makes anything when its new IPMI BMCs would take more '
                    'than the memory free for them.'),
    cfg.IntOpt('ipmi_free_memory_mb',
               min=0,
               help='Memory free for new IPMI BMCs on this hypervisor, in '
                    'MiB. Unset: what the hypervisor has available '
                    '(MemAvailable in /proc/meminfo) when a deploy starts.'),
    cfg.ListOpt('traits',
                default=[],
                help='CUSTOM_* traits of this hypervisor, which cluster '
                     'specs may require or forbid (specs[].required_traits, '
                     'forbidden_traits).'),
] + [
    cfg.DictOpt('%s_inventory' % rc.lower(),
                default={},
                help='Inventory of %s of this hypervisor, as in Placement: '
                     'allocation_ratio, reserved, min_unit, max_unit, '
                     'step_size (e.g. "allocation_ratio:%s,reserved:0"). '
                     'The total comes from the hypervisor.' % (rc, ratio))
    for rc, ratio in (('VCPU', '16.0'), ('MEMORY_MB', '1.0'),
                      ('DISK_GB', '1.0'))
]

scheduler_opts = [
    cfg.ListOpt('enabled_filters',
                default=list(SCHEDULER_FILTERS),
                help='Filters a hypervisor must pass to take a node, in '
                     'this order: names registered under the '
                     'tenks.scheduler.filters entry points, the '
                     'built-in ones or an operator\'s own.'),
    cfg.ListOpt('enabled_weighers',
                default=list(SCHEDULER_WEIGHERS),
                help='Weighers that rank the hypervisors the filters '
                     'leave: names registered under the '
                     'tenks.scheduler.weighers entry points. The '
                     'multiplier of weigher NAME is the option '
                     'NAME_weight_multiplier of this group (1.0 for '
                     'an operator\'s own weigher when unset).'),
    cfg.FloatOpt('ram_weight_multiplier', default=1.0,
                 help='Weight of free MEMORY_MB: positive spreads nodes '
                      'over the hypervisors, negative packs them.'),
    cfg.FloatOpt('cpu_weight_multiplier', default=1.0,
                 help='Weight of free VCPU: positive spreads, negative '
                      'packs.'),
    cfg.FloatOpt('disk_weight_multiplier', default=1.0,
                 help='Weight of free DISK_GB: positive spreads, '
                      'negative packs.'),
    cfg.StrOpt('default_availability_zone', default='nova',
               help='Availability zone of the hypervisors that are in '
                    'no aggregate with a zone.'),
]


def weight_multiplier(conf, weigher):
    """``[scheduler] <weigher>_weight_multiplier``: an operator's own
    weigher's is registered here when first read, as a float of
    default 1.0."""
    name = '%s_weight_multiplier' % weigher
    if name not in conf.scheduler:
        conf.register_opt(cfg.FloatOpt(name, default=1.0), group='scheduler')
    return conf.scheduler[name]


openstack_opts = [
    cfg.StrOpt('cloud',
               help='Cloud of clouds.yaml that Ironic, Nova and Placement '
                    'are reached through (openstacksdk); tenks --os-cloud '
                    'sets it. When neither it nor the endpoints below are '
                    'set, OS_CLOUD or the openrc variables (OS_AUTH_URL, '
                    '...) choose the cloud, as for the openstack CLI.'),
    cfg.URIOpt('ironic_url',
               help='Ironic endpoint of a standalone cloud without '
                    'Keystone (used when no cloud is set; wins over '
                    'OS_CLOUD and the openrc variables).'),
    cfg.URIOpt('nova_url',
               help='Nova API endpoint of a standalone cloud.'),
    cfg.URIOpt('placement_url',
               help='Placement endpoint of a standalone cloud.'),
    cfg.IntOpt('provision_timeout',
               default=300, min=1,
               help='Seconds a node may take to become manageable, then '
                    'available.'),
    cfg.FloatOpt('poll_interval',
                 default=0.5, min=0.05,
                 help='Seconds between two looks at the nodes in '
                      'transition: one list of every Ironic node\'s '
                      'provision state, however many nodes wait.'),
    cfg.IntOpt('ironic_concurrency',
               default=8, min=1,
               help='Ironic API calls in flight at the same time (per '
                    'conductor), however many nodes are enrolled or '
                    'removed at once, plus the one list of the nodes in '
                    'transition: a 409 (node locked) or 503 is '
                    'tried again, but an Ironic with fewer API workers '
                    'than this answers more slowly. How many nodes are '
                    'in flight is [conductor] workers.'),
    cfg.IntOpt('placement_aggregates_interval',
               default=60, min=0,
               help='Seconds between two passes of a running '
                    'tenks-conductor that bring the Placement resource '
                    'providers of enrolled nodes (nova-compute makes them '
                    'when it likes) into their hypervisors\' aggregates; '
                    'one member_of query per aggregate when all are in '
                    'step. 0: only deploys and aggregate changes do it.'),
]


# A version of an RPC API, as oslo.messaging takes it.
RPC_VERSION_REGEX = r'^[0-9]+\.[0-9]+$'

upgrade_levels_opts = [
    cfg.StrOpt('conductor',
               regex=RPC_VERSION_REGEX,
               help='The newest version of the conductor RPC API this '
                    'service\'s clients send (the CLI, a hostagent, '
                    'another service), as Nova\'s [upgrade_levels]: set '
                    'it to the version of the oldest conductor while '
                    'older conductors still run during a rolling '
                    'upgrade, and remove it once all are upgraded. A '
                    'call that needs a newer version fails at once '
                    '(VersionCapped), naming it. Unset: no cap.'),
    cfg.StrOpt('hostagent',
               regex=RPC_VERSION_REGEX,
               help='The newest version of the hostagent RPC API a '
                    'conductor sends: the version of the oldest '
                    'hostagent while older ones still run during a '
                    'rolling upgrade. Requests are sent in the older '
                    'form where one exists; one that needs a newer '
                    'hostagent fails at once (VersionCapped), naming '
                    'it. Unset: no cap.'),
]


SERVICE_GROUPS = ('conductor', 'hostagent')



fake_opts = [
    cfg.FloatOpt('latency', default=0, min=0,
                 help='Seconds each change a fake driver makes (creating, '
                      'changing or removing a simulated volume, domain, '
                      'bridge, port or BMC) takes.'),
    cfg.FloatOpt('failure_rate', default=0, min=0, max=1,
                 help='Share of the changes of the fake drivers that fail '
                      '(with a DriverError, before anything changed).'),
    cfg.IntOpt('cpus', default=1024, min=1,
               help='CPUs of the hypervisor the fake virt driver '
                    'simulates.'),
    cfg.IntOpt('memory_mb', default=4 * 1024 * 1024, min=1,
               help='Memory (MiB) of the hypervisor the fake virt driver '
                    'simulates.'),
]


def register(conf):
    conf.register_opts(default_opts)
    conf.register_opts(conductor_opts, group='conductor')
    conf.register_opts(database_opts, group='database')
    conf.register_opts(hostagent_opts, group='hostagent')
    conf.register_opts(openstack_opts, group='openstack')
    conf.register_opts(scheduler_opts, group='scheduler')
    conf.register_opts(fake_opts, group='fake')
    register_upgrade_levels(conf)
    return conf


def register_upgrade_levels(conf):
    """[upgrade_levels], which the RPC clients read: also registered by
    tenks.rpc on the ConfigOpts of another service's bus."""
    conf.register_opts(upgrade_levels_opts, group='upgrade_levels')


class ConfigOpts(cfg.ConfigOpts):
    """A ConfigOpts where [conductor] host and [hostagent] host default
    to [DEFAULT] host once the command line and files are parsed.

    (oslo.config's ``$host`` substitution cannot do it: within a group
    it finds the group's own ``host`` first.)
    """

    def __call__(self, *args, **kwargs):
        super().__call__(*args, **kwargs)
        try:
            host = self.host
        except cfg.Error:
            # Not a valid name: the service's checks report it.
            return
        for group in SERVICE_GROUPS:
            self.set_default('host', host, group=group)


def new_conf():
    """A private ConfigOpts with every Tenks option registered."""
    return register(ConfigOpts())


def list_opts():
    """Tenks' options for oslo-config-generator (namespace ``tenks``).

    With the oslo.messaging groups it leaves out of its own list.
    """
    from tenks import rpc
    return [
        ('DEFAULT', default_opts),
        ('conductor', conductor_opts),
        ('database', database_opts),
        ('fake', fake_opts),
        ('hostagent', hostagent_opts),
        ('openstack', openstack_opts),
        ('scheduler', scheduler_opts),
        ('upgrade_levels', upgrade_levels_opts),
    ] + rpc.UNLISTED_OPTS


def console_log_dir(conf):
    return (conf.hostagent.console_log_dir
            or os.path.join(conf.state_dir, 'logs', 'console'))
