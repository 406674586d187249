#!/usr/bin/env python3
"""Standalone Ironic, Placement and Nova API on 127.0.0.1, for tests;
optionally a full Nova (conductor, scheduler, nova-compute with the
ironic driver) and Glance beside them.

    tools/openstack_services.py [--state-dir DIR] install|start|stop|status
                                [--full-nova]

install  create <repo>/.venv-openstack with ironic, openstack-placement,
         nova and gunicorn (their own venv: they pin many libraries),
         and with --full-nova <repo>/.venv-glance with glance and gunicorn
         (glance pins differently again); each skipped while its stamp
         matches its requirements
start    install, write the configs, create the databases, start
         the services that are not running or whose config changed (each
         a daemon in its own process group, output in logs/NAME.log) and
         wait until each answers; with --full-nova also Glance, the
         Neutron stand-in, nova-conductor, nova-scheduler and
         nova-compute, on RabbitMQ vhost ``tenks-nova`` (127.0.0.1:5672,
         which must run; the vhost and its user are made on first use)
stop     SIGTERM each service's process group (SIGKILL after a while) and
         wait until its port is free
status   print each service: up or down, URL, pid; exit 3 unless all
         (with --full-nova: the full Nova too) are up

Ironic is its API and ``ironic-conductor``, which the API calls over
JSON-RPC on 127.0.0.1, as Ironic is deployed: the all-in-one ``ironic``
is one interpreter, whose lock bounded enrolling a thousand nodes. Its
database is on the MariaDB that tools/setup.sh starts (one database per
state directory: SQLite serializes its conductor's writes, which made
enrolling a hundred nodes take minutes); Placement, Nova and Glance keep
SQLite. The Ironic API, Placement, Nova API and Glance are served by
gunicorn.
None checks credentials: Ironic noauth, Placement noauth2 (send
``X-Auth-Token: admin``), Nova's paste pipeline without authtoken (send
``X-User-Id``, ``X-Project-Id`` and ``X-Roles: admin``), Glance without
its keystone paste flavor and with a policy that makes everyone admin.
Loopback test use only. Stdlib only, so any Python 3.11 runs it; the test
fixtures import it.

The full Nova is optional because it costs about 1.4 GiB of memory and
its nova-compute reports every Ironic node to Placement: the tests that
need it start it and stop it again. There is no Neutron: Nova asks it for
ports, networks and security groups even for a server booted without
networks, so tools/neutron_standin.py answers every list empty. Servers
with networks cannot be booted.

Environment:
  TENKS_OPENSTACK_STATE    state directory (default <repo>/.openstack-state)
  TENKS_OPENSTACK_VENV     the services' venv (default <repo>/.venv-openstack)
  TENKS_GLANCE_VENV        Glance's venv (default <repo>/.venv-glance)
  TENKS_IRONIC_PORT        default 6385
  TENKS_IRONIC_RPC_PORT    default 8089 (the conductor's JSON-RPC)
  TENKS_PLACEMENT_PORT     default 8778
  TENKS_NOVA_PORT          default 8774
  TENKS_GLANCE_PORT        default 9292
  TENKS_NEUTRON_PORT       default 9696 (the stand-in)
  TENKS_OPENSTACK_TIMEOUT  seconds a service gets to answer (default 60)
  TENKS_OPENSTACK_MYSQL    the MariaDB server for Ironic's database, as a
                           SQLAlchemy URL without the database (default
                           mysql+pymysql://tenks:tenks@127.0.0.1:3306, the
                           user tools/setup.sh makes; its databases are
                           named tenks_*); root makes and drops the
                           databases through the mariadb client
"""

import argparse
import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = '127.0.0.1'
REQUIREMENTS = ['ironic==39.0.0', 'openstack-placement==16.0.0',
                'nova==34.0.0', 'gunicorn==27.0.1', 'PyMySQL==1.2.4']
GLANCE_REQUIREMENTS = ['glance==33.0.0', 'gunicorn==27.0.1']
TERM_TIMEOUT = 15  # s a service gets to exit on SIGTERM before SIGKILL
PORTS = {'ironic': ('TENKS_IRONIC_PORT', 6385),
         'ironic-conductor': ('TENKS_IRONIC_RPC_PORT', 8089),
         'placement': ('TENKS_PLACEMENT_PORT', 8778),
         'nova': ('TENKS_NOVA_PORT', 8774),
         'glance': ('TENKS_GLANCE_PORT', 9292),
         'neutron': ('TENKS_NEUTRON_PORT', 9696)}
# In start order; the conductor is up once the Ironic API lists it.
SERVICES = ['ironic', 'ironic-conductor', 'placement', 'nova']
# The full Nova: HTTP services first, then the Nova services without a
# port, which report to the Nova API (os-services) instead.
FULL_NOVA = ['glance', 'neutron', 'nova-conductor', 'nova-scheduler',
             'nova-compute']
