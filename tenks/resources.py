"""Hypervisors as resource providers, in the Placement model.

A hypervisor provides VCPU, MEMORY_MB and DISK_GB inventories (totals
from its hostagent's facts, the rest from its ``[hostagent]
*_inventory`` options, reported in the facts) and has traits; a virtual
node is a consumer whose allocations are derived from its record, so
they can never disagree with what was scheduled. Pure functions: the
scheduler, ``tenks hypervisor show`` and the benchmark share them.
"""

import math
import platform
import re

from tenks import constants
from tenks import exceptions
from tenks import node_records

# The fact holding each class's total.
TOTAL_FACTS = {constants.VCPU: 'cpus', constants.MEMORY_MB: 'memory_mb',
               constants.DISK_GB: 'disk_gb'}
# Placement's defaults, but for VCPU: virtual nodes mostly idle.
DEFAULTS = {
    constants.VCPU: {'allocation_ratio': 16.0},
    constants.MEMORY_MB: {'allocation_ratio': 1.0},
    constants.DISK_GB: {'allocation_ratio': 1.0},
}
FIELDS = {'allocation_ratio': float, 'reserved': int, 'min_unit': int,
          'max_unit': int, 'step_size': int}
# What a hostagent serves when its facts do not say: the firmware it
# can boot ('firmware': bios, uefi, secure_boot) and its BMC kinds
# ('bmc_types').
DEFAULT_BOOT_MODES = ('bios',)
DEFAULT_BMC_TYPES = ('ipmi',)


def trait_part(value):
    """``value`` as a part of a trait name: upper case, [A-Z0-9_]."""
    return re.sub(r'[^A-Z0-9_]', '_', str(value).upper())


def physnet_trait(physnet):
    return 'CUSTOM_PHYSNET_' + trait_part(physnet)


def inventory_options(options):
    """Parse ``{resource class: {field: string}}`` (the hostagent's
    ``*_inventory`` options) into typed fields; ConfigError names the
    option and the field that is wrong."""
    parsed = {}
    for rc, fields in options.items():
        parsed[rc] = {}
        for key, value in (fields or {}).items():
            option = '[hostagent] %s_inventory' % rc.lower()
            if key not in FIELDS:
                raise exceptions.ConfigError(reason='%s: unknown field %r '
                                             '(known: %s)' % (
                                                 option, key,
                                                 ', '.join(FIELDS)))
            try:
                number = FIELDS[key](value)
            except ValueError:
                raise exceptions.ConfigError(
                    reason='%s: %s=%r is not a number' % (
                        option, key, value)) from None
            if number < 0 or (key != 'reserved' and number == 0):
                raise exceptions.ConfigError(
                    reason='%s: %s must be %s' % (
                        option, key,
                        'at least 0' if key == 'reserved' else 'positive'))
            parsed[rc][key] = number
    return parsed


def inventories(facts):
    """{resource class: inventory} of a hypervisor, from its facts; a
    class whose total the facts lack is left out."""
    configured = facts.get('inventory') or {}
    result = {}
    for rc in constants.RESOURCE_CLASSES:
        total = facts.get(TOTAL_FACTS[rc])
        if total is None:
            continue
        inventory = {'total': int(total), 'reserved': 0, 'min_unit': 1,
                     'max_unit': int(total), 'step_size': 1}
        inventory.update(DEFAULTS[rc])
        inventory.update(configured.get(rc) or {})
        result[rc] = inventory
    return result


def capacity(inventory):
    """What can be allocated of ``inventory`` in all."""
    return int((inventory['total'] - inventory['reserved'])
               * inventory['allocation_ratio'])


