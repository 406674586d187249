"""UEFI firmware of a hypervisor, found through QEMU's firmware
descriptors (the JSON files libvirt reads too, docs/interop/firmware.json
of QEMU): Debian's ``ovmf`` package installs them in
/usr/share/qemu/firmware, and /etc/qemu/firmware may override them.
"""

import fnmatch
import json
import os

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

UEFI = 'uefi'
SECURE_BOOT = 'secure_boot'
# A machine type of the family each kind runs on, to match a
# descriptor's patterns: secure boot needs SMM, which libvirt allows on
# q35 only; plain UEFI runs on the default i440fx.
MACHINES = {UEFI: 'pc-i440fx-any', SECURE_BOOT: 'pc-q35-any'}
_SECURE = {'secure-boot', 'enrolled-keys', 'requires-smm'}


def _fits(descriptor, kind):
    """Whether ``descriptor`` is x86_64 UEFI flash firmware for ``kind``:
    plain UEFI (no secure boot, no SMM) or secure boot with the
    Microsoft keys enrolled."""
    mapping = descriptor.get('mapping') or {}
    features = set(descriptor.get('features') or ())
    if 'uefi' not in descriptor.get('interface-types', ()) or (
            mapping.get('device') != 'flash'):
        return False
    if kind == SECURE_BOOT:
        if not _SECURE <= features:
            return False
    elif features & _SECURE:
        return False
    return any(target.get('architecture') == 'x86_64' and any(
        fnmatch.fnmatch(MACHINES[kind], pattern)
        for pattern in target.get('machines', ()))
        for target in descriptor.get('targets', ()))


def _descriptors(dirs):
    """(path, descriptor) in QEMU's order: by file name, a file of an
    earlier directory hiding one of the same name in a later one."""
    found = {}
    for directory in dirs:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            if name.endswith('.json'):
                found.setdefault(name, os.path.join(directory, name))
    for name in sorted(found):
        path = found[name]
        try:
            with open(path, encoding='utf-8') as f:
                yield path, json.load(f)
        except (OSError, ValueError) as e:
            LOG.warning('Skipping firmware descriptor %s: %s', path, e)


def find(dirs):
    """{kind: {'loader': path, 'template': path}} of the firmware found
    for each kind (UEFI, SECURE_BOOT), the first descriptor that fits
    and whose files exist; a kind without firmware is left out."""
    firmware = {}
    for path, descriptor in _descriptors(dirs):
        if not isinstance(descriptor, dict):
            continue
        mapping = descriptor.get('mapping') or {}
        loader = (mapping.get('executable') or {}).get('filename')
        template = (mapping.get('nvram-template') or {}).get('filename')
        for kind in (UEFI, SECURE_BOOT):
            if kind in firmware or not _fits(descriptor, kind):
                continue
            if loader and template and os.path.isfile(loader) and (
                    os.path.isfile(template)):
                firmware[kind] = {'loader': loader, 'template': template}
            else:
                LOG.warning('Firmware descriptor %s names files that do '
                            'not exist: %s, %s', path, loader, template)
    return firmware
