"""Helpers of the libvirt driver's storage: images and LVM owner tags.

libvirt makes and removes volumes; what it cannot do is here: read an
image (``qemu-img info``), copy one into a volume (``qemu-img
convert``), fetch one over http(s), read or set the LVM tags that
mark a volume group or a logical volume with its owner (LVM has no
extended attributes), and check the block devices a volume group
would take.
"""

import contextlib
import errno
import json
import os
import shutil
import stat
import subprocess
import tempfile
import urllib.error
import urllib.request

from hostagent.drivers import base
from tenks import exceptions
from tenks import fileutils

# Seconds an image download may stall before it fails.
DOWNLOAD_TIMEOUT = 60
# Without it every LVM command complains about the agent's open files.
_LVM_ENV = dict(os.environ, LVM_SUPPRESS_FD_WARNINGS='1')
# The exit status of vgs/lvs for a group or volume that does not exist.
_LVM_NOT_FOUND = 5
# The start of a device that libvirt zeroes before pvcreate: it must
# hold nothing, unless the spec lets Tenks wipe the device.
DEVICE_HEAD = 1024 * 1024
# The kernel's block devices, by <major>:<minor>.
SYS_BLOCK = '/sys/dev/block'


def _run(action, argv, env=None):
    """Run ``argv``; its stdout, or DriverError with its stderr."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True,
                              env=env, check=False)
    except OSError as e:
        raise exceptions.DriverError(driver='libvirt', action=action,
                                     reason=str(e)) from e
    if done.returncode:
        raise exceptions.DriverError(
            driver='libvirt', action=action,
            reason='%s: %s' % (' '.join(argv[:2]),
                               done.stderr.strip() or done.returncode))
    return done.stdout


def image_info(path):
    """{'format', 'capacity' (virtual size, bytes), 'backing' (its own
    backing file, or None)} of image ``path``."""
    if not os.path.isfile(path):
        raise exceptions.DriverError(
            driver='libvirt', action='read image %s' % path,
            reason='it is %s: an image is a regular file' % _kind(path)
            if os.path.exists(path) else 'no such file')
    # -U: an image a running VM has open can be read all the same.
    info = json.loads(_run('read image %s' % path, [
        'qemu-img', 'info', '-U', '--output=json', path]))
    return {'format': info['format'], 'capacity': info['virtual-size'],
            'backing': info.get('backing-filename')}


def _kind(path):
    """What is at ``path``, which is there and not a regular file."""
    mode = os.stat(path).st_mode
    if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
        return 'a device'
    return 'a directory' if stat.S_ISDIR(mode) else 'not a regular file'


def check_fits(image, info, volume, capacity):
    """DriverError when ``image`` (``info``) is larger than ``capacity``:
    a volume gets exactly the capacity asked, never the image's."""
    if info['capacity'] > capacity:
        raise exceptions.DriverError(
            driver='libvirt', action='make volume %s from image %s' % (
                volume, image),
            reason='the image is %d bytes, more than the %d bytes of the '
                   'volume\'s capacity' % (info['capacity'], capacity))


def copy_image(path, fmt, target, target_fmt):
    """Write the image at ``path`` into the existing volume ``target``.

    The volume keeps its own size (``-n``: qemu-img does not create it).
    """
    _run('copy image %s into %s' % (path, target), [
        'qemu-img', 'convert', '-n', '-f', fmt, '-O', target_fmt, path,
        target])


@contextlib.contextmanager
def local_image(source, directory):
    """Yield a local path of the image ``source`` ({'path'} or {'url'}).

    A URL is downloaded into a private file in ``directory``, removed
    when the block ends: a copy of it is all the volume keeps.
    """
    if 'path' in source:
        yield source['path']
        return
    url = source['url']
    request = urllib.request.Request(url)
    if source.get('token'):
        # A volume another hypervisor serves for a move (hostagent.
        # transfer): the token goes in a header, never in the URL.
        request.add_header(base.TOKEN_HEADER, source['token'])
    fileutils.private_dir(directory)
    fd, path = tempfile.mkstemp(dir=directory, suffix='.image')
    try:
        with os.fdopen(fd, 'wb') as out, urllib.request.urlopen(
                request, timeout=DOWNLOAD_TIMEOUT) as response:
            shutil.copyfileobj(response, out, 1024 * 1024)
        yield path
    except (urllib.error.URLError, OSError) as e:
        raise exceptions.DriverError(
            driver='libvirt', action='download image %s' % url,
            reason=str(getattr(e, 'reason', e))) from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _tags(action, argv):
    """The tags LVM prints for one group or volume, None if absent."""
    done = subprocess.run(argv, capture_output=True, text=True,
                          env=_LVM_ENV, check=False)
    if done.returncode == _LVM_NOT_FOUND:
        return None
    if done.returncode:
        raise exceptions.DriverError(
            driver='libvirt', action=action,
            reason='%s: %s' % (argv[0], done.stderr.strip()))
    return [tag for tag in done.stdout.strip().split(',') if tag]


def vg_tags(vg):
    """The tags of volume group ``vg``, or None when there is none."""
    return _tags('read volume group %s' % vg, [
        'vgs', '--noheadings', '-o', 'vg_tags', vg])


