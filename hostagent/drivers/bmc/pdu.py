"""The VirtualPDU process: VirtualPDU's APC Rack PDU behind Tenks' own
entry, started by hostagent.drivers.bmc.virtualpdu as

    <VirtualPDU's python> pdu.py <dir>/pdu.json

It runs in VirtualPDU's own venv ([hostagent] virtualpdu_python: it
needs older pysnmp and pyasn1 than Tenks), so of Tenks it imports only
the light modules that read faults, from the tree it is in.
``pdu.json`` (0600) holds the address, port, community and libvirt URI.
An outlet serves the domain named in ``<dir>/outlets/<n>``,
read at each request, so outlets come and go without a restart. An
outlet's state is its domain's state as libvirt reports it (VirtualPDU
alone remembers what it was last told, which a power change made
elsewhere makes wrong); an outlet without a domain is off.

An outlet shows the fault of its domain (tenks.bmc_faults) stored in
``<dir>/faults/`` (fault_files, read again when it changes): see
pdu_faults for what each does. A slow outlet's answers are held back
while the agent serves the others: this runs the agent's loop itself.
"""

import functools
import importlib.machinery
import json
import logging
import os
import sys
import time

import libvirt
from pysnmp.carrier.asyncore import dispatch
from pysnmp.proto import rfc1905
from pysnmp.proto.api import v2c
from virtualpdu import core
from virtualpdu import drivers
from virtualpdu.drivers import libvirt_driver
from virtualpdu.pdu import TraversableOidMapping
from virtualpdu.pdu import apc_rackpdu
from virtualpdu.pdu import pysnmp_handler

# The name of the one PDU of the process (VirtualPDU names each PDU).
PDU_NAME = 'pdu'
# The packages of Tenks this process may import, from the tree this
# file is in (not from Tenks' environment, whose pysnmp is another).
TENKS_PACKAGES = ('hostagent', 'tenks')
TENKS_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))


class _TenksFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name in TENKS_PACKAGES:
            return importlib.machinery.PathFinder.find_spec(name,
                                                            [TENKS_ROOT])
        return None


sys.meta_path.insert(0, _TenksFinder)

from hostagent.drivers.bmc import fault_files  # noqa: E402
from hostagent.drivers.bmc import pdu_faults  # noqa: E402


class Outlets:
    """VirtualPDU's mapping {(pdu, outlet): domain}, read from the files
    of ``directory``."""

    def __init__(self, directory):
        self.directory = directory

    def __getitem__(self, key):
        try:
            with open(os.path.join(self.directory, str(int(key[1]))),
                      encoding='utf-8') as f:
                return f.read()
        except FileNotFoundError:
            raise KeyError(key) from None


class Domains(libvirt_driver.LibvirtDriver):
    """VirtualPDU's libvirt driver, but a domain that is gone or a
    libvirt error reads as off instead of ending the process, and a
    power-stuck outlet's domain is not switched."""

    def __init__(self, uri, faults):
        super().__init__(uri)
        self.faults = faults

    def power_on(self, name):
        if not self._stuck(name, 'on'):
            super().power_on(name)

    def power_off(self, name):
        if not self._stuck(name, 'off'):
            super().power_off(name)

    def _stuck(self, name, state):
        if pdu_faults.stuck(self.faults.get(name)):
            logging.info('Outlet of %s is power-stuck: not powered %s',
                         name, state)
            return True
        return False

    def get_power_state(self, name):
        try:
            return super().get_power_state(name)
        except (drivers.DeviceNotFound, libvirt.libvirtError) as e:
            logging.warning('Outlet of %s reads off: %s', name,
                            type(e).__name__)
            return core.POWER_OFF


class Unremembered(dict):
    """VirtualPDU's store of outlet states, which keeps none: each read
    asks libvirt."""

    def __setitem__(self, key, value):
        pass