ALL = SERVICES + FULL_NOVA
RABBIT = {'vhost': 'tenks-nova', 'user': 'tenks-nova', 'port': 5672}
# What the Nova API trusts without authtoken (see nova_paste).
NOVA_HEADERS = {'X-Auth-Token': 'admin', 'X-User-Id': 'tenks-services',
                'X-Project-Id': 'tenks-services', 'X-Roles': 'admin'}


class Error(Exception):
    pass


def state_dir(path=None):
    return os.path.abspath(path or os.environ.get('TENKS_OPENSTACK_STATE')
                           or os.path.join(REPO, '.openstack-state'))


def venv_dir():
    return os.path.abspath(os.environ.get('TENKS_OPENSTACK_VENV')
                           or os.path.join(REPO, '.venv-openstack'))


def glance_venv_dir():
    return os.path.abspath(os.environ.get('TENKS_GLANCE_VENV')
                           or os.path.join(REPO, '.venv-glance'))


def port(name):
    """The service's TCP port, 0 for the Nova services without one."""
    if name not in PORTS:
        return 0
    env, default = PORTS[name]
    return int(os.environ.get(env) or default)


def url(name):
    return 'http://%s:%d' % (HOST, port(name))


def endpoints(path=None):
    """Endpoint URLs for openstacksdk's *_endpoint_override: the ports
    of the running services, else those of the environment."""
    state = state_dir(path)
    urls = {name: 'http://%s:%d' % (HOST, running(state, name)[1]
                                    or port(name))
            for name in PORTS}
    return {'baremetal': urls['ironic'], 'placement': urls['placement'],
            'compute': urls['nova'] + '/v2.1', 'image': urls['glance']}


def say(*args):
    print('openstack-services:', *args, flush=True)


def run_logged(args, log, **kwargs):
    """Run a command with its output in ``log``; on failure raise with
    the log's tail."""
    with open(log, 'ab') as out:
        result = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, **kwargs)
    if result.returncode:
        raise Error('%s failed (exit %d); %s ends:\n%s'
                    % (' '.join(args), result.returncode, log, tail(log)))


def tail(path, lines=30):
    with contextlib.suppress(OSError), open(path, errors='replace') as f:
        return ''.join(f.readlines()[-lines:])
    return '(no log)\n'


# Install

def install(full=False):
    """Install the services' venv (and with ``full`` Glance's); return
    whether anything was installed."""
    done = install_venv(venv_dir(), REQUIREMENTS)
    if full:
        done = install_venv(glance_venv_dir(), GLANCE_REQUIREMENTS) or done
    return done


