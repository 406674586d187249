#!/usr/bin/env python3
"""Standalone Ironic, Placement and Nova API on 127.0.0.1, for tests.

    tools/openstack_services.py [--state-dir DIR] install|start|stop|status

install  create <repo>/.venv-openstack with ironic, openstack-placement,
         nova and gunicorn (their own venv: they pin many libraries);
         skipped while its stamp matches REQUIREMENTS
start    install, write the configs, create the SQLite databases, start
         the services that are not running (each a daemon in its own
         process group, output in logs/NAME.log) and wait until each
         answers HTTP
stop     SIGTERM each service's process group (SIGKILL after a while) and
         wait until its port is free
status   print each service: up or down, URL, pid; exit 3 unless all
         are up

Ironic is the all-in-one ``ironic`` (API and conductor in one process, as
SQLite requires), Placement and Nova API are served by gunicorn. None
checks credentials: Ironic noauth, Placement noauth2 (send
``X-Auth-Token: admin``), Nova's paste pipeline without authtoken (send
``X-User-Id``, ``X-Project-Id`` and ``X-Roles: admin``). Loopback test use
only. Stdlib only, so any Python 3.11 runs it; the test fixtures import it.

Environment:
  TENKS_OPENSTACK_STATE    state directory (default <repo>/.openstack-state)
  TENKS_OPENSTACK_VENV     the services' venv (default <repo>/.venv-openstack)
  TENKS_IRONIC_PORT        default 6385
  TENKS_PLACEMENT_PORT     default 8778
  TENKS_NOVA_PORT          default 8774
  TENKS_OPENSTACK_TIMEOUT  seconds a service gets to answer (default 60)
"""

import argparse
import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = '127.0.0.1'
REQUIREMENTS = ['ironic==39.0.0', 'openstack-placement==16.0.0',
                'nova==34.0.0', 'gunicorn==27.0.1']
TERM_TIMEOUT = 15  # s a service gets to exit on SIGTERM before SIGKILL
PORTS = {'ironic': ('TENKS_IRONIC_PORT', 6385),
         'placement': ('TENKS_PLACEMENT_PORT', 8778),
         'nova': ('TENKS_NOVA_PORT', 8774)}
SERVICES = list(PORTS)  # in start order


class Error(Exception):
    pass


def state_dir(path=None):
    return os.path.abspath(path or os.environ.get('TENKS_OPENSTACK_STATE')
                           or os.path.join(REPO, '.openstack-state'))


def venv_dir():
    return os.path.abspath(os.environ.get('TENKS_OPENSTACK_VENV')
                           or os.path.join(REPO, '.venv-openstack'))


def port(name):
    env, default = PORTS[name]
    return int(os.environ.get(env) or default)


def endpoints(path=None):
    """Endpoint URLs for openstacksdk's *_endpoint_override: the ports
    of the running services, else those of the environment."""
    state = state_dir(path)
    url = {name: 'http://%s:%d' % (HOST, running(state, name)[1]
                                   or port(name))
           for name in SERVICES}
    return {'baremetal': url['ironic'], 'placement': url['placement'],
            'compute': url['nova'] + '/v2.1'}


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

def install():
    venv = venv_dir()
    stamp = os.path.join(venv, '.tenks-openstack-stamp')
    python = os.path.join(venv, 'bin', 'python')
    want = ' '.join(REQUIREMENTS) + '\n'
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
        return _install(venv, stamp, python, want)


def _install(venv, stamp, python, want):
    say('installing %s into %s' % (' '.join(REQUIREMENTS), venv))
    started = time.monotonic()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(stamp)
    log = venv + '-install.log'
    with contextlib.suppress(FileNotFoundError):
        os.unlink(log)
    if not os.access(python, os.X_OK):  # none, or its Python is gone
        run_logged([sys.executable, '-m', 'venv', '--clear', venv], log)
    run_logged([python, '-m', 'pip', 'install', '-q',
                '--disable-pip-version-check', *REQUIREMENTS], log)
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
            'rpc_transport': 'none',
            'state_path': d,
            'tempdir': os.path.join(d, 'tmp'),
            'enabled_hardware_types': 'ipmi,redfish,fake-hardware',
            'enabled_power_interfaces': 'ipmitool,redfish,fake',
            'enabled_management_interfaces': 'ipmitool,redfish,fake',
            # A node reaches available without images or a ramdisk since
            # automated cleaning is off. ipxe (a default) fails at start
            # without an http_root with boot.ipxe; pxe writes grub.cfg
            # into tftp_root and http_root, kept below the state dir.
            'enabled_boot_interfaces': 'fake,pxe',
            'enabled_deploy_interfaces': 'fake,direct,ramdisk',
            'enabled_network_interfaces': 'noop',
            'enabled_inspect_interfaces': 'no-inspect',
        },
        'api': {'host_ip': HOST, 'port': port('ironic')},
        'conductor': {'automated_clean': 'false'},
        'database': {'connection': sqlite(d, 'ironic')},
        'deploy': {'http_root': os.path.join(d, 'httpboot')},
        'dhcp': {'dhcp_provider': 'none'},
        # Fail or succeed fast against a BMC (defaults: 5 s and 60 s).
        'ipmi': {'min_command_interval': 1, 'command_retry_timeout': 10},
        'nova': {'send_power_notifications': 'false'},
        'oslo_concurrency': {'lock_path': os.path.join(d, 'lock')},
        'pxe': {'tftp_root': os.path.join(d, 'tftpboot'),
                'tftp_master_path': os.path.join(d, 'tftpboot', 'master'),
                'images_path': os.path.join(d, 'images'),
                'instance_master_path': os.path.join(d, 'master_images')},
    })


