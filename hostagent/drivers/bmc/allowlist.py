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
        # (file version, ids), replaced at once: requests run on threads.
        self._read = (None, frozenset())

    def __contains__(self, identity):
        return identity in self.ids()

    def ids(self):
        found = watched.version(self.path)
        if found is None:
            return frozenset()
        seen, ids = self._read
        if found != seen:
            try:
                with open(self.path, encoding='utf-8') as f:
                    ids = frozenset(json.load(f).values())
            except (OSError, ValueError, AttributeError, TypeError):
                ids = frozenset()
            self._read = (found, ids)
        return ids