def allocations(node, thin=False):
    """{resource class: amount} a node (record or node-type-like dict
    with vcpus, memory_mb, volumes) consumes; zero amounts left out. An
    existing volume (somebody else's, attached as it is) takes none;
    with ``thin`` (the hypervisor's thin_volumes), a qcow2 volume that
    copies no image takes its size at creation in whole GiB, rounded
    down: none."""
    volumes = node.get('volumes') or ()
    full = sum(v.get('capacity', 0) for v in volumes
               if not node_records.counts_thin(v, thin))
    thin_bytes = sum(node_records.THIN_VOLUME_BYTES for v in volumes
                     if node_records.counts_thin(v, thin))
    disk = (math.ceil(full / constants.GIB)
            + thin_bytes // constants.GIB)
    amounts = {constants.VCPU: node['vcpus'],
               constants.MEMORY_MB: node['memory_mb'],
               constants.DISK_GB: disk}
    return {rc: amount for rc, amount in amounts.items() if amount}


def usages(nodes, thin=False):
    """{resource class: amount used} by ``nodes`` (records)."""
    used = dict.fromkeys(constants.RESOURCE_CLASSES, 0)
    for node in nodes:
        for rc, amount in allocations(node, thin).items():
            used[rc] += amount
    return used


def refusal(inventory, used, amount):
    """Why ``amount`` cannot be allocated from ``inventory`` with
    ``used`` taken, or None (Placement's rules)."""
    if amount < inventory['min_unit']:
        return 'below min_unit %d' % inventory['min_unit']
    if amount > inventory['max_unit']:
        return 'above max_unit %d' % inventory['max_unit']
    if amount % inventory['step_size']:
        return 'not a multiple of step_size %d' % inventory['step_size']
    if used + amount > capacity(inventory):
        return '%d of %d left' % (capacity(inventory) - used,
                                  capacity(inventory))
    return None


def traits(facts):
    """Sorted traits of a hypervisor: the physnets it maps (and has the
    interface of), its CPU architecture, the boot modes and BMC kinds it
    offers, and the operator's CUSTOM_* ones."""
    missing = {physnet for physnet, _ in facts.get('missing_interfaces', ())}
    found = {physnet_trait(physnet) for physnet in
             facts.get('physnet_mappings') or {} if physnet not in missing}
    if facts.get('cpu_arch'):
        found.add('HW_ARCH_' + trait_part(facts['cpu_arch']))
    found.update('CUSTOM_BOOT_MODE_' + trait_part(mode) for mode in
                 facts.get('firmware', DEFAULT_BOOT_MODES))
    found.update('CUSTOM_BMC_' + trait_part(kind) for kind in
                 facts.get('bmc_types', DEFAULT_BMC_TYPES))
    found.update(facts.get('traits') or ())
    return sorted(found)


def provider(facts, nodes):
    """A hypervisor's resource provider view, as ``tenks hypervisor
    show`` prints it: inventories with what is used of each, traits,
    and each node's allocations."""
    thin = bool(facts.get('thin_volumes'))
    used = usages(nodes, thin)
    return {
        'inventories': {rc: dict(inventory, used=used[rc])
                        for rc, inventory in inventories(facts).items()},
        'usages': used,
        'traits': traits(facts),
        'allocations': {node['uuid']: {'name': node['name'],
                                       'cluster': node['cluster'],
                                       'resources': allocations(node, thin)}
                        for node in nodes},
    }


def hostagent_facts(group):
    """What a hostagent reports of its ``[hostagent]`` options for its
    resource provider: inventory fields, CUSTOM_* traits, CPU
    architecture, and whether it registers enabled. ConfigError on a
    bad value."""
    bad = [t for t in group.traits
           if not re.fullmatch(r'CUSTOM_[A-Z0-9_]+', t)]
    if bad:
        raise exceptions.ConfigError(
            reason='[hostagent] traits: %s not CUSTOM_ followed by upper '
                   'case letters, digits and _' % ', '.join(bad))
    return {
        'inventory': inventory_options(
            {rc: group['%s_inventory' % rc.lower()]
             for rc in constants.RESOURCE_CLASSES}),
        'traits': sorted(group.traits),
        'cpu_arch': platform.machine(),
        'enable_on_register': group.enable_on_register,
        'thin_volumes': group.thin_volumes,
    }
