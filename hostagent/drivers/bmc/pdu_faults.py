"""What a VirtualPDU outlet's fault (tenks.bmc_faults) does to an SNMP
request, for hostagent.drivers.bmc.pdu. Kept free of pysnmp and of heavy
imports: the PDU process loads it in VirtualPDU's venv.

A request (GET, GETNEXT or SET) meets the faults of the outlets its
variables name (for a GETNEXT, the variables it answers with):

unreachable   no answer
slow          the answer ``delay`` seconds late, others answered meanwhile
error, flaky  error-status genErr, the index of the faulty variable; a
              SET is not made
power-stuck   a SET is answered as made, the domain's power not changed
              (the PDU's libvirt driver skips it: see ``stuck``)
"""

import heapq
import itertools
import logging
import time

from tenks import bmc_faults

GEN_ERR = 5  # SNMP's error-status genErr
DROP = 'drop'


def verdict(faults):
    """What to do with a request whose variables meet ``faults``
    ([(variable index, fault)]): DROP, ('error', index) (1-based, as
    SNMP counts), or None (answer as VirtualPDU does); and the seconds
    to wait before (0: none)."""
    kinds = [fault['kind'] for _, fault in faults]
    if bmc_faults.UNREACHABLE in kinds:
        return DROP, 0
    delay = max([fault['delay'] for _, fault in faults
                 if fault['kind'] == bmc_faults.SLOW], default=0)
    for index, fault in faults:
        if bmc_faults.fails(fault):
            return ('error', index + 1), delay
    return None, delay


def stuck(fault):
    """Whether a power change is acknowledged and not made under
    ``fault`` (None: none)."""
    return fault is not None and fault['kind'] == bmc_faults.POWER_STUCK


class Later:
    """Calls held back until their time, run by the PDU's one thread
    between requests (VirtualPDU's agent is single-threaded: a sleep
    would hold every outlet back)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._due = []  # heap of (when, sequence, call)
        self._sequence = itertools.count()

    def add(self, delay, call):
        heapq.heappush(self._due,
                       (self.clock() + delay, next(self._sequence), call))

    def run_due(self):
        """Run the calls whose time has come; the seconds until the
        next, or None when none waits."""
        while self._due and self._due[0][0] <= self.clock():
            call = heapq.heappop(self._due)[2]
            try:
                call()
            except Exception:
                logging.exception('A delayed SNMP answer failed')
        if not self._due:
            return None
        return max(0.0, self._due[0][0] - self.clock())
