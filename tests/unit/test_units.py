import pytest

from tenks import units

GiB = 1024 ** 3


@pytest.mark.parametrize('value, expected', [
    (4096, 4096),
    ('4096B', 4096),
    ('4096', 4096),
    ('2GB', 2 * 1000 ** 3),
    ('2 GiB', 2 * GiB),
    ('512MiB', 512 * 1024 ** 2),
    ('1.5GiB', 3 * GiB // 2),
    ('10TB', 10 * 1000 ** 4),
    ('1TiB', 1024 ** 4),
    ('100KiB', 100 * 1024),
    ('0.5KiB', 512),
])
def test_parse_capacity(value, expected):
    assert units.parse_capacity(value) == expected


@pytest.mark.parametrize('value, message', [
    ('2G', "'2G' is ambiguous: write 2GB or 2GiB"),
    ('1.5T', "'1.5T' is ambiguous: write 1.5TB or 1.5TiB"),
    ('2gb', "'2gb' has an unknown unit 'gb'"),
    ('2Gb', "'2Gb' has an unknown unit 'Gb'"),
    ('2 bytes', "unknown unit 'bytes'"),
    ('two GiB', "'two GiB' is not a capacity"),
    ('1e9B', "'1e9B' is not a capacity"),
    ('', "'' is not a capacity"),
    (0, '0 must be greater than 0'),
    ('0GiB', "'0GiB' must be greater than 0"),
    (-512, '-512 must be greater than 0'),
    ('-1GiB', "'-1GiB' must be greater than 0"),
    ('1000B', "'1000B' (1000 bytes) is not a multiple of the 512-byte "
              'disk sector and is not rounded: use e.g. 512 or 1024 bytes'),
    (100, '100 is not a multiple of the 512-byte disk sector and is not '
          'rounded: use e.g. 512 bytes'),
    ('1MB', 'use e.g. 999936 or 1000448 bytes'),
    ('0.3KiB', "'0.3KiB' is 307.2 bytes, not a whole number of bytes"),
    ('1.5B', "'1.5B' is 1.5 bytes, not a whole number of bytes"),
    (1.5, '1.5 is not a capacity'),
    (True, 'True is not a capacity'),
    (None, 'None is not a capacity'),
])
def test_parse_capacity_rejects(value, message):
    with pytest.raises(ValueError) as info:
        units.parse_capacity(value)
    assert message in str(info.value)


def test_parse_capacity_is_exact_for_long_numbers():
    # 28 digits and more: beyond decimal's default precision.
    number = '1234567890123456789012345678.5'
    assert units.parse_capacity(number + 'KiB') == (
        12345678901234567890123456785 * 1024 // 10)
