"""The systems a sushy-tools emulator run by Tenks serves.

The emulator's configuration file (written by hostagent.drivers.bmc.sushy)
sets ``SUSHY_EMULATOR_ALLOWED_INSTANCES`` to an :class:`AllowList`, which
sushy-tools and Tenks' layers (hostagent.drivers.bmc.emulator) ask, on
every request, whether it holds a system's identity. It is a directory
the hostagent keeps, a file named after each system id, so the list
follows nodes as they come and go without restarting the emulator, and a
question costs one look-up whatever the number of systems. Kept free of
heavy imports: the emulator process loads it.
"""

import os


class AllowList:
    """The system ids (domain UUIDs) named by the files of a directory;
    none when it cannot be read."""

    def __init__(self, path):
        self.path = path

    def __contains__(self, identity):
        if (not isinstance(identity, str) or not identity
                or '/' in identity or identity.startswith('.')
                or identity.endswith('.tmp')):
            return False
        return os.path.isfile(os.path.join(self.path, identity))

    def ids(self):
        try:
            names = os.listdir(self.path)
        except OSError:
            return frozenset()
        return frozenset(n for n in names if not n.endswith('.tmp'))

    def domain(self, identity):
        """The name of the domain of system ``identity`` (its file holds
        it), or None when the list does not hold it."""
        if identity not in self:
            return None
        try:
            with open(os.path.join(self.path, identity),
                      encoding='utf-8') as f:
                return f.read()
        except OSError:
            return None
