"""Disk capacities: "2GiB"-style strings to bytes.

Arithmetic is exact and nothing is rounded: a capacity that is not a
whole number of disk sectors is an error, not a surprise later.
"""

import decimal
import re

SECTOR_SIZE = 512

UNITS = {
    'B': 1,
    'KB': 1000, 'KiB': 1024,
    'MB': 1000 ** 2, 'MiB': 1024 ** 2,
    'GB': 1000 ** 3, 'GiB': 1024 ** 3,
    'TB': 1000 ** 4, 'TiB': 1024 ** 4,
}

_AMBIGUOUS = ('K', 'M', 'G', 'T')
_CAPACITY_RE = re.compile(r'(-?[0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)')


def parse_capacity(value):
    """Return ``value`` (bytes as an int, or a string such as "2GiB")
    in bytes; raise ValueError saying what is wrong with it.
    """
    if isinstance(value, str):
        size = _parse_string(value)
        shown = '%r (%d bytes)' % (value, size)
    elif isinstance(value, int) and not isinstance(value, bool):
        size = value
        shown = repr(value)
    else:
        raise ValueError(
            '%r is not a capacity: write a number of bytes or a string '
            'such as "2GiB"' % (value,))
    if size <= 0:
        raise ValueError('%r must be greater than 0' % (value,))
    if size % SECTOR_SIZE:
        below = size // SECTOR_SIZE * SECTOR_SIZE
        nearest = [n for n in (below, below + SECTOR_SIZE) if n]
        raise ValueError(
            '%s is not a multiple of the %d-byte disk sector and is not '
            'rounded: use e.g. %s bytes'
            % (shown, SECTOR_SIZE, ' or '.join(map(str, nearest))))
    return size


def _parse_string(value):
    match = _CAPACITY_RE.fullmatch(value.strip())
    if not match:
        raise ValueError(
            '%r is not a capacity: expected a number and a unit, such as '
            '"2GiB" or "512MiB"' % value)
    number, unit = match.groups()
    unit = unit or 'B'
    if unit in _AMBIGUOUS:
        raise ValueError('%r is ambiguous: write %s%sB or %s%siB'
                         % (value, number, unit, number, unit))
    if unit not in UNITS:
        raise ValueError('%r has an unknown unit %r: use one of %s '
                         '(case matters)' % (value, unit, ', '.join(UNITS)))
    with decimal.localcontext() as context:
        context.prec = len(number) + 16  # enough for an exact product
        size = decimal.Decimal(number) * UNITS[unit]
    if size.as_integer_ratio()[1] != 1:
        raise ValueError('%r is %s bytes, not a whole number of bytes'
                         % (value, size))
    return int(size)