def placement_conf(d):
    return ini({
        'api': {'auth_strategy': 'noauth2'},
        'placement_database': {'connection': sqlite(d, 'placement')},
    })


def nova_conf(d):
    return ini({
        'DEFAULT': {'transport_url': 'fake:/', 'state_path': d},
        'api_database': {'connection': sqlite(d, 'nova_api')},
        'database': {'connection': sqlite(d, 'nova')},
        'oslo_concurrency': {'lock_path': os.path.join(d, 'lock')},
    })


def nova_paste(venv):
    """Nova's api-paste.ini without authtoken: it then trusts the
    X-User-Id, X-Project-Id and X-Roles headers (Nova has no noauth)."""
    with open(os.path.join(venv, 'etc', 'nova', 'api-paste.ini')) as f:
        text = f.read()
    if ' authtoken ' not in text:
        raise Error('no authtoken filter in nova api-paste.ini to remove')
    return text.replace(' authtoken ', ' ')


def gunicorn_conf(name, app):
    # No arguments: gunicorn reads ./gunicorn.conf.py, and Nova parses
    # sys.argv as its own (it fails on gunicorn's options).
    return ('bind = %r\nworkers = 1\nwsgi_app = %r\nproc_name = %r\n'
            # Else both share $HOME/.gunicorn/gunicorn.ctl.
            'control_socket_disable = True\n'
            % ('%s:%d' % (HOST, port(name)), app, 'tenks-' + name))


def sqlite(d, name):
    # An all-in-one service writes from several threads: wait up to a
    # minute for SQLite's lock instead of the default 5 s.
    return 'sqlite:///%s?timeout=60' % os.path.join(d, name + '.sqlite')


def write(path, text):
    with open(path, 'w') as f:
        f.write(text)


def configure(state):
    """Write every service's config; return {name: (argv, cwd, env)}."""
    venv = venv_dir()
    bin_dir = os.path.join(venv, 'bin')
    commands = {}
    for name in SERVICES:
        os.makedirs(os.path.join(state, name), mode=0o700, exist_ok=True)
    d = os.path.join(state, 'ironic')
    os.makedirs(os.path.join(d, 'tmp'), exist_ok=True)
    write(os.path.join(d, 'ironic.conf'), ironic_conf(d))
    commands['ironic'] = ([os.path.join(bin_dir, 'ironic'), '--config-file',
                           os.path.join(d, 'ironic.conf')], d, {})
    d = os.path.join(state, 'placement')
    write(os.path.join(d, 'placement.conf'), placement_conf(d))
    write(os.path.join(d, 'gunicorn.conf.py'),
          gunicorn_conf('placement', 'placement.wsgi.api:application'))
    commands['placement'] = ([os.path.join(bin_dir, 'gunicorn')], d,
                             {'OS_PLACEMENT_CONFIG_DIR': d})
    d = os.path.join(state, 'nova')
    write(os.path.join(d, 'nova.conf'), nova_conf(d))
    write(os.path.join(d, 'api-paste.ini'), nova_paste(venv))
    write(os.path.join(d, 'gunicorn.conf.py'),
          gunicorn_conf('nova', 'nova.wsgi.osapi_compute:application'))
    commands['nova'] = ([os.path.join(bin_dir, 'gunicorn')], d,
                        {'OS_NOVA_CONFIG_DIR': d})
    return commands


def sync_databases(state):
    """Create the schemas of databases that do not exist yet."""
    state_nova = os.path.join(state, 'nova')
    syncs = [
        ('ironic', ['ironic'], [['ironic-dbsync', 'create_schema']]),
        ('placement', ['placement'], [['placement-manage', 'db', 'sync']]),
        # cell0 only so that Nova does not log "No cells are configured".
        ('nova', ['nova_api', 'nova', 'nova_cell0'], [
            ['nova-manage', 'api_db', 'sync'],
            ['nova-manage', 'cell_v2', 'map_cell0', '--database_connection',
             sqlite(state_nova, 'nova_cell0')],
            ['nova-manage', 'db', 'sync']]),
    ]
    for sync in syncs:  # one by one: in parallel is no faster on 2 cores
        sync_database(state, *sync)


