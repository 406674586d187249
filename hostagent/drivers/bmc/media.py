"""What a Redfish node's virtual media is, shared by the domain
(hostagent.drivers.virt.libvirt), the emulator's process
(hostagent.drivers.bmc.emulator) and its driver (sushy)."""

import os

# The user alias of the domain's empty CD-ROM drive made for it.
DRIVE_ALIAS = 'ua-tenks-virtual-media'
# sushy-tools' virtual media devices: that drive alone.
DEVICES = {'Cd': {'Name': 'Virtual CD', 'MediaTypes': ['CD', 'DVD']}}


def files(directory, system):
    """The medium files (``<system>-*.iso``) of ``system`` in an
    emulator's media ``directory``."""
    return [os.path.join(directory, name)
            for name in sorted(os.listdir(directory))
            if name.startswith(system + '-')]
