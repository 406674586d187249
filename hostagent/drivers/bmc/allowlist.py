"""The systems a sushy-tools emulator run by Tenks serves.

The emulator's configuration file (written by hostagent.drivers.bmc.sushy)
sets ``SUSHY_EMULATOR_ALLOWED_INSTANCES`` to an :class:`AllowList`, which
sushy-tools asks, on every request, whether it holds a system's identity.
It reads the file the hostagent keeps, so the list follows nodes as they
come and go without restarting the emulator. Kept free of other imports:
the emulator process loads it.
"""

import json


class AllowList:
    """The system ids (domain UUIDs) of a JSON file {domain: system id};
    none when the file cannot be read."""

    def __init__(self, path):
        self.path = path

    def __contains__(self, identity):
        try:
            with open(self.path, encoding='utf-8') as f:
                return identity in json.load(f).values()
        except (OSError, ValueError, AttributeError):
            return False