def sync_database(state, name, dbs, commands):
    d = os.path.join(state, name)
    files = [os.path.join(d, db + '.sqlite') for db in dbs]
    if all(map(os.path.exists, files)):
        return
    started = time.monotonic()
    bin_dir = os.path.join(venv_dir(), 'bin')
    conf = os.path.join(d, name + '.conf')
    log = os.path.join(state, 'logs', name + '-dbsync.log')
    try:
        for command, *args in commands:
            run_logged([os.path.join(bin_dir, command), '--config-file',
                        conf, *args], log)
    except BaseException:
        for path in files:  # so that the next start tries again
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        raise
    say('%s: database created in %.1f s' % (name, time.monotonic() - started))


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
    try:
        with open(pid_file(state, name)) as f:
            pid, started, number = f.read().split()
        pid, number = int(pid), int(number)
    except (OSError, ValueError):
        return None, None
    reap(pid)
    return (pid, number) if start_time(pid) == started else (None, None)


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


def answers(number):
    try:
        with urllib.request.urlopen('http://%s:%d/' % (HOST, number),
                                    timeout=5) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def spawn(state, name, argv, cwd, env):
    log = os.path.join(state, 'logs', name + '.log')
    with open(log, 'ab') as out:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=dict(os.environ, **env),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    write(pid_file(state, name), '%d %s %d\n'
          % (proc.pid, start_time(proc.pid), port(name)))
    return proc.pid


def wait_up(state, name, pid, timeout):
    log = os.path.join(state, 'logs', name + '.log')
    with open(log, 'rb') as f:
        f.seek(0, os.SEEK_END)
        deadline = time.monotonic() + timeout
        while not answers(port(name)):
            reap(pid)
            # Ironic's master outlives its failing worker and restarts it.
            if start_time(pid) is None or b'exited with status' in f.read():
                raise Error('%s failed to start; %s ends:\n%s'
                            % (name, log, tail(log)))
            if time.monotonic() > deadline:
                raise Error('%s did not answer on %s:%d within %d s; %s '
                            'ends:\n%s' % (name, HOST, port(name), timeout,
                                            log, tail(log)))
            time.sleep(0.1)


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


def start(path=None, timeout=None):
    """Start the services that are not running; return the names of
    those it started."""
    state = state_dir(path)
    timeout = timeout or int(os.environ.get('TENKS_OPENSTACK_TIMEOUT') or 60)
    install()
    with locked(state):
        commands = configure(state)
        todo = []
        for name in SERVICES:
            pid, number = running(state, name)
            if pid:
                say('%s: already running (pid %d, port %d)'
                    % (name, pid, number))
            elif not port_free(port(name)):
                raise Error('%s: %s:%d is in use by a process not started '
                            'from %s' % (name, HOST, port(name), state))
            else:
                todo.append(name)
        if not todo:
            return []
        sync_databases(state)
        started = {}
        t0 = time.monotonic()
        try:
            for name in todo:  # all at once: they start in 1-3 s each
                started[name] = spawn(state, name, *commands[name])
            for name, pid in started.items():
                wait_up(state, name, pid, timeout)
                say('%s: started (pid %d), answering on %s:%d after %.1f s'
                    % (name, pid, HOST, port(name), time.monotonic() - t0))
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
        return _stop(state, SERVICES if names is None else names)


def _stop(state, names):
    stopped = []
    for name in reversed(SERVICES):
        if name not in names:
            continue
        pid, number = running(state, name)
        if pid:
            t0 = time.monotonic()
            kill_group(pid)
            stopped.append(name)
            if not poll(lambda n=number: port_free(n), 10):
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


def status(path=None):
    """{name: whether it is up}, printing a line per service."""
    state = state_dir(path)
    result = {}
    for name in SERVICES:
        pid, number = running(state, name)
        number = number or port(name)
        up = pid and answers(number)
        url = 'http://%s:%d' % (HOST, number)
        print('%-9s %-4s %s%s' % (name, 'up' if up else 'down', url,
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
    args = parser.parse_args()
    try:
        if args.command == 'install':
            if not install():
                say('already installed in %s' % venv_dir())
        elif args.command == 'start':
            start(args.state_dir)
        elif args.command == 'stop':
            if not stop(args.state_dir):
                say('nothing was running')
        elif not all(status(args.state_dir).values()):
            sys.exit(3)
    except Error as e:
        sys.exit('openstack-services: ERROR: %s' % e)


if __name__ == '__main__':
    main()
