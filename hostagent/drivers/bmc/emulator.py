"""The Redfish emulator process: sushy-tools' application behind Tenks'
layers, started by hostagent.drivers.bmc.sushy as

    python -m hostagent.drivers.bmc.emulator --config <dir>/emulator.conf

A request passes, from the outside in:

Authentication  HTTP basic against the htpasswd file, as in sushy-tools,
                but each (user, password) is checked with bcrypt once and
                then known by an HMAC until the file changes
                (hostagent.drivers.bmc.htpasswd).
Scope           a path naming a system or a manager outside the allow-list
                (``/redfish/v1/Systems/<id>/...``, ``/redfish/v1/Managers/
                <id>/...``: sushy-tools names each manager after its
                system) is answered 404 before sushy-tools sees it: no
                power or boot change, no virtual media download.
Faults          a system's BMC shows the fault Tenks was asked for
                (hostagent.drivers.bmc.emulator_faults).
Media           requests that may download or eject virtual media run one
                at a time; what a failed one left in the download
                directory is removed, and so is what an eject leaves.

sushy-tools downloads media into the temporary directory of its process,
set here to ``TENKS_DOWNLOAD_DIR`` (0700, in the emulator's own
directory); an insert then moves the medium to ``TENKS_MEDIA_DIR`` and
puts it into the domain's virtual media drive (MediaDrive). Its systems
driver is wrapped so that what sushy-tools lists or looks up by itself
(the systems and managers collections, the chassis' and thermal links,
certificate locations, update targets) holds the allow-listed systems
only. With ``SUSHY_EMULATOR_FAKE_DRIVER`` (the
fake Redfish driver, hostagent.drivers.fake) the systems are sushy-tools'
simulated ones, one for each system of the allow-list.
"""

import argparse
import copy
import json
import os
import shutil
import tempfile
import threading
from xml.etree import ElementTree as ET

import libvirt
from sushy_tools import error
from sushy_tools.emulator import auth_basic
from sushy_tools.emulator import main as sushy
from sushy_tools.emulator import memoize
from sushy_tools.emulator.resources.systems import fakedriver
from sushy_tools.emulator.resources.systems import libvirtdriver

from hostagent.drivers.bmc import emulator_faults
from hostagent.drivers.bmc import fault_files
from hostagent.drivers.bmc import htpasswd
from hostagent.drivers.bmc import media

ALLOWED = 'SUSHY_EMULATOR_ALLOWED_INSTANCES'
AUTH_FILE = 'SUSHY_EMULATOR_AUTH_FILE'
DOWNLOAD_DIR = 'TENKS_DOWNLOAD_DIR'
MEDIA_DIR = 'TENKS_MEDIA_DIR'
FAKE = 'SUSHY_EMULATOR_FAKE_DRIVER'
LIBVIRT_URI = 'SUSHY_EMULATOR_LIBVIRT_URI'
# The one path under Systems/ that names no system (a static registry).
_REGISTRY = ('Systems', 'Bios', 'BiosRegistry')
_MEDIA_ACTIONS = ('VirtualMedia.InsertMedia', 'VirtualMedia.EjectMedia')


def _segments(env):
    """The path's segments after /redfish/v1 (empty ones dropped, as
    sushy-tools' router merges slashes), or None for another path."""
    parts = [p for p in env.get('PATH_INFO', '').split('/') if p]
    return parts[2:] if parts[:2] == ['redfish', 'v1'] else None


def named_system(env):
    """The system (or manager, named after it) the request's path names,
    or None."""
    parts = _segments(env)
    if (parts and len(parts) > 1 and parts[0] in ('Systems', 'Managers')
            and tuple(parts) != _REGISTRY):
        return parts[1]
    return None


def _changes_media(env):
    """Whether the request may download or eject virtual media: the
    media actions, and a system's PATCH (its Boot.HttpBootUri)."""
    parts = _segments(env) or []
    method = env.get('REQUEST_METHOD')
    return (method == 'POST' and parts[-2:-1] == ['Actions']
            and parts[-1] in _MEDIA_ACTIONS) or (
        method == 'PATCH' and len(parts) == 2 and parts[0] == 'Systems')