def install_venv(venv, requirements):
    stamp = os.path.join(venv, '.tenks-openstack-stamp')
    python = os.path.join(venv, 'bin', 'python')
    want = ' '.join(requirements) + '\n'
    with contextlib.suppress(OSError), open(stamp) as f:
        if f.read() == want and os.access(python, os.X_OK):
            return False
    # Beside the venv, which --clear empties.
    with open(venv + '.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError), open(stamp) as f:
            if f.read() == want and os.access(python, os.X_OK):
                # Another process has just installed it.
                return False
        return _install(venv, stamp, python, requirements, want)


def _install(venv, stamp, python, requirements, want):
    say('installing %s into %s' % (' '.join(requirements), venv))
    started = time.monotonic()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(stamp)
    log = venv + '-install.log'
    with contextlib.suppress(FileNotFoundError):
        os.unlink(log)
    if not os.access(python, os.X_OK):  # none, or its Python is gone
        run_logged([sys.executable, '-m', 'venv', '--clear', venv], log)
    run_logged([python, '-m', 'pip', 'install', '-q',
                '--disable-pip-version-check', *requirements], log)
    with open(stamp, 'w') as f:
        f.write(want)
    say('installed in %.0f s' % (time.monotonic() - started))
    return True


# Configuration and databases

def ini(sections):
    return ''.join('[%s]\n%s\n' % (name, ''.join('%s = %s\n' % kv
                                                 for kv in opts.items()))
                   for name, opts in sections.items())


def ironic_conf(d):
    return ini({
        'DEFAULT': {
            'auth_strategy': 'noauth',
            'rpc_transport': 'json-rpc',
            # The API calls the conductor at its name: an address.
            'host': conductor_host(),
            'state_path': d,
            'tempdir': os.path.join(d, 'tmp'),
            'enabled_hardware_types': 'ipmi,redfish,fake-hardware',
            'enabled_power_interfaces': 'ipmitool,redfish,fake',
            'enabled_management_interfaces': 'ipmitool,redfish,fake',
            # A node reaches available without images or a ramdisk since
            # automated cleaning is off. ipxe (a default) fails at start
            # without an http_root with boot.ipxe; pxe writes grub.cfg
            # into tftp_root and http_root, kept below the state dir.
            # redfish-virtual-media: Redfish nodes booting an ISO.
            'enabled_boot_interfaces': 'fake,pxe,redfish-virtual-media',
            'enabled_deploy_interfaces': 'fake,direct,ramdisk',
            'enabled_network_interfaces': 'noop',
            'enabled_inspect_interfaces': 'no-inspect',
        },
        # Where the API listens (gunicorn binds it: see configure).
        'api': {'host_ip': HOST, 'port': port('ironic')},
        # A power change the BMC acknowledges and does not make (Tenks'
        # power-stuck BMC fault) fails after this, not after 60 s; real
        # changes here are made when the BMC answers.
        'conductor': {'automated_clean': 'false',
                      'power_state_change_timeout': 5},
        'database': {'connection': ironic_database(d)[1]},
        'deploy': {'http_root': os.path.join(d, 'httpboot')},
        'dhcp': {'dhcp_provider': 'none'},
        # Where a ramdisk deploy fetches a Nova server's kernel and
        # ramdisk from (Glance runs only with the full Nova).
        'glance': {'auth_type': 'none', 'endpoint_override': url('glance')},
        # Fail or succeed sooner against a BMC (defaults: 5 s and 60 s);
        # 30 s since it also bounds each ipmitool run, which on a loaded
        # machine can take over 10 s against a healthy BMC.
        'ipmi': {'min_command_interval': 1, 'command_retry_timeout': 30},
        'json_rpc': {'auth_strategy': 'noauth', 'host_ip': HOST,
                     'port': port('ironic-conductor')},
        'nova': {'send_power_notifications': 'false'},
        # A Redfish BMC that drops connections fails after sushy's own
        # ten tries (~27 s), not five times that with 4 s between.
        'redfish': {'connection_attempts': 1,
                    'connection_retry_interval': 1},
        'oslo_concurrency': {'lock_path': os.path.join(d, 'lock')},
        'pxe': {'tftp_root': os.path.join(d, 'tftpboot'),
                'tftp_master_path': os.path.join(d, 'tftpboot', 'master'),
                'images_path': os.path.join(d, 'images'),
                'instance_master_path': os.path.join(d, 'master_images')},
    })


def conductor_host():
    return '%s:%d' % (HOST, port('ironic-conductor'))


def placement_conf(d):
    return ini({
        'api': {'auth_strategy': 'noauth2'},
        'placement_database': {'connection': sqlite(d, 'placement')},
    })


def rabbit_url(state):
    """The Nova services' transport URL; its password is made once and
    kept in the state directory (the cell mapping stores the URL)."""
    path = os.path.join(state, 'nova', 'rabbit-password')
    try:
        with open(path) as f:
            password = f.read().strip()
    except FileNotFoundError:
        password = secrets.token_hex(16)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, 'w') as f:
            f.write(password + '\n')
    return 'rabbit://%s:%s@%s:%d/%s' % (RABBIT['user'], password, HOST,
                                        RABBIT['port'], RABBIT['vhost'])


def nova_conf(d, transport_url):
    """What every Nova process reads; nova-compute must see no database
    option ("No DB access allowed"), so those are in nova_db_conf."""
    # Placement noauth2 wants a token header; the others want none.
    token = {'auth_type': 'admin_token', 'token': 'admin'}
    return ini({
        'DEFAULT': {
            'transport_url': transport_url,
            'state_path': d,
            'host': 'tenks-nova',
            'compute_driver': 'ironic.IronicDriver',
            # Inventory at once, not up to a minute late (and a minute
            # more after a start).
            'update_resources_interval': 5,
            'periodic_fuzzy_delay': 0,
            # A node without an OS ignores ACPI: bound a clean stop.
            'shutdown_timeout': 5,
            # And the services' own stop (SIGTERM), 60 s by default.
            'graceful_shutdown_timeout': 5,
        },
        'conductor': {'workers': 1},
        'glance': {'endpoint_override': url('glance')},
        'ironic': {'auth_type': 'none', 'endpoint_override': url('ironic'),
                   'api_retry_interval': 1},
        'neutron': dict(token, endpoint=url('neutron'),
                        endpoint_override=url('neutron')),
        'oslo_concurrency': {'lock_path': os.path.join(d, 'lock')},
        'oslo_messaging_notifications': {'driver': 'noop'},
        'placement': dict(token, endpoint=url('placement'),
                          endpoint_override=url('placement')),
        'scheduler': {'workers': 1, 'discover_hosts_in_cells_interval': 2},
        'wsgi': {'api_paste_config': os.path.join(d, 'api-paste.ini')},
    })


def nova_db_conf(d):
    # [database] is cell1's database (nova-manage db sync makes it).
    return ini({'api_database': {'connection': sqlite(d, 'nova_api')},
                'database': {'connection': sqlite(d, 'nova')}})