def lv_tags(vg):
    """{logical volume: tags} of volume group ``vg`` ({} if absent)."""
    done = subprocess.run(
        ['lvs', '--noheadings', '--separator', '|', '-o', 'lv_name,lv_tags',
         vg], capture_output=True, text=True, env=_LVM_ENV, check=False)
    if done.returncode == _LVM_NOT_FOUND:
        return {}
    if done.returncode:
        raise exceptions.DriverError(
            driver='libvirt', action='read volumes of group %s' % vg,
            reason='lvs: %s' % done.stderr.strip())
    tags = {}
    for line in done.stdout.splitlines():
        if line.strip():
            name, _, found = line.strip().partition('|')
            tags[name] = [tag for tag in found.split(',') if tag]
    return tags


# A Tenks owner mark (tenks:<cluster>:<uuid>) is a valid LVM tag as it is:
# LVM takes letters, digits and _+.-/=!:#&.
def tag_vg(vg, tag):
    _run('mark volume group %s' % vg,
         ['vgchange', '--addtag', tag, vg], env=_LVM_ENV)


def tag_lv(vg, lv, tag):
    _run('mark volume %s/%s' % (vg, lv),
         ['lvchange', '--addtag', tag, '%s/%s' % (vg, lv)], env=_LVM_ENV)


def remove_vg(vg, devices):
    """Remove volume group ``vg`` and the physical volumes on
    ``devices`` (what libvirt's pool delete does, for a group whose
    pool is gone)."""
    _run('remove volume group %s' % vg, ['vgremove', '-f', vg],
         env=_LVM_ENV)
    if devices:
        _run('remove physical volumes %s' % ', '.join(devices),
             ['pvremove', '-f', *devices], env=_LVM_ENV)


def _signatures(device):
    """[(type, offset)] of the signatures wipefs finds on ``device``
    (file systems, partition tables, RAID and LVM labels...)."""
    out = _run('read the signatures of %s' % device,
               ['wipefs', '--json', device])
    return [(found['type'], found['offset'])
            for found in (json.loads(out)['signatures'] if out.strip()
                          else [])]


def _pv_group(device):
    """The volume group of physical volume ``device`` ('' for none)."""
    return _run('read physical volume %s' % device, [
        'pvs', '--noheadings', '-o', 'vg_name', device],
        env=_LVM_ENV).strip()


def _mounts(rdev):
    """Where the device numbered ``rdev`` is mounted."""
    wanted = '%d:%d' % (os.major(rdev), os.minor(rdev))
    with open('/proc/self/mountinfo') as f:
        return sorted({fields[4] for fields in map(str.split, f)
                       if fields[2] == wanted})


def _has_data(device):
    """Whether the first DEVICE_HEAD bytes of ``device`` are not all
    zero."""
    with open(device, 'rb') as f:
        return f.read(DEVICE_HEAD).strip(b'\0') != b''


def _in_use(device):
    """Whether the kernel has ``device`` in use (mounted, swap, a RAID
    or device-mapper member...): it refuses it an exclusive open."""
    try:
        os.close(os.open(device, os.O_RDONLY | os.O_EXCL))
    except OSError as e:
        if e.errno == errno.EBUSY:
            return True
        raise
    return False


def device_problem(device, wipe, group):
    """Why a new volume group may not take ``device``, in words, or
    None when it may; ``device`` is a resolved path (os.path.realpath).

    It must be a whole block device (no partition, none on it) that
    nothing uses (not mounted, no holders, not in use by the kernel);
    one that holds a signature or data in its first MiB only with
    ``wipe``. A physical volume of volume group ``group`` (ours, being
    built again) is fine as it is; one of another group never is.
    """
    try:
        rdev = os.stat(device)
        if not stat.S_ISBLK(rdev.st_mode):
            return 'is not a block device'
        sysfs = os.path.join(SYS_BLOCK, '%d:%d' % (
            os.major(rdev.st_rdev), os.minor(rdev.st_rdev)))
        if os.path.exists(os.path.join(sysfs, 'partition')):
            return 'is a partition, not a whole disk'
        parts = sorted(name for name in os.listdir(sysfs) if os.path.exists(
            os.path.join(sysfs, name, 'partition')))
        if parts:
            return 'has partitions (%s)' % ', '.join(parts)
        mounts = _mounts(rdev.st_rdev)
        if mounts:
            return 'is mounted on %s' % ', '.join(mounts)
        signatures = _signatures(device)
        if 'LVM2_member' in (kind for kind, _ in signatures):
            vg = _pv_group(device)
            if group is not None and vg == group:
                return None
            if vg:
                return 'is a physical volume of volume group %s' % vg
        holders = sorted(os.listdir(os.path.join(sysfs, 'holders')))
        if holders:
            return 'is held by %s' % ', '.join(holders)
        if _in_use(device):
            return 'is in use (the kernel refuses to open it exclusively)'
        if wipe:
            return None
        if signatures:
            return 'holds %s' % ', '.join(
                '%s (at offset %s)' % found for found in signatures)
        if _has_data(device):
            return ('holds data in its first MiB (no signature that '
                    'wipefs knows)')
    except OSError as e:
        return 'cannot be read: %s' % (e.strerror or e)
    return None


def wipe_device(device):
    """Erase every signature on ``device`` (wipefs -a): the spec lets
    Tenks take it although it holds data."""
    _run('wipe %s' % device, ['wipefs', '--all', '--quiet', device])