class Authentication(sushy.RedfishAuthMiddleware):
    """sushy-tools' authentication with each (user, password) checked
    with bcrypt once per version of the htpasswd file. A subclass of
    sushy-tools' own, which its configure() then keeps (it would add
    its own, checking with bcrypt on every request)."""

    def __init__(self, app, auth_file):
        super().__init__(app, auth_file)
        self.verifier = htpasswd.Verifier(auth_file)

    def __call__(self, env, start_response):
        if env.get('PATH_INFO', '').strip('/') in self._EXCLUDE_PATHS:
            return self.app(env, start_response)
        try:
            username, password = auth_basic.parse_token(
                auth_basic.parse_header(env))
            if not self.verifier.check(username, password):
                auth_basic.unauthorized()
        except error.FishyError as e:
            return self.format_exception(e)(env, start_response)
        env.update(HTTP_X_USER=username, HTTP_X_USER_NAME=username)
        return self.app(env, start_response)


def not_found(env, start_response):
    """A Redfish 404, the same whether the resource exists elsewhere or
    not at all."""
    body = json.dumps({'error': {
        'code': 'Base.1.0.GeneralError',
        'message': 'No resource at %s' % env.get('PATH_INFO')}}).encode()
    start_response('404 NOT FOUND', [('Content-Type', 'application/json'),
                                     ('Content-Length', str(len(body)))])
    return [body]


class Scope:
    """Answers 404 to a request naming a system outside ``allowed``."""

    def __init__(self, app, allowed):
        self.app = app
        self.allowed = allowed

    def __call__(self, env, start_response):
        system = named_system(env)
        if system is not None and system not in self.allowed:
            return not_found(env, start_response)
        return self.app(env, start_response)


class Media:
    """Runs the requests that may download or eject media one at a time,
    and leaves in ``directory`` (sushy-tools' temporary directory) only
    the media of successful inserts."""

    def __init__(self, app, directory):
        self.app = app
        self.directory = directory
        self._lock = threading.Lock()

    def __call__(self, env, start_response):
        if not _changes_media(env):
            return self.app(env, start_response)
        statuses = []

        def recording(status, headers, exc_info=None):
            statuses.append(int(status.split()[0]))
            return start_response(status, headers, exc_info)

        with self._lock:
            before = set(os.listdir(self.directory))
            failed = True
            try:
                # sushy-tools' views run whole before the body is read.
                result = self.app(env, recording)
                failed = not statuses or statuses[-1] >= 400
                return result
            finally:
                self._clean(before if failed else None)

    def _clean(self, before):
        """Remove what appeared since ``before`` (None: nothing), and the
        directories sushy-tools' ejects leave empty (it downloads into a
        directory of its own per medium, and removes only the file)."""
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            if before is not None and name not in before:
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            elif os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)


class ScopedSystems:
    """A sushy-tools systems driver that knows only the systems in
    ``allowed``. Its other calls come from requests whose path names
    the system (see Scope) or after uuid() or name()."""

    def __init__(self, driver, allowed):
        self._driver = driver
        self._allowed = allowed

    def __getattr__(self, name):
        return getattr(self._driver, name)

    @property
    def systems(self):
        return [s for s in self._driver.systems if s in self._allowed]

    def uuid(self, identity):
        self._check(identity)
        return self._driver.uuid(identity)

    def name(self, identity):
        self._check(identity)
        return self._driver.name(identity)

    def _check(self, identity):
        if identity not in self._allowed:
            raise error.NotFound('No system %s' % identity)


class MediaDrive(ScopedSystems):
    """ScopedSystems whose virtual media goes into the CD-ROM drive Tenks
    made for it (media.DRIVE_ALIAS), from a file of ``media_dir``
    (``<system id>-*.iso``, 0600; libvirt gives the domain's QEMU that
    file alone).

    sushy-tools' libvirt driver would instead upload each medium into a
    storage pool as a volume that nothing marks or removes, and replace
    every CD-ROM of the domain, the node's own included."""

    def __init__(self, driver, allowed, uri, media_dir):
        super().__init__(driver, allowed)
        self._uri = uri
        self._media_dir = media_dir

    def set_boot_image(self, identity, device, boot_image=None,
                       write_protected=True):
        """Put the downloaded ``boot_image`` into the drive (moving it
        to the media directory), or eject (None); remove the medium it
        held. Live too when the domain runs, as a BMC would."""
        system = self.uuid(identity)
        if device not in media.DEVICES:
            raise error.BadRequest('No virtual media device %s' % device)
        old = media.files(self._media_dir, system)
        new = None
        if boot_image:
            fd, new = tempfile.mkstemp(prefix=system + '-', suffix='.iso',
                                       dir=self._media_dir)
            os.close(fd)
            shutil.move(boot_image, new)
            os.chmod(new, 0o600)
        try:
            with libvirtdriver.libvirt_open(self._uri) as conn:
                set_medium(conn.lookupByUUIDString(system), new)
        except Exception:
            if new:
                os.unlink(new)
            raise
        for name in old:
            os.unlink(name)


