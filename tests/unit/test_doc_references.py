"""The documentation's generated references leave nothing out: every key
of the spec's schema is in the spec reference, every option of
list_opts() in the configuration reference. The generators run here
directly; tests/docs builds the whole documentation."""

import collections
import copy
import importlib.util
import os
import re

import pytest
from oslo_config import sphinxext

from tenks import conf as tenks_conf
from tenks import spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
EXTS = os.path.join(ROOT, 'doc', 'source', '_exts')


def load_extension(name):
    location = importlib.util.spec_from_file_location(
        name, os.path.join(EXTS, name + '.py'))
    module = importlib.util.module_from_spec(location)
    location.loader.exec_module(module)
    return module


spec_reference = load_extension('spec_reference')


def schema_keys(schema):
    """How often each key name occurs in ``schema`` (its properties and
    patternProperties, at any depth), walked without the generator."""
    found = collections.Counter()
    if isinstance(schema, list):
        for item in schema:
            found += schema_keys(item)
    elif isinstance(schema, dict):
        for keyword, value in schema.items():
            if keyword in ('properties', 'patternProperties'):
                found.update(list(value))
                found += schema_keys(list(value.values()))
            elif keyword not in ('examples', 'default', 'enum'):
                found += schema_keys(value)
    return found


def documented_keys(lines):
    """How often each key name is documented: the last step of the path
    of each ``.. describe::`` entry."""
    found = collections.Counter()
    for line in lines:
        if line.startswith('.. describe:: '):
            path = line.split(':: ', 1)[1]
            match = re.fullmatch(r'.*<key matching (.*)>', path)
            found[match.group(1) if match else re.split(r'[.\]]', path)[-1]
                  ] += 1
    return found


def shown(keys):
    # The reference writes a pattern's '\Z' as '$'.
    return collections.Counter({key.replace('\\Z', '$'): count
                                for key, count in keys.items()})


def test_every_key_of_the_schema_is_in_the_spec_reference():
    expected = shown(schema_keys(spec.SCHEMA))
    assert 'capacity' in expected and 'required_traits' in expected
    assert documented_keys(spec_reference.reference()) == expected


def test_a_key_left_out_of_the_reference_is_caught():
    # What the test above checks fails when the generator skips a key:
    # here, the nested keys of a node type's volumes.
    lines = [line for line in spec_reference.reference()
             if not line.startswith('.. describe:: node_types.<name>.'
                                    'volumes[]')]
    assert documented_keys(lines) != shown(schema_keys(spec.SCHEMA))


def test_every_key_has_a_type_a_description_and_an_example():
    text = '\n'.join(spec_reference.reference())
    entry = text.split('.. describe:: node_types.<name>.memory_mb\n')[1]
    entry = entry.split('.. describe::')[0]
    assert 'Memory of each node, in MiB.' in entry
    assert ':Type: integer, 64 to 1048576' in entry
    assert ':Required: yes' in entry
    assert ('node_types:\n        small:\n          memory_mb: 2048'
            in entry)
    entry = text.split('.. describe:: bridge_type\n')[1].split(
        '.. describe::')[0]
    assert ':Default: ``"linuxbridge"``' in entry


def test_a_key_without_a_description_fails_the_reference():
    schema = copy.deepcopy(spec.SCHEMA)
    del schema['properties']['bridge_type']['description']
    with pytest.raises(ValueError, match='^bridge_type has no description'):
        spec_reference.reference(schema)


def test_a_key_without_an_example_fails_the_reference():
    schema = copy.deepcopy(spec.SCHEMA)
    del schema['properties']['deploy_kernel']['examples']
    with pytest.raises(ValueError, match='^deploy_kernel: no example'):
        spec_reference.reference(schema)


def test_keys_refused_or_ignored_say_why():
    text = '\n'.join(spec_reference.reference())
    assert ('.. describe:: libvirt_local_uri\n\n   Refused: set per '
            'hypervisor, as ``[hostagent] libvirt_uri``' in text)
    assert ('.. describe:: cmd\n\n   Only steers the Ansible-based '
            'Tenks' in text)


def configuration_namespaces():
    """The namespaces the configuration reference page shows."""
    with open(os.path.join(ROOT, 'doc', 'source', 'reference',
                           'configuration.rst')) as f:
        page = f.read()
    [names] = re.findall(r'^\.\. show-options:: (.*)$', page, re.M)
    return names.split()


def documented_options(namespaces):
    """(group, option) of every option the page's directive renders."""
    found, group = set(), None
    for line in sphinxext._format_option_help(namespaces, False):
        if line.startswith('.. oslo.config:group:: '):
            group = line.split(':: ')[1]
        elif line.startswith('.. oslo.config:option:: '):
            found.add((group, line.split(':: ')[1]))
    return found


def test_every_option_is_in_the_configuration_reference():
    expected = {(group, opt.dest) for group, opts in tenks_conf.list_opts()
                for opt in opts}
    assert ('hostagent', 'pool_dir') in expected
    assert expected <= documented_options(configuration_namespaces())


def test_an_option_of_another_namespace_is_not_taken_for_ours():
    # The check above fails when the page shows another namespace.
    assert ('DEFAULT', 'state_dir') not in documented_options(['oslo.log'])