# Imported by the Ironic and Nova processes (on PYTHONPATH): oslo.db
# opens each SQLite transaction with a deferred BEGIN, and a deferred
# transaction that reads, then writes while another process
# writes fails at once with "database is locked" (the busy timeout does
# not apply). BEGIN IMMEDIATE takes the write lock first, waiting for it.
SQLITE_SITECUSTOMIZE = '''"""Tenks test services: BEGIN IMMEDIATE for SQLite
(see tools/openstack_services.py)."""
import sqlite3
import sqlite3.dbapi2


class _Cursor(sqlite3.Cursor):

    def execute(self, sql, *args):
        if sql == 'BEGIN':
            sql = 'BEGIN IMMEDIATE'
        return super().execute(sql, *args)


class _Connection(sqlite3.Connection):

    def cursor(self, factory=_Cursor):
        return super().cursor(factory)


def _connect(*args, _connect=sqlite3.connect, **kwargs):
    kwargs.setdefault('factory', _Connection)
    return _connect(*args, **kwargs)


sqlite3.connect = sqlite3.dbapi2.connect = _connect
'''


# Also Ironic's: its Redfish driver keys its session cache with a PBKDF2
# of the BMC password (600,000 rounds of SHA-512, ~0.35 s of CPU here)
# derived anew on every Redfish call, so a 2-CPU machine verifies a few
# nodes a second and a power sync of a thousand nodes takes minutes of
# CPU. The same inputs give the same key: remembering it changes nothing
# Ironic does but the CPU it burns.
IRONIC_SITECUSTOMIZE = SQLITE_SITECUSTOMIZE + '''
import functools
import hashlib

hashlib.pbkdf2_hmac = functools.lru_cache(maxsize=4096)(hashlib.pbkdf2_hmac)
'''


def nova_paste(venv):
    """Nova's api-paste.ini without authtoken: it then trusts the
    X-User-Id, X-Project-Id and X-Roles headers (Nova has no noauth)."""
    with open(os.path.join(venv, 'etc', 'nova', 'api-paste.ini')) as f:
        text = f.read()
    if ' authtoken ' not in text:
        raise Error('no authtoken filter in nova api-paste.ini to remove')
    return text.replace(' authtoken ', ' ')


def glance_conf(d, venv):
    stores = {name: {'filesystem_store_datadir': os.path.join(d, name)}
              for name in ('images', 'os_glance_staging_store',
                           'os_glance_tasks_store')}
    return ini(dict({
        'DEFAULT': {'enabled_backends': 'images:file'},
        'database': {'connection': sqlite(d, 'glance')},
        'glance_store': {'default_backend': 'images'},
        'oslo_concurrency': {'lock_path': os.path.join(d, 'lock')},
        'oslo_policy': {'policy_file': os.path.join(d, 'policy.json')},
        # No [paste_deploy] flavor: the pipeline without keystone.
        'paste_deploy': {'config_file': os.path.join(
            venv, 'etc', 'glance', 'glance-api-paste.ini')},
    }, **stores))


# Without Keystone every request has no roles; Glance's defaults want
# role:admin for uploads and the properties Ironic reads.
GLANCE_POLICY = json.dumps({'context_is_admin': '@'}) + '\n'


def gunicorn_conf(name, app, workers=1, threads=1):
    # No arguments: gunicorn reads ./gunicorn.conf.py, and Nova parses
    # sys.argv as its own (it fails on gunicorn's options).
    return ('bind = %r\nworkers = %d\nthreads = %d\nwsgi_app = %r\n'
            'proc_name = %r\n'
            # Else both share $HOME/.gunicorn/gunicorn.ctl.
            'control_socket_disable = True\n'
            % ('%s:%d' % (HOST, port(name)), workers, threads, app,
               'tenks-' + name))


def ironic_database(d):
    """(name, URL) of Ironic's MariaDB database for the state directory
    ``d``: one per directory, so that private services do not share it."""
    name = 'tenks_ironic_' + hashlib.sha256(
        os.path.abspath(d).encode()).hexdigest()[:12]
    server = os.environ.get('TENKS_OPENSTACK_MYSQL')
    query = 'charset=utf8mb4'
    if not server:
        # tools/setup.sh's MariaDB serves no TLS. Unless told not to,
        # PyMySQL builds a TLS context for every connection it opens
        # (loading the system's CA certificates: 17 % of the samples of
        # Ironic's threads when enrolling hundreds of nodes) to try TLS
        # first.
        server = 'mysql+pymysql://tenks:tenks@127.0.0.1:3306'
        query += '&ssl_disabled=true'
    return name, '%s/%s?%s' % (server.rstrip('/'), name, query)


def sqlite(d, name):
    # An all-in-one service writes from several threads: wait up to a
    # minute for SQLite's lock instead of the default 5 s.
    return 'sqlite:///%s?timeout=60' % os.path.join(d, name + '.sqlite')


def write(path, text):
    with open(path, 'w') as f:
        f.write(text)


