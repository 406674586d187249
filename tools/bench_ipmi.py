"""Memory and CPU of the IPMI BMCs of one state directory.

N BMCs are made through the virtualbmc driver, for N small domains
(64 MiB, TCG, no disk; defined, never started), then measured: the
processes that serve them (those with the state directory in their
environment), their memory (RSS, and PSS, which shares a page among the
processes that map it), their CPU time while idle and while answering
``ipmitool power status`` for every BMC (8 at a time), and the driver's
calls. Needs root, libvirtd and ipmitool; uses UDP ports from --port and
domain names starting with ``bi<hex>``, and removes all it makes.

It measures whichever driver it imports: to measure another tree's
(another branch), run it with ``PYTHONPATH=<that tree>``.

    .venv/bin/python tools/bench_ipmi.py [--bmcs 100] [--idle 30]
"""

import argparse
import concurrent.futures
import contextlib
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

import libvirt

from hostagent.drivers.bmc import virtualbmc
from tenks import conf as tenks_conf

URI = 'qemu:///system'
# What the BMCs are recorded for: this bench's own mark.
OWNER = 'tenks:bench:ipmi/bench'
DOMAIN_XML = """<domain type='qemu'><name>%s</name>
<memory unit='MiB'>64</memory><vcpu>1</vcpu>
<os><type arch='x86_64'>hvm</type></os></domain>"""
TICK = os.sysconf('SC_CLK_TCK')


def service_pids(state_dir):
    pids = set()
    for pid in filter(str.isdigit, os.listdir('/proc')):
        with contextlib.suppress(OSError):
            with open('/proc/%s/environ' % pid, 'rb') as f:
                if state_dir.encode() in f.read() and int(pid) != os.getpid():
                    pids.add(int(pid))
    return pids


def memory_kib(pids):
    """(RSS, PSS) summed over ``pids``, in KiB."""
    rss = pss = 0
    for pid in pids:
        with open('/proc/%d/smaps_rollup' % pid) as f:
            for line in f:
                key, value = line.split(':', 1)
                if key == 'Rss':
                    rss += int(value.split()[0])
                elif key == 'Pss':
                    pss += int(value.split()[0])
    return rss, pss


def cpu_seconds(pids):
    """User and system CPU seconds of ``pids`` so far."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open('/proc/%d/stat' % pid) as f:
            fields = f.read().rpartition(')')[2].split()
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def threads(pids):
    return sum(len(os.listdir('/proc/%d/task' % pid)) for pid in pids)


def ipmitool(port):
    start = time.monotonic()
    result = subprocess.run(
        ['ipmitool', '-I', 'lanplus', '-H', '127.0.0.1', '-p', str(port),
         '-U', 'admin', '-P', 'password', 'power', 'status'],
        capture_output=True, text=True, timeout=120)
    if 'Chassis Power is off' not in result.stdout:
        raise RuntimeError('BMC on %d: %s' % (port, result.stderr))
    return time.monotonic() - start


def timed(function, *args):
    start = time.monotonic()
    result = function(*args)
    return result, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--bmcs', type=int, default=100)
    parser.add_argument('--idle', type=float, default=30,
                        help='seconds of idle CPU measured')
    parser.add_argument('--port', type=int, default=9100,
                        help='UDP port of the first BMC')
    args = parser.parse_args()

    prefix = 'bi' + secrets.token_hex(2)
    names = ['%s-%d' % (prefix, i) for i in range(args.bmcs)]
    ports = [args.port + i for i in range(args.bmcs)]
    state_dir = tempfile.mkdtemp(prefix=prefix)
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', state_dir)
    conf.set_override('libvirt_uri', URI, group='hostagent')
    driver = virtualbmc.VirtualBmcDriver(conf)
    conn = libvirt.open(URI)
    figures = []
    try:
        for name in names:
            conn.defineXML(DOMAIN_XML % name)
        wanted = {name: {'address': '127.0.0.1', 'port': port,
                         'username': 'admin', 'password': 'password'}
                  for name, port in zip(names, ports, strict=True)}
        _, made = timed(lambda: [driver.ensure_bmc(n, owner=OWNER, **b)
                                 for n, b in wanted.items()])
        figures.append(('ensure_bmc, each new (serial)', '%.1f ms'
                        % (made / args.bmcs * 1000)))
        _, again = timed(lambda: [driver.ensure_bmc(n, owner=OWNER, **b)
                                  for n, b in wanted.items()])
        figures.append(('ensure_bmc, each unchanged', '%.1f ms'
                        % (again / args.bmcs * 1000)))
        changes, read = timed(driver.bmc_changes, wanted, OWNER)
        assert set(map(len, changes.values())) == {0}, changes
        figures.append(('bmc_changes of all', '%.1f ms' % (read * 1000)))

        pids = service_pids(state_dir)
        rss, pss = memory_kib(pids)
        figures += [
            ('processes (threads)', '%d (%d)' % (len(pids), threads(pids))),
            ('RSS, all', '%.1f MiB' % (rss / 1024)),
            ('PSS, all', '%.1f MiB' % (pss / 1024)),
            ('PSS per BMC', '%.2f MiB' % (pss / 1024 / args.bmcs))]

        time.sleep(2)  # let the start-up settle
        before = cpu_seconds(pids)
        time.sleep(args.idle)
        idle = cpu_seconds(pids) - before
        figures.append(('CPU idle', '%.2f%% of a core' % (
            idle / args.idle * 100)))

        before = cpu_seconds(pids)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            latencies, wall = timed(lambda: list(pool.map(ipmitool, ports)))
        busy = cpu_seconds(pids) - before
        latencies.sort()
        figures += [
            ('ipmitool power status, each BMC, 8 at a time',
             '%.2f s in all' % wall),
            ('  latency median / 95th percentile', '%.0f / %.0f ms' % (
                statistics.median(latencies) * 1000,
                latencies[int(len(latencies) * 0.95) - 1] * 1000)),
            ('  CPU of the BMC processes per request', '%.1f ms'
             % (busy / args.bmcs * 1000))]
        rss, pss = memory_kib(service_pids(state_dir))
        figures.append(('PSS, all, after', '%.1f MiB' % (pss / 1024)))

        _, removed = timed(lambda: [driver.remove_bmc(n, OWNER)
                                    for n in names])
        figures.append(('remove_bmc, each (the last stops it all)',
                        '%.1f ms' % (removed / args.bmcs * 1000)))
        left = service_pids(state_dir)
        figures.append(('processes left', str(len(left))))
    finally:
        for pid in service_pids(state_dir):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for name in names:
            with contextlib.suppress(libvirt.libvirtError):
                conn.lookupByName(name).undefine()
        conn.close()
        shutil.rmtree(state_dir, ignore_errors=True)
    print('%d IPMI BMCs, driver %s' % (args.bmcs, virtualbmc.__file__))
    for label, value in figures:
        print('  %-48s %s' % (label, value))


if __name__ == '__main__':
    main()