def show_faults(engine, power_unit, outlets, faults, later):
    """Make the command responders VirtualPDU registered with ``engine``
    answer as the faults (a fault_files.Reader) of the domains of
    ``outlets`` say (pdu_faults), holding slow answers in ``later``."""
    for pdu_type in (rfc1905.GetRequestPDU, rfc1905.GetNextRequestPDU,
                     rfc1905.SetRequestPDU):
        responder = engine.msgAndPduDsp.getRegisteredApp(
            engine.snmpEngineID, pdu_type.tagSet).__self__
        # processPdu calls it: VirtualPDU's stays as the fault-free path.
        responder.handleMgmtOperation = functools.partial(
            _faulty, responder, responder.handleMgmtOperation,
            pdu_type is rfc1905.GetNextRequestPDU, power_unit, outlets,
            faults, later)


def _faulty(responder, handle, is_next, power_unit, outlets, faults, later,
            engine, state_reference, context_name, req_pdu, ac_info):
    """A responder's handleMgmtOperation: ``handle`` (VirtualPDU's) as
    the faults of the outlets the request names allow, now or later."""
    var_binds = v2c.apiPDU.getVarBinds(req_pdu)
    oids = [oid for oid, _ in var_binds]
    mapping = power_unit.oid_mapping
    if is_next:
        oids = [_next(mapping, oid) for oid in oids]
    found = []
    for index, oid in enumerate(oids):
        outlet = getattr(mapping.get(oid), 'outlet_number', None)
        try:
            domain = outlets[(PDU_NAME, outlet)]
        except (KeyError, TypeError, ValueError):
            continue
        fault = faults.get(domain)
        if fault is not None:
            found.append((index, fault))
    action, delay = pdu_faults.verdict(found)
    if action == pdu_faults.DROP:
        responder.releaseStateInformation(state_reference)
        return
    if action is None:
        answer = functools.partial(handle, engine, state_reference,
                                   context_name, req_pdu, ac_info)
    else:
        answer = functools.partial(_fail, responder, engine, state_reference,
                                   action[1], var_binds)
    if delay:
        later.add(delay, answer)
    else:
        answer()


def _fail(responder, engine, state_reference, index, var_binds):
    try:
        responder.sendRsp(engine, state_reference, pdu_faults.GEN_ERR, index,
                          var_binds)
    finally:
        responder.releaseStateInformation(state_reference)


def _next(mapping, oid):
    try:
        return TraversableOidMapping(mapping).next(to=oid)
    except IndexError:
        return None


def serve(dispatcher, later):
    """Run the agent (as its dispatcher's runDispatcher does), and the
    held-back answers when due."""
    dispatcher.jobStarted(1)
    while True:
        wait = later.run_due()
        resolution = dispatcher.getTimerResolution()
        dispatch.loop(resolution if wait is None else min(wait, resolution),
                      use_poll=True, map=dispatcher.getSocketMap(), count=1)
        dispatcher.handleTimerTick(time.time())


def main(argv):
    with open(argv[1], encoding='utf-8') as f:
        config = json.load(f)
    logging.basicConfig(format='%(asctime)s %(message)s', level=logging.INFO)
    faults = fault_files.Reader(os.path.dirname(os.path.abspath(argv[1])))
    outlets = Outlets(config['outlets'])
    later = pdu_faults.Later()
    pdu_core = core.Core(
        driver=Domains(config['libvirt_uri'], faults), mapping=outlets,
        store=Unremembered(), default_state=core.POWER_OFF)
    power_unit = apc_rackpdu.APCRackPDU(PDU_NAME, pdu_core)
    harness = pysnmp_handler.SNMPPDUHarness(
        power_unit, config['address'], config['port'],
        snmp_versions=['1', '2c'], community=config['community'],
        context_name='')
    show_faults(harness.snmp_engine, power_unit, outlets, faults, later)
    logging.info('Serving SNMP on %s:%d', config['address'], config['port'])
    serve(harness.snmp_engine.transportDispatcher, later)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
