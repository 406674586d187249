"""The spec reference, generated from tenks.spec.SCHEMA.

``.. tenks-spec-reference::`` lists every key of a cluster spec with its
type, default, description and an example, so that the reference cannot
fall behind the schema that validates specs.
"""

import json

import yaml
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.parsing import nested_parse_to_nodes

from tenks import spec

# Keys the schema accepts only to explain why they are refused or ignored.
_SPECIAL = {
    'x-ansible-only': lambda value: (
        'Only steers the Ansible-based Tenks: accepted with a warning, '
        'then ignored.'),
    'x-hypervisor-option': lambda option: (
        'Refused: set per hypervisor, as ``[hostagent] %s`` in the '
        'configuration of its hostagent.' % option),
}

_TYPES = {'integer': 'integer', 'string': 'string', 'object': 'mapping',
          'array': 'list', 'boolean': 'boolean'}

_FORMATS = {
    'capacity': 'a size: bytes, or a number with B, KB, KiB, MB, MiB, GB, '
                'GiB, TB or TiB',
    'ip-address': 'an IPv4 or IPv6 address',
    'trait': 'a standard trait (os-traits) or ``CUSTOM_`` followed by '
             'upper-case letters, digits and _',
}


class Key(str):
    """One step of a key's path: a key name, or a stand-in for keys that
    match a pattern or are free names (shown as ``<...>``)."""

    def __new__(cls, shown, example_key=None):
        key = super().__new__(cls, shown)
        key.example_key = example_key or shown
        return key


ITEM = Key('[]')


def keys(schema, path=()):
    """(path, schema, required) of every key under ``schema``, in the
    order the schema gives them; a path is a tuple of Keys."""
    required = set(schema.get('required', ()))
    for name, sub in schema.get('properties', {}).items():
        yield path + (Key(name),), sub, name in required
        yield from keys(sub, path + (Key(name),))
    for pattern, sub in schema.get('patternProperties', {}).items():
        # Shown as the pattern is usually written ('\Z': the end).
        key = Key('<key matching %s>' % pattern.replace('\\Z', '$'),
                  sub.get('x-example-key'))
        yield path + (key,), sub, False
        yield from keys(sub, path + (key,))
    free = schema.get('additionalProperties')
    if isinstance(free, dict):
        yield from keys(free, path + (Key('<name>', free.get(
            'x-example-key', 'name')),))
    if isinstance(schema.get('items'), dict):
        yield from keys(schema['items'], path + (ITEM,))


def dotted(path):
    text = ''
    for key in path:
        text += key if key is ITEM or not text else '.' + key
    return text


def special(schema):
    """What a key kept only to be refused or ignored tells users."""
    for marker, text in _SPECIAL.items():
        if marker in schema:
            return text(schema[marker])
    return None


def example_value(schema):
    """An example value for ``schema``: its examples, else its default,
    else its first choice, else one built from its required keys."""
    if schema.get('examples'):
        return schema['examples'][0]
    if schema.get('default') not in (None, [], {}):
        return schema['default']
    if 'enum' in schema:
        return schema['enum'][0]
    if isinstance(schema.get('items'), dict):
        return [example_value(schema['items'])]
    properties = schema.get('properties', {})
    names = schema.get('required') or list(properties)[:1]
    if names:
        return {name: example_value(properties[name]) for name in names}
    free = schema.get('additionalProperties')
    if isinstance(free, dict):
        return {free.get('x-example-key', 'name'): example_value(free)}
    raise ValueError('no example: give the schema "examples"')


def example(path, schema):
    """YAML of a spec fragment that sets the key at ``path``."""
    value = example_value(schema)
    for key in reversed(path):
        value = [value] if key is ITEM else {key.example_key: value}
    return yaml.safe_dump(value, default_flow_style=False,
                          sort_keys=False).rstrip('\n')


def kind(schema):
    """The type and the bounds of a value of ``schema``, in words."""
    if 'enum' in schema:
        return 'one of %s' % ', '.join('``%s``' % json.dumps(choice)
                                       for choice in schema['enum'])
    types = schema.get('type', [])
    types = [types] if isinstance(types, str) else types
    words = ' or '.join(_TYPES[name] for name in types)
    item = schema.get('items')
    if isinstance(item, dict) and 'type' in item:
        words += ' of %s' % kind(item)
    if 'format' in schema:
        words += ': %s' % _FORMATS[schema['format']]
    if 'x-expected' in schema:
        words += ': %s' % schema['x-expected']
    low, high = schema.get('minimum'), schema.get('maximum')
    if low is not None and high is not None:
        words += ', %s to %s' % (low, high)
    elif low is not None:
        words += ', at least %s' % low
    if 'maxLength' in schema:
        words += ', at most %d characters' % schema['maxLength']
    if schema.get('uniqueItems'):
        words += ', no repeats'
    return words


def entry(path, schema, required):
    """reStructuredText lines that document one key."""
    name = dotted(path)
    lines = ['.. describe:: %s' % name, '']
    said = special(schema)
    if said:
        return lines + ['   ' + said, '']
    if not schema.get('description'):
        raise ValueError('%s has no description in tenks.spec.SCHEMA'
                         % name)
    lines += ['   ' + schema['description'], '',
              '   :Type: %s' % kind(schema)]
    if required:
        lines.append('   :Required: yes')
    if 'default' in schema:
        lines.append('   :Default: ``%s``' % json.dumps(schema['default']))
    try:
        text = example(path, schema)
    except ValueError as error:
        raise ValueError('%s: %s' % (name, error)) from None
    lines += ['', '   Example:', '', '   .. code-block:: yaml', '']
    lines += ['      ' + line for line in text.splitlines()]
    return lines + ['']


def reference(schema=spec.SCHEMA):
    """The spec reference, as reStructuredText lines."""
    lines = []
    for path, sub, required in keys(schema):
        lines += entry(path, sub, required)
    return lines


class SpecReference(SphinxDirective):
    def run(self):
        return nested_parse_to_nodes(
            self.state, StringList(reference(), 'tenks.spec.SCHEMA'))


def setup(app):
    app.add_directive('tenks-spec-reference', SpecReference)
    return {'parallel_read_safe': True, 'parallel_write_safe': True}
