"""The systems a sushy-tools emulator run by Tenks serves.

The emulator's configuration file (written by hostagent.drivers.bmc.sushy)
sets ``SUSHY_EMULATOR_ALLOWED_INSTANCES`` to an :class:`AllowList`, which
sushy-tools and Tenks' layers (hostagent.drivers.bmc.emulator) ask, on
every request, whether it holds a system's identity. It follows the file
the hostagent keeps, so the list follows nodes as they come and go
without restarting the emulator. Kept free of heavy imports: the emulator
process loads it.
"""

import json

from hostagent.drivers.bmc import watched


class AllowList:
    """The system ids (domain UUIDs) of a JSON file {domain: system id};
    none when the file cannot be read. The file is read again when it
    changes, not for every question."""

    def __init__(self, path):
        self.path = path
        # (file version, {id: domain}), replaced at once: requests run on
        # threads.
        self._read = (None, {})

    def __contains__(self, identity):
        return identity in self.systems()

    def systems(self):
        """{system id: domain name} of the file as it is now."""
        found = watched.version(self.path)
        if found is None:
            return {}
        seen, systems = self._read
        if found != seen:
            try:
                with open(self.path, encoding='utf-8') as f:
                    systems = {system: domain
                               for domain, system in json.load(f).items()}
            except (OSError, ValueError, AttributeError, TypeError):
                systems = {}
            self._read = (found, systems)
        return systems