def _drive(xml):
    """The virtual media drive's <disk> in a domain's ``xml``, or None."""
    for disk in ET.fromstring(xml).findall('devices/disk'):
        alias = disk.find('alias')
        if (alias is not None and alias.get('name')
                == media.DRIVE_ALIAS):
            return disk
    return None


def set_medium(dom, path):
    """Let the virtual media drive of ``dom`` hold file ``path`` (None:
    empty), in its definition and, when it runs, live."""
    changes = [(libvirt.VIR_DOMAIN_XML_INACTIVE,
                libvirt.VIR_DOMAIN_AFFECT_CONFIG)]
    if dom.isActive():
        changes.append((0, libvirt.VIR_DOMAIN_AFFECT_LIVE))
    for xml_flags, affect in changes:
        disk = _drive(dom.XMLDesc(xml_flags))
        if disk is None:
            raise error.Conflict(
                'Domain %s has no virtual media drive (Tenks adds it to a '
                'Redfish node when it next deploys the node)' % dom.name())
        disk = copy.deepcopy(disk)
        for source in disk.findall('source'):
            disk.remove(source)
        if path:
            disk.insert(0, ET.Element('source', file=path))
        dom.updateDeviceFlags(ET.tostring(disk, encoding='unicode'), affect)


class AllowedFakeSystems(fakedriver.FakeDriver):
    """sushy-tools' fake systems driver whose systems are those of the
    allow-list (an allowlist.AllowList): a system appears, powered off,
    when the list first holds it, named after its domain."""

    def __init__(self, allowed):
        super().__init__()
        self._allowed = allowed

    def _get(self, identity):
        if identity not in self._systems:
            domain = self._allowed.domain(identity)
            if domain is not None:
                self._systems[identity] = {'uuid': identity, 'name': domain,
                                           'power_state': 'Off', 'nics': []}
                self._by_name[domain] = identity
        return super()._get(identity)

    @property
    def systems(self):
        return list(self._allowed.ids())


class _Application(sushy.Application):
    """sushy-tools' application, its systems those of its allow-list;
    its managers driver derives its managers from them."""

    @property
    def systems(self):
        if self.config.get(FAKE):
            return ScopedSystems(self._fake_systems(), self.config[ALLOWED])
        return MediaDrive(super().systems, self.config[ALLOWED],
                          self.config[LIBVIRT_URI], self.config[MEDIA_DIR])

    @memoize.memoize()
    def _fake_systems(self):
        fakedriver.FakeDriver.initialize(self.config, self.logger)
        return AllowedFakeSystems(self.config[ALLOWED])


def build(config_file):
    """sushy-tools' application configured by ``config_file``, behind
    Tenks' layers."""
    app = sushy.app
    app.config.from_pyfile(os.path.abspath(config_file))
    # Where sushy-tools' downloads go (tempfile's default directory).
    tempfile.tempdir = app.config[DOWNLOAD_DIR]
    # sushy-tools builds its one application at import: give it our
    # systems property.
    app.__class__ = _Application
    allowed = app.config[ALLOWED]
    # The faults of its systems are in its own directory.
    faults = fault_files.Reader(os.path.dirname(os.path.abspath(config_file)))
    app.wsgi_app = Authentication(
        Scope(emulator_faults.Faults(
            Media(app.wsgi_app, tempfile.tempdir), allowed, faults,
            named_system), allowed),
        app.config[AUTH_FILE])
    return app


def main():
    parser = argparse.ArgumentParser(
        description="sushy-tools' emulator behind Tenks' layers; other "
        "options go to sushy-emulator.")
    parser.add_argument('--config', required=True)
    build(parser.parse_known_args()[0].config)
    # sushy-tools reads its configuration again (keeping our
    # Authentication) and serves.
    return sushy.main()


if __name__ == '__main__':
    raise SystemExit(main())
