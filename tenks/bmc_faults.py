"""Faults a node's BMC shows on request (``tenks node fault set``).

A fault is ``{'kind': KIND, 'delay': seconds, 'probability': p}`` (delay
for ``slow`` only, probability for ``flaky`` only):

unreachable          no answer: IPMI packets are dropped, a Redfish
                     request's connection is closed without a response,
                     an SNMP request on the outlet is dropped
slow                 every answer comes ``delay`` seconds late
error                IPMI: completion code 0xFF (unspecified error) to
                     every command of a session; Redfish: HTTP 500;
                     SNMP: error-status genErr
power-stuck          power changes are acknowledged and not made
boot-device-ignored  boot device changes are acknowledged and not made
                     (not SNMP: a PDU outlet has no boot device)
flaky                each request fails as under ``error`` with
                     probability ``probability``

The hostagent keeps it where the node's BMC daemon reads it (see
hostagent.drivers.bmc.fault_files), the conductor in the node's record.
Kept free of heavy imports (tenks.constants has none): the BMC
daemons load it.
"""

import random

from tenks import constants

UNREACHABLE = 'unreachable'
SLOW = 'slow'
ERROR = 'error'
POWER_STUCK = 'power-stuck'
BOOT_DEVICE_IGNORED = 'boot-device-ignored'
FLAKY = 'flaky'
KINDS = (UNREACHABLE, SLOW, ERROR, POWER_STUCK, BOOT_DEVICE_IGNORED, FLAKY)
DEFAULT_DELAY = 5.0  # s
MAX_DELAY = 600.0  # s
DEFAULT_PROBABILITY = 0.5
# The kinds a BMC type cannot show, and why.
UNSHOWN = {'snmp': {BOOT_DEVICE_IGNORED: 'a PDU outlet has no boot device'}}


def make(kind, duration=None, probability=None):
    """The fault of ``kind``: ``duration`` is the delay of ``slow``,
    ``probability`` the failure rate of ``flaky``. ValueError saying
    what is wrong."""
    if kind not in KINDS:
        raise ValueError('%r is no fault kind: one of %s' % (
            kind, ', '.join(KINDS)))
    if duration is not None and kind != SLOW:
        raise ValueError('duration is the delay of a slow BMC; a %s fault '
                         'takes none' % kind)
    if probability is not None and kind != FLAKY:
        raise ValueError('probability is the failure rate of a flaky BMC; '
                         'a %s fault takes none' % kind)
    fault = {'kind': kind}
    if kind == SLOW:
        fault['delay'] = DEFAULT_DELAY if duration is None else duration
    if kind == FLAKY:
        fault['probability'] = (DEFAULT_PROBABILITY if probability is None
                                else probability)
    problem_ = problem(fault)
    if problem_:
        raise ValueError(problem_)
    return fault


def problem(fault):
    """What is wrong with ``fault`` (as a request or a file holds it),
    or None."""
    if not isinstance(fault, dict) or fault.get('kind') not in KINDS:
        return 'a fault is an object whose kind is one of %s' % ', '.join(
            KINDS)
    keys = {'kind'} | {SLOW: {'delay'}, FLAKY: {'probability'}}.get(
        fault['kind'], set())
    if set(fault) != keys:
        return 'a %s fault has the keys %s' % (fault['kind'],
                                               ', '.join(sorted(keys)))
    delay = fault.get('delay', MAX_DELAY)
    if not _number(delay) or not 0 < delay <= MAX_DELAY:
        return 'the delay of a slow BMC is above 0 and at most %g s' % (
            MAX_DELAY)
    probability = fault.get('probability', 1)
    if not _number(probability) or not 0 < probability <= 1:
        return 'the probability of a flaky BMC is above 0 and at most 1'
    return None


def _number(value):
    return type(value) in (int, float)


def refusal(bmc_type, kind):
    """Why a BMC of ``bmc_type`` cannot show a fault of ``kind``, or
    None."""
    if bmc_type not in constants.BMC_TYPES:
        return 'its BMC is of type %s; faults are shown by BMCs of type %s' % (
            bmc_type, ', '.join(constants.BMC_TYPES))
    why = UNSHOWN.get(bmc_type, {}).get(kind)
    return None if why is None else (
        'its BMC is of type %s, which shows no %s fault: %s' % (
            bmc_type, kind, why))


def fails(fault, rand=random.random):
    """Whether a request meets an error now under ``fault`` (None: no
    fault)."""
    if fault is None:
        return False
    if fault['kind'] == ERROR:
        return True
    return fault['kind'] == FLAKY and rand() < fault['probability']
