"""Where a BMC daemon finds the faults of its BMCs (tenks.bmc_faults).

``<daemon directory>/faults/<domain>.json`` holds the fault of the BMC
of ``domain`` (mode 0600). The hostagent's driver writes it and removes
it with the BMC; the daemon (the IPMI host, a Redfish emulator) reads it
again whenever it changes, so a fault holds across restarts of either.
Kept free of heavy imports: the daemons load it.
"""

import contextlib
import json
import os
import threading

from hostagent.drivers.bmc import watched
from tenks import bmc_faults

FAULTS = 'faults'
SUFFIX = '.json'


def path(directory, domain):
    return os.path.join(directory, FAULTS, domain + SUFFIX)


def write(directory, domain, fault):
    """Store ``fault`` for ``domain``'s BMC (None: remove it); whether
    that changed anything."""
    name = path(directory, domain)
    if fault is None:
        try:
            os.unlink(name)
        except FileNotFoundError:
            return False
        return True
    if read(directory, domain) == fault:
        return False
    os.makedirs(os.path.dirname(name), mode=0o700, exist_ok=True)
    tmp = name + '.tmp'
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, 'w', encoding='utf-8') as f:
        json.dump(fault, f, sort_keys=True)
    os.replace(tmp, name)
    return True


def read(directory, domain):
    """The fault stored for ``domain``'s BMC, or None (none, or a file
    that holds no valid fault)."""
    with contextlib.suppress(OSError, ValueError):
        with open(path(directory, domain), encoding='utf-8') as f:
            fault = json.load(f)
        if bmc_faults.problem(fault) is None:
            return fault
    return None


def read_all(directory):
    """{domain: fault} of every valid fault file of ``directory``."""
    try:
        names = os.listdir(os.path.join(directory, FAULTS))
    except OSError:
        return {}
    found = {}
    for name in names:
        if name.endswith(SUFFIX) and not name.startswith('.'):
            fault = read(directory, name[:-len(SUFFIX)])
            if fault is not None:
                found[name[:-len(SUFFIX)]] = fault
    return found


class Reader:
    """The faults of a daemon's BMCs, each file parsed again only when
    it changes (a stat per look-up)."""

    def __init__(self, directory):
        self.directory = directory
        self._known = {}  # domain: (file version, fault)
        self._lock = threading.Lock()

    def get(self, domain):
        """The fault of ``domain``'s BMC now, or None."""
        version = watched.version(path(self.directory, domain))
        with self._lock:
            known = self._known.get(domain)
        if known is not None and known[0] == version:
            return known[1]
        fault = None if version is None else read(self.directory, domain)
        with self._lock:
            self._known[domain] = (version, fault)
        return fault