def configure(state):
    """Write every service's config; return {name: (argv, cwd, env,
    digest of what it reads)}."""
    venv, glance_venv = venv_dir(), glance_venv_dir()
    bin_dir = os.path.join(venv, 'bin')
    for name in ('ironic', 'placement', 'nova', 'glance'):
        os.makedirs(os.path.join(state, name), mode=0o700, exist_ok=True)
    files = {}  # path -> text

    def conf(name, filename, text):
        path = os.path.join(state, name, filename)
        files[path] = text
        return path

    d = os.path.join(state, 'ironic')
    os.makedirs(os.path.join(d, 'tmp'), exist_ok=True)
    conf('ironic', 'sitecustomize.py', IRONIC_SITECUSTOMIZE)
    ironic = conf('ironic', 'ironic.conf', ironic_conf(d))
    conf('ironic', 'gunicorn.conf.py',
         gunicorn_conf('ironic', 'ironic.wsgi.api:application', 2, 8))
    # gunicorn, since Ironic 39's ironic-api runs one process: each of
    # its workers binds the port itself, and all but the first fail.
    # HOME: the API finds ~/ironic.conf (gunicorn passes no arguments).
    commands = {
        'ironic': ([os.path.join(bin_dir, 'gunicorn')], d,
                   {'PYTHONPATH': d, 'HOME': d},
                   ['ironic.conf', 'gunicorn.conf.py', 'sitecustomize.py']),
        'ironic-conductor': ([os.path.join(bin_dir, 'ironic-conductor'),
                              '--config-file', ironic], d, {'PYTHONPATH': d},
                             ['ironic.conf', 'sitecustomize.py'])}
    d = os.path.join(state, 'placement')
    conf('placement', 'placement.conf', placement_conf(d))
    conf('placement', 'gunicorn.conf.py',
         gunicorn_conf('placement', 'placement.wsgi.api:application'))
    commands['placement'] = ([os.path.join(bin_dir, 'gunicorn')], d,
                             {'OS_PLACEMENT_CONFIG_DIR': d},
                             ['placement.conf', 'gunicorn.conf.py'])
    d = os.path.join(state, 'nova')
    nova_files = [conf('nova', 'nova.conf',
                       nova_conf(d, rabbit_url(state))),
                  conf('nova', 'nova-db.conf', nova_db_conf(d))]
    conf('nova', 'api-paste.ini', nova_paste(venv))
    conf('nova', 'sitecustomize.py', SQLITE_SITECUSTOMIZE)
    sqlite_fix = {'PYTHONPATH': d}
    conf('nova', 'gunicorn.conf.py',
         gunicorn_conf('nova', 'nova.wsgi.osapi_compute:application'))
    commands['nova'] = ([os.path.join(bin_dir, 'gunicorn')], d, dict(
        sqlite_fix, OS_NOVA_CONFIG_DIR=d,
        OS_NOVA_CONFIG_FILES='api-paste.ini;nova.conf;nova-db.conf'),
        ['api-paste.ini', 'nova.conf', 'nova-db.conf', 'gunicorn.conf.py',
         'sitecustomize.py'])
    for name in ('nova-conductor', 'nova-scheduler'):
        commands[name] = ([os.path.join(bin_dir, name), '--config-file',
                           nova_files[0], '--config-file', nova_files[1]],
                          d, sqlite_fix,
                          ['nova.conf', 'nova-db.conf', 'sitecustomize.py'])
    commands['nova-compute'] = ([os.path.join(bin_dir, 'nova-compute'),
                                 '--config-file', nova_files[0]], d, {},
                                ['nova.conf'])
    d = os.path.join(state, 'glance')
    conf('glance', 'glance-api.conf', glance_conf(d, glance_venv))
    conf('glance', 'policy.json', GLANCE_POLICY)
    conf('glance', 'gunicorn.conf.py',
         gunicorn_conf('glance', 'glance.wsgi.api:application'))
    commands['glance'] = ([os.path.join(glance_venv, 'bin', 'gunicorn')], d,
                          {'OS_GLANCE_CONFIG_DIR': d},
                          ['glance-api.conf', 'policy.json',
                           'gunicorn.conf.py'])
    commands['neutron'] = ([os.path.join(bin_dir, 'python'), os.path.join(
        REPO, 'tools', 'neutron_standin.py'), HOST, str(port('neutron'))],
        state, {}, [])
    for path, text in files.items():
        write(path, text)
    result = {}
    for name, (argv, cwd, env, read) in commands.items():
        digest = hashlib.sha256(repr((argv, env)).encode())
        for filename in read:
            digest.update(files[os.path.join(cwd, filename)].encode())
        result[name] = (argv, cwd, env, digest.hexdigest()[:16])
    return result


