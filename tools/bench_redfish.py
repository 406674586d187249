"""Requests per second of a Redfish emulator, by how it checks passwords.

One libvirt domain (bench-redfish-<random>, defined, never started)
served on 127.0.0.1:<port> by the emulator a hostagent starts, its
htpasswd file rewritten at each bcrypt cost, three ways:

sushy-tools cost 5   sushy-emulator's own authentication, bcrypt on every
                     request: what Tenks ran before issue 19
sushy-tools cost 12  the same at the cost Tenks hashes with now
Tenks cost 12        hostagent.drivers.bmc.emulator: bcrypt once, then an
                     HMAC per request (what Tenks runs now)

Each runs ``--threads`` clients for ``--seconds`` asking what Ironic
polls (GET /redfish/v1/Systems/<id>, the power state among the rest)
and prints requests/s and the median latency. Needs root and libvirt;
removes its domain and files at the end.

    .venv/bin/python tools/bench_redfish.py [--seconds 10] [--threads 4]
        [--port 9190]
"""

import argparse
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import bcrypt
import libvirt
import requests

from hostagent.drivers.bmc import daemon_dirs
from hostagent.drivers.bmc import processes
from hostagent.drivers.bmc import sushy
from tenks import conf as tenks_conf

DOMAIN = """<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64'>hvm</type><boot dev='hd'/></os>
  <devices/>
</domain>"""
PASSWORD = 'bench-pw'
URI = 'qemu:///system'


def serve(command, url, seconds, threads):
    """Start ``command``, then (requests/s, median s) of GETs of
    ``url`` from ``threads`` clients for ``seconds``."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        def answers():
            try:
                return requests.get(url, auth=('admin', PASSWORD),
                                    timeout=30).status_code == 200
            except requests.ConnectionError:
                return False
        if not processes.poll(answers, 30, 0.1):
            raise RuntimeError('%s did not answer' % ' '.join(command))
        times = []
        errors = []
        deadline = time.monotonic() + seconds

        def client():
            session = requests.Session()
            while time.monotonic() < deadline and not errors:
                start = time.monotonic()
                answer = session.get(url, auth=('admin', PASSWORD),
                                     timeout=60)
                if answer.status_code != 200:
                    errors.append(answer.text)
                times.append(time.monotonic() - start)

        workers = [threading.Thread(target=client) for _ in range(threads)]
        started = time.monotonic()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if errors:
            raise RuntimeError('%s answered: %s' % (url, errors[0]))
        return len(times) / (time.monotonic() - started), statistics.median(
            times)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=10)
    parser.add_argument('--threads', type=int, default=4)
    parser.add_argument('--port', type=int, default=9190)
    args = parser.parse_args()

    name = 'bench-redfish-%s' % secrets.token_hex(3)
    state_dir = tempfile.mkdtemp(prefix='tenks-bench-redfish-')
    conn = libvirt.open(URI)
    uuid = conn.defineXML(DOMAIN % name).UUIDString()
    conn.close()
    try:
        conf = tenks_conf.new_conf()
        conf([], default_config_files=[])
        conf.set_override('state_dir', state_dir)
        driver = sushy.SushyDriver(conf)
        owner = 'tenks:bench:%s' % name
        driver.ensure_system(owner, name, uuid, '127.0.0.1',
                             args.port, 'admin', PASSWORD)
        path = driver._dirs.path(owner)
        # Only to lend its files: each run below starts its own.
        driver._stop(path)
        os.makedirs(os.path.join(path, sushy.DOWNLOADS), mode=0o700)
        config = os.path.join(path, 'emulator.conf')
        url = 'http://127.0.0.1:%d/redfish/v1/Systems/%s' % (
            args.port, uuid)
        sushy_tools = [os.path.join(os.path.dirname(sys.executable),
                                    'sushy-emulator'), '--config', config]
        tenks = [sys.executable, '-m', 'hostagent.drivers.bmc.emulator',
                 '--config', config]
        print('%-22s %12s %10s' % ('emulator', 'requests/s', 'median ms'))
        for label, command, cost in [('sushy-tools, cost 5', sushy_tools, 5),
                                     ('sushy-tools, cost 12', sushy_tools,
                                      12),
                                     ('Tenks, cost 12', tenks, 12)]:
            digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(cost))
            daemon_dirs.write(os.path.join(path, 'htpasswd'),
                              'admin:%s\n' % digest.decode())
            rate, median = serve(command, url, args.seconds, args.threads)
            print('%-22s %12.1f %10.1f' % (label, rate, median * 1000))
        driver.remove_system(name, owner)
    finally:
        # A connection of its own: libvirtd may have restarted meanwhile.
        conn = libvirt.open(URI)
        conn.lookupByName(name).undefine()
        conn.close()
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == '__main__':
    main()
