"""Passwords checked against an htpasswd file of bcrypt hashes (lines
``user:$2b$<cost>$...``, as sushy-tools reads them), many times over.

bcrypt is slow on purpose: at the cost Tenks hashes with (12), one check
takes a quarter of a second of CPU or more, and the Redfish emulator is
asked for every request (Ironic polls each node's power state). A
:class:`Verifier` checks a (user, password) with bcrypt once, then knows
it by an HMAC under a random key of its own process (never the password
itself) until the file changes: a changed password is refused at once.
Kept free of heavy imports: the emulator process loads it.
"""

import hashlib
import hmac
import secrets
import threading

from hostagent.drivers.bmc import watched


def digests(path):
    """{user: bcrypt hash (bytes)} of the htpasswd file ``path``; {}
    without one."""
    try:
        with open(path, encoding='utf-8') as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    found = {}
    for line in lines:
        user, sep, digest = line.strip().partition(':')
        if sep:
            found.setdefault(user, digest.encode())
    return found


def cost(digest):
    """The cost (log2 rounds) of a bcrypt hash, or 0 if it is none."""
    parts = digest.split(b'$')
    try:
        return int(parts[2]) if parts[1] in (b'2a', b'2b', b'2y') else 0
    except (IndexError, ValueError):
        return 0


def matches(digest, password):
    """Whether ``password`` (bytes) is the one bcrypt hashed into
    ``digest``."""
    import bcrypt
    try:
        return bcrypt.checkpw(password, digest)
    except ValueError:  # not a bcrypt hash, or a password of > 72 bytes
        return False


class Verifier:
    """Checks (user, password) pairs against the htpasswd file ``path``.

    Requests that bring the same unknown pair at once wait for one
    bcrypt check rather than each paying for its own: Ironic verifies
    every node of a new cluster at once, all with the same credentials.
    """

    def __init__(self, path):
        self.path = path
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        # (file version, HMACs of the pairs bcrypt accepted in it)
        self._known = (None, set())
        self._checking = {}  # HMAC: lock of the check under way

    def check(self, username, password):
        """Whether the file lets ``username`` in with ``password``
        (bytes)."""
        user = username.encode()
        token = hmac.new(self._key, b'%d:%s:%s' % (len(user), user, password),
                         hashlib.sha256).digest()
        version = watched.version(self.path)
        with self._lock:
            if self._known[0] != version:
                self._known = (version, set())
            known = self._known[1]
            if token in known:
                return True
            checking = self._checking.setdefault(token, threading.Lock())
        with checking:
            # Accepted while this request waited?
            accepted = token in known
            if not accepted:
                digest = digests(self.path).get(username)
                accepted = digest is not None and matches(digest, password)
                if accepted:
                    # Into the set of the version read before: if the
                    # file changed meanwhile, the next check starts anew.
                    known.add(token)
        with self._lock:
            if self._checking.get(token) is checking:
                del self._checking[token]
        return accepted