def sync_databases(state, full):
    """Create the schemas of databases that do not exist yet, Nova's
    cell1 (before the Nova API starts: it caches the cells it has seen)
    and with ``full`` Glance's."""
    state_nova = os.path.join(state, 'nova')
    nova = nova_manage_config(state)
    syncs = [
        # A new state directory gets a new Ironic database: one left by
        # an earlier directory of the same path is dropped.
        ('ironic', ['ironic.mariadb'], [
            ['mariadb', '-e', 'DROP DATABASE IF EXISTS `{0}`; CREATE '
             'DATABASE `{0}`'.format(ironic_database(
                 os.path.join(state, 'ironic'))[0])],
            ['ironic-dbsync', 'create_schema']]),
        ('placement', ['placement.sqlite'],
         [['placement-manage', 'db', 'sync']]),
        # cell0 only so that Nova does not log "No cells are configured".
        ('nova', ['nova_api.sqlite', 'nova.sqlite', 'nova_cell0.sqlite'], [
            ['nova-manage', *nova, 'api_db', 'sync'],
            ['nova-manage', *nova, 'cell_v2', 'map_cell0',
             '--database_connection', sqlite(state_nova, 'nova_cell0')],
            ['nova-manage', *nova, 'db', 'sync']]),
    ]
    if full:
        syncs.append(('glance', ['glance.sqlite'], [[os.path.join(
            glance_venv_dir(), 'bin', 'glance-manage'), '--config-file',
            os.path.join(state, 'glance', 'glance-api.conf'), 'db',
            'sync']]))
    for sync in syncs:  # one by one: in parallel is no faster on 2 cores
        sync_database(state, *sync)
    if not has_cell1(state):
        # The transport URL (with its password) from nova.conf, not
        # from the command line.
        run_logged([os.path.join(venv_dir(), 'bin', 'nova-manage'), *nova,
                    'cell_v2', 'create_cell', '--name', 'cell1',
                    '--database_connection', sqlite(state_nova, 'nova')],
                   os.path.join(state, 'logs', 'nova-dbsync.log'))
        say('nova: cell1 mapped')


def nova_manage_config(state):
    state_nova = os.path.join(state, 'nova')
    return ['--config-file', os.path.join(state_nova, 'nova.conf'),
            '--config-file', os.path.join(state_nova, 'nova-db.conf')]


def map_compute_host(state):
    """Map nova-compute's host to cell1 by its service record.

    The scheduler maps hosts by their compute nodes, which the ironic
    driver makes only once Ironic has nodes, and only every
    discover_hosts_in_cells_interval: a server booted in between fails
    with "Host 'tenks-nova' is not mapped to any cell".
    """
    run_logged([os.path.join(venv_dir(), 'bin', 'nova-manage'),
                *nova_manage_config(state), 'cell_v2', 'discover_hosts',
                '--by-service'],
               os.path.join(state, 'logs', 'nova-dbsync.log'))


def has_cell1(state):
    path = os.path.join(state, 'nova', 'nova_api.sqlite')
    with contextlib.closing(sqlite3.connect(path, timeout=60)) as db:
        return bool(db.execute("SELECT 1 FROM cell_mappings WHERE name = "
                               "'cell1'").fetchall())


def wal(state):
    """Nova's databases in SQLite's write-ahead mode (kept in the file):
    its processes and threads write at once, and in the default mode a
    reader blocks writers ("database is locked")."""
    for db in ('nova_api', 'nova', 'nova_cell0'):
        path = os.path.join(state, 'nova', db + '.sqlite')
        with contextlib.closing(sqlite3.connect(path, timeout=60)) as conn:
            conn.execute('PRAGMA journal_mode=WAL')


def sync_database(state, name, files, commands):
    """Run the commands unless every file (a SQLite database, or a mark
    for a MariaDB one) exists in the service's directory; the services'
    own commands read its config."""
    d = os.path.join(state, name)
    files = [os.path.join(d, filename) for filename in files]
    if all(map(os.path.exists, files)):
        return
    started = time.monotonic()
    bin_dir = os.path.join(venv_dir(), 'bin')
    log = os.path.join(state, 'logs', name + '-dbsync.log')
    try:
        for command, *args in commands:
            # mariadb: the client on PATH, as root over MariaDB's socket.
            if command != 'mariadb' and not os.path.isabs(command):
                command = os.path.join(bin_dir, command)
            if command != 'mariadb' and '--config-file' not in args:
                args = ['--config-file', os.path.join(d, name + '.conf'),
                        *args]
            run_logged([command, *args], log)
        for path in files:
            if not path.endswith('.sqlite'):
                write(path, '')
    except BaseException:
        for path in files:  # so that the next start tries again
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        raise
    say('%s: database created in %.1f s' % (name, time.monotonic() - started))


def rabbit_vhost(state):
    """Make the Nova services' vhost and user (and set the user's
    password) if RabbitMQ lacks them."""
    def ctl(*args, password=None):
        # A password comes on stdin, not in the arguments (ps shows them).
        result = subprocess.run(['rabbitmqctl', '-n', 'rabbit@localhost',
                                 '-q', *args], capture_output=True,
                                text=True, input=password or '')
        if result.returncode:
            raise Error('rabbitmqctl %s failed: %s'
                        % (args[0], result.stderr.strip()
                           or result.stdout.strip()))
        return result.stdout

    password = rabbit_url(state).split('@')[0].rsplit(':', 1)[1]
    if RABBIT['vhost'] not in ctl('list_vhosts').split():
        ctl('add_vhost', RABBIT['vhost'])
    users = [line.split()[0] for line in ctl('list_users').splitlines()
             if line.strip()]
    ctl('change_password' if RABBIT['user'] in users else 'add_user',
        RABBIT['user'], password=password + '\n')
    ctl('set_permissions', '-p', RABBIT['vhost'], RABBIT['user'],
        '.*', '.*', '.*')


