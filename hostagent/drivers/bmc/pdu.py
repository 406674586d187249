"""The VirtualPDU process: VirtualPDU's APC Rack PDU behind Tenks' own
entry, started by hostagent.drivers.bmc.virtualpdu as

    <VirtualPDU's python> pdu.py <dir>/pdu.json

It runs in VirtualPDU's own venv ([hostagent] virtualpdu_python: it
needs older pysnmp and pyasn1 than Tenks), so it imports nothing of
Tenks. ``pdu.json`` (0600) holds the address, port, community and
libvirt URI. An outlet serves the domain named in ``<dir>/outlets/<n>``,
read at each request, so outlets come and go without a restart. An
outlet's state is its domain's state as libvirt reports it (VirtualPDU
alone remembers what it was last told, which a power change made
elsewhere makes wrong); an outlet without a domain is off.

Being Tenks' own entry, this is where a layer between the SNMP agent
and the outlets (fault injection) goes.
"""

import json
import logging
import os
import sys

import libvirt
from virtualpdu import core
from virtualpdu import drivers
from virtualpdu.drivers import libvirt_driver
from virtualpdu.pdu import apc_rackpdu
from virtualpdu.pdu import pysnmp_handler

# The name of the one PDU of the process (VirtualPDU names each PDU).
PDU_NAME = 'pdu'


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
    libvirt error reads as off instead of ending the process."""

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


def main(argv):
    with open(argv[1], encoding='utf-8') as f:
        config = json.load(f)
    logging.basicConfig(format='%(asctime)s %(message)s', level=logging.INFO)
    pdu_core = core.Core(
        driver=Domains(uri=config['libvirt_uri']),
        mapping=Outlets(config['outlets']), store=Unremembered(),
        default_state=core.POWER_OFF)
    harness = pysnmp_handler.SNMPPDUHarness(
        apc_rackpdu.APCRackPDU(PDU_NAME, pdu_core), config['address'],
        config['port'], snmp_versions=['1', '2c'],
        community=config['community'], context_name='')
    harness.run()
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
