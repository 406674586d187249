"""Which state directory each deployment's things were made from.

Before a hostagent makes anything for a deployment it notes, in
``[hostagent] deployments_dir`` (shared by the hostagents of the
machine, outside every state directory), the state directory it serves:
``<deployments_dir>/<hash of the deployment's mark>/<hash of the state
directory>.json`` holds {owner, state_dir, hostagent}. A deployment is
recorded by the state database of its conductor, in embedded mode
``<state dir>/state.sqlite``: so an audit can tell the things of a
deployment whose state directory is gone, or no longer records it,
from those of one that another state directory still has.

Things made before notes were taken have none: nothing proves their
deployment dead, so an audit never removes them (unless the auditing
conductor knows the deployment itself).
"""

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import urllib.parse

from tenks import exceptions
from tenks import fileutils
from tenks import names
from tenks import states

DATABASE = 'state.sqlite'
SUFFIX = '.json'


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def recorded(state_dir):
    """The deployment marks the state database of ``state_dir`` records,
    or None when it has none; sqlite3.Error when it cannot be read (a
    database still being made, say)."""
    path = os.path.join(state_dir, DATABASE)
    if not os.path.exists(path):
        return None
    uri = 'file:%s?mode=ro' % urllib.parse.quote(path)
    with contextlib.closing(sqlite3.connect(uri, uri=True,
                                            timeout=5)) as db:
        rows = db.execute('SELECT name, uuid FROM tenks_clusters').fetchall()
    return {names.owner(name, uuid) for name, uuid in rows}


class Registry:
    """The notes of one hostagent, which serves ``state_dir``."""

    def __init__(self, directory, state_dir, host):
        self.directory = directory
        self.state_dir = os.path.abspath(state_dir)
        self.host = host
        # Deployments noted by this process already.
        self._noted = set()

    def _folder(self, owner):
        return os.path.join(self.directory, _digest(owner))

    def note(self, owner):
        """Note that this hostagent makes things for deployment ``owner``
        (its mark, or this hostagent's mark for it); DriverError when
        it cannot."""
        owner = names.deployment_mark(owner)
        if owner in self._noted:
            return
        folder = self._folder(owner)
        path = os.path.join(folder, _digest(self.state_dir) + SUFFIX)
        try:
            if not os.path.exists(path):
                fileutils.private_dir(folder)
                fd, tmp = tempfile.mkstemp(dir=folder, prefix='.')
                with os.fdopen(fd, 'w') as f:
                    json.dump({'owner': owner, 'state_dir': self.state_dir,
                               'hostagent': self.host}, f)
                os.replace(tmp, path)
        except OSError as e:
            raise exceptions.DriverError(
                driver='hostagent', action='note deployment %s in %s' % (
                    owner, self.directory), reason=str(e)) from e
        self._noted.add(owner)

    def owners(self):
        """The deployments noted here (by any hostagent)."""
        found = set()
        try:
            folders = os.listdir(self.directory)
        except FileNotFoundError:
            return found
        for folder in folders:
            with contextlib.suppress(OSError, ValueError, StopIteration):
                path = os.path.join(self.directory, folder)
                name = next(n for n in sorted(os.listdir(path))
                            if n.endswith(SUFFIX))
                with open(os.path.join(path, name)) as f:
                    found.add(json.load(f)['owner'])
        return found

    def state_dirs(self, owner):
        """The state directories noted for deployment ``owner``."""
        folder = self._folder(names.deployment_mark(owner))
        try:
            entries = sorted(os.listdir(folder))
        except FileNotFoundError:
            return []
        found = []
        for name in entries:
            if not name.endswith(SUFFIX):
                continue
            try:
                with open(os.path.join(folder, name)) as f:
                    note = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(note, dict) and note.get('owner') == owner and (
                    isinstance(note.get('state_dir'), str)):
                found.append(note['state_dir'])
        return found

    def verdict(self, owner, read=None):
        """(verdict, reason) of deployment ``owner``: live when a state
        directory noted for it records it; unknown when one cannot be
        asked, or none is noted; here when the only ones that are not
        dead are this hostagent's own, without a state database; dead
        when every one is gone or no longer records it (tenks.states'
        DEPLOYMENT_*). ``read``: a
        dict caching what each state directory records."""
        owner = names.deployment_mark(owner)
        read = {} if read is None else read
        judged = [self._judge(owner, state_dir, read)
                  for state_dir in self.state_dirs(owner)]
        if not judged:
            return (states.DEPLOYMENT_UNKNOWN,
                    'no state directory is noted for it')
        for verdict in (states.DEPLOYMENT_LIVE, states.DEPLOYMENT_UNKNOWN,
                        states.DEPLOYMENT_HERE, states.DEPLOYMENT_DEAD):
            reasons = [reason for found, reason in judged if found == verdict]
            if reasons:
                return verdict, '; '.join(reasons)

    def _judge(self, owner, state_dir, read):
        if not os.path.isdir(state_dir):
            return (states.DEPLOYMENT_DEAD,
                    'its state directory %s is gone' % state_dir)
        if state_dir not in read:
            try:
                read[state_dir] = recorded(state_dir)
            except sqlite3.Error as e:
                read[state_dir] = e
        owners = read[state_dir]
        if isinstance(owners, sqlite3.Error):
            return (states.DEPLOYMENT_UNKNOWN,
                    'the state database of %s cannot be read (%s)' % (
                        state_dir, owners))
        if owners is None:
            if state_dir == self.state_dir:
                return (states.DEPLOYMENT_HERE,
                        'noted by this hostagent, whose state directory %s '
                        'holds no state database' % state_dir)
            return (states.DEPLOYMENT_UNKNOWN,
                    'state directory %s holds no state database' % state_dir)
        if owner in owners:
            return (states.DEPLOYMENT_LIVE,
                    'state directory %s records it' % state_dir)
        return (states.DEPLOYMENT_DEAD,
                'state directory %s no longer records it' % state_dir)

    def forget(self, owner):
        """Drop the notes of deployment ``owner`` (nothing of it is left
        here)."""
        owner = names.deployment_mark(owner)
        shutil.rmtree(self._folder(owner), ignore_errors=True)
        self._noted.discard(owner)