# Processes

def pid_file(state, name):
    return os.path.join(state, 'run', name + '.pid')


def start_time(pid):
    """The process's start time in clock ticks, None if it is gone."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            fields = f.read().rpartition(')')[2].split()
    except OSError:
        return None
    return None if fields[0] in 'ZX' else fields[19]


def running(state, name):
    """(pid, port) of the service's live group leader we started, or
    (None, None).

    The pid file also holds the start time, so a reused pid is not ours.
    """
    pid, number, _ = _running(state, name)
    return pid, number


def _running(state, name):
    """(pid, port, digest of its config) or (None, None, None); the
    digest is None for a service started before pid files had one."""
    try:
        with open(pid_file(state, name)) as f:
            pid, started, number, *digest = f.read().split()
        pid, number = int(pid), int(number)
    except (OSError, ValueError):
        return None, None, None
    reap(pid)
    if start_time(pid) != started:
        return None, None, None
    return pid, number, (digest or [None])[0]


def reap(pid):
    """Collect the service if it is a child of this process that ended
    (when the fixtures started it)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def group_members(pgid):
    pids = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                with open('/proc/%s/stat' % entry) as f:
                    fields = f.read().rpartition(')')[2].split()
                if int(fields[2]) == pgid and fields[0] not in 'ZX':
                    pids.append(int(entry))
    return pids


def port_free(number):
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, number))
        except OSError:
            return False
        return True


def answers(number, path='/'):
    try:
        with urllib.request.urlopen('http://%s:%d%s' % (HOST, number, path),
                                    timeout=5) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def spawn(state, name, argv, cwd, env, digest):
    log = os.path.join(state, 'logs', name + '.log')
    with open(log, 'ab') as out:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=dict(os.environ, **env),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    write(pid_file(state, name), '%d %s %d %s\n'
          % (proc.pid, start_time(proc.pid), port(name), digest))
    return proc.pid


def nova_services():
    """{binary: (state, last report as a naive UTC datetime)} of the
    Nova services the Nova API knows."""
    request = urllib.request.Request(url('nova') + '/v2.1/os-services',
                                     headers=NOVA_HEADERS)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            listed = json.load(response)['services']
        return {s['binary']: (s['state'], datetime.datetime.fromisoformat(
            s['updated_at'])) for s in listed
            if s['host'] == 'tenks-nova' and s['updated_at']}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def conductor_alive(since=None):
    """Whether the Ironic API lists our conductor alive (until then it
    refuses nodes: no conductor for their driver), by a registration or
    heartbeat after ``since`` (a naive UTC datetime) if given."""
    request = urllib.request.Request(
        url('ironic') + '/v1/conductors/' + conductor_host(),
        headers={'X-OpenStack-Ironic-API-Version': '1.49'})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            conductor = json.load(response)
        seen = datetime.datetime.fromisoformat(
            conductor['updated_at'] or conductor['created_at'])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if seen.tzinfo is not None:  # Ironic gives UTC, with or without +00:00
        seen = seen.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return bool(conductor.get('alive')) and (since is None or seen >= since)


def is_up(name, since=None):
    """Whether the service answers HTTP (Ironic's conductor: whether the
    Ironic API lists it); a Nova service without a port: whether the
    Nova API lists it up, by a report after ``since`` (a naive UTC
    datetime) if given."""
    if name == 'ironic-conductor':
        return conductor_alive(since)
    if port(name):
        # Glance answers / with 300 Multiple Choices.
        return answers(port(name), '/versions' if name == 'glance' else '/')
    state, reported = nova_services().get(name, (None, None))
    return state == 'up' and (since is None or reported >= since)


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def wait_up(state, name, pid, spawned, timeout):
    """Until the service answers HTTP (a Nova service without a port:
    until the Nova API lists it up)."""
    log = os.path.join(state, 'logs', name + '.log')
    # Its first report, not one of the process it replaces (to the
    # second: Nova keeps no fraction).
    since = utcnow().replace(microsecond=0) - datetime.timedelta(
        seconds=time.monotonic() - spawned)
    with open(log, 'rb') as f:
        f.seek(0, os.SEEK_END)
        deadline = time.monotonic() + timeout
        while not is_up(name, since):
            reap(pid)
            # Ironic's master outlives its failing worker and restarts it.
            if start_time(pid) is None or b'exited with status' in f.read():
                raise Error('%s failed to start; %s ends:\n%s'
                            % (name, log, tail(log)))
            if time.monotonic() > deadline:
                raise Error('%s was not up within %d s; %s ends:\n%s'
                            % (name, timeout, log, tail(log)))
            time.sleep(0.1 if port(name) else 0.5)


