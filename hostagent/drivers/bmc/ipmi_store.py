"""The directory of an IPMI host (hostagent.drivers.bmc.ipmi_host).

``<state_dir>/ipmi`` (mode 0700) holds:

``bmcs/<domain>.json``  one BMC's definition (its password included,
                        and the owner mark it was made for), mode 0600,
                        so that a host that starts again serves every
                        BMC it served
``faults/<domain>.json`` the fault the BMC shows (fault_files), 0600
``control.sock``        the host's control socket, mode 0600
``host.pid``, ``host.log``, ``lock`` (the driver's)

The host's process carries ``TENKS_IPMI_HOST=<directory>`` in its
environment: nothing without that mark is ever stopped.
"""

import contextlib
import ipaddress
import json
import os

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

MARKER_ENV = 'TENKS_IPMI_HOST'
CONTROL = 'control.sock'
PID_FILE = 'host.pid'
LOG_FILE = 'host.log'
BMCS = 'bmcs'
SUFFIX = '.json'
# What a definition holds; all but the port are strings.
FIELDS = ('domain', 'address', 'port', 'username', 'password',
          'libvirt_uri', 'owner')
MAX_NAME = 200  # characters of a domain name, well within a file name's
MAX_TEXT = 1024  # characters of the other strings


def marker(directory):
    """The environment entry that marks the host of ``directory``."""
    return ('%s=%s' % (MARKER_ENV, directory)).encode()


def name_problem(domain):
    """Why ``domain`` cannot name a definition file, or None.

    libvirt refuses '/' in domain names; a leading dot is kept for the
    temporary files.
    """
    if not isinstance(domain, str) or not 0 < len(domain) <= MAX_NAME:
        return 'a domain name is a string of 1 to %d characters' % MAX_NAME
    if '/' in domain or '\0' in domain or domain.startswith('.'):
        return ('a domain name has no "/" or NUL and does not start '
                'with "."')
    return None


def definition_problem(definition):
    """What is wrong with ``definition`` (a parsed request or file), as
    a message, or None."""
    if not isinstance(definition, dict) or set(definition) != set(FIELDS):
        return 'a BMC is an object with the keys %s' % ', '.join(FIELDS)
    problem = name_problem(definition['domain'])
    if problem:
        return problem
    port = definition['port']
    if type(port) is not int or not 0 < port < 65536:
        return 'port must be an integer from 1 to 65535'
    for key in ('address', 'username', 'password', 'libvirt_uri', 'owner'):
        value = definition[key]
        if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT:
            return '%s must be a string of 1 to %d characters' % (
                key, MAX_TEXT)
    try:
        ipaddress.ip_address(definition['address'])
    except ValueError:
        return 'address must be an IP address'
    return None


def _path(directory, domain):
    return os.path.join(directory, BMCS, domain + SUFFIX)


def write(directory, definition):
    """Store ``definition`` (mode 0600), replacing any of its domain at
    once."""
    path = _path(directory, definition['domain'])
    tmp = os.path.join(os.path.dirname(path),
                       '.%s.tmp' % os.path.basename(path))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, 'w', encoding='utf-8') as f:
        json.dump(definition, f, sort_keys=True)
    os.replace(tmp, path)


def delete(directory, domain):
    """Forget the definition of ``domain``; whether there was one."""
    if name_problem(domain):
        return False
    try:
        os.unlink(_path(directory, domain))
    except FileNotFoundError:
        return False
    return True


def owner(directory, domain):
    """The owner mark recorded with the definition of ``domain``: None
    when there is none, '' when one is there that records no owner (or
    cannot be read): nobody's."""
    if name_problem(domain):
        return None
    try:
        with open(_path(directory, domain), encoding='utf-8') as f:
            definition = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return ''
    found = definition.get('owner') if isinstance(definition, dict) else None
    return found if isinstance(found, str) else ''


def read_all(directory):
    """{domain: definition} of every readable definition; unreadable
    ones are logged and left out (and requests refuse them: see
    owner)."""
    definitions = {}
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir(os.path.join(directory, BMCS))):
            if name.startswith('.') or not name.endswith(SUFFIX):
                continue
            path = os.path.join(directory, BMCS, name)
            try:
                with open(path, encoding='utf-8') as f:
                    definition = json.load(f)
            except (OSError, ValueError) as e:
                problem = str(e)
            else:
                problem = definition_problem(definition) or (
                    None if name == definition['domain'] + SUFFIX
                    else 'it names another domain')
            if problem:
                LOG.warning('Ignoring the BMC definition %s: %s', path,
                            problem)
                continue
            definitions[definition['domain']] = definition
    return definitions