@contextlib.contextmanager
def locked(state):
    """One start or stop at a time for a state directory."""
    os.makedirs(state, mode=0o700, exist_ok=True)
    os.chmod(state, 0o700)
    for sub in ('logs', 'run'):
        os.makedirs(os.path.join(state, sub), exist_ok=True)
    with open(os.path.join(state, '.lock'), 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def start(path=None, timeout=None, full=False):
    """Start the services that are not running, and restart those whose
    config has changed; with ``full`` the full Nova and Glance too.
    Return the names of those it started."""
    state = state_dir(path)
    timeout = timeout or int(os.environ.get('TENKS_OPENSTACK_TIMEOUT') or 60)
    install(full)
    names = SERVICES + (FULL_NOVA if full else [])
    with locked(state):
        commands = configure(state)
        todo = []
        for name in names:
            pid, number, digest = _running(state, name)
            if pid and digest != commands[name][3]:
                say('%s: its config has changed: restarting it' % name)
                _stop(state, [name])
                pid = None
            if pid:
                say('%s: already running (pid %d%s)'
                    % (name, pid, ', port %d' % number if number else ''))
            elif port(name) and not port_free(port(name)):
                raise Error('%s: %s:%d is in use by a process not started '
                            'from %s' % (name, HOST, port(name), state))
            else:
                todo.append(name)
        if not todo:
            return []
        if full:
            rabbit_vhost(state)
        sync_databases(state, full)
        # Once (it stays in the files), while nothing else has them open.
        with contextlib.suppress(sqlite3.OperationalError):
            wal(state)
        started = {}
        t0 = time.monotonic()
        try:
            for name in todo:  # all at once: they start in 1-3 s each
                started[name] = spawn(state, name, *commands[name])
            for name, pid in started.items():
                wait_up(state, name, pid, t0, timeout)
                say('%s: started (pid %d), up after %.1f s'
                    % (name, pid, time.monotonic() - t0))
            if 'nova-compute' in started:
                map_compute_host(state)
        except BaseException:
            _stop(state, list(started))
            raise
        return list(started)


def stop(path=None, names=None):
    """Stop the services (all by default); return those it stopped."""
    state = state_dir(path)
    if not os.path.isdir(state):
        return []
    with locked(state):
        return _stop(state, ALL if names is None else names)


def _stop(state, names):
    stopped = []
    for name in reversed(ALL):
        if name not in names:
            continue
        pid, number = running(state, name)
        if pid:
            t0 = time.monotonic()
            kill_group(pid)
            stopped.append(name)
            if number and not poll(lambda n=number: port_free(n), 10):
                raise Error('%s: %s:%d still in use after stopping'
                            % (name, HOST, number))
            say('%s: stopped (pid %d) in %.1f s'
                % (name, pid, time.monotonic() - t0))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pid_file(state, name))
    return stopped


def kill_group(pgid):
    for sig, timeout in ((signal.SIGTERM, TERM_TIMEOUT),
                         (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        if poll(lambda: reap(pgid) or not group_members(pgid), timeout):
            return
    raise Error('process group %d survived SIGKILL' % pgid)


def poll(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def status(path=None, full=False):
    """{name: whether it is up}, printing a line per service."""
    state = state_dir(path)
    result = {}
    for name in SERVICES + (FULL_NOVA if full else []):
        pid, number = running(state, name)
        up = pid and is_up(name)
        where = ('http://%s:%d' % (HOST, number or port(name))
                 if port(name) else 'rabbit vhost ' + RABBIT['vhost'])
        print('%-16s %-4s %s%s' % (name, 'up' if up else 'down', where,
                                   ' pid %d' % pid if pid else ''))
        result[name] = bool(up)
    return result


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='\n'.join(__doc__.splitlines()[2:]))
    parser.add_argument('command',
                        choices=['install', 'start', 'stop', 'status'])
    parser.add_argument('--state-dir', help='default: $TENKS_OPENSTACK_STATE'
                        ' or <repo>/.openstack-state')
    parser.add_argument('--full-nova', action='store_true',
                        help='also the Nova conductor, scheduler and '
                        'compute, Glance and the Neutron stand-in')
    args = parser.parse_args()
    try:
        if args.command == 'install':
            if not install(args.full_nova):
                say('already installed')
        elif args.command == 'start':
            start(args.state_dir, full=args.full_nova)
        elif args.command == 'stop':
            if not stop(args.state_dir):
                say('nothing was running')
        elif not all(status(args.state_dir, args.full_nova).values()):
            sys.exit(3)
    except Error as e:
        sys.exit('openstack-services: ERROR: %s' % e)


if __name__ == '__main__':
    main()
