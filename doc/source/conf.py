"""Sphinx configuration of Tenks' documentation.

The user guide includes the README's sections (one text to keep true);
the spec and configuration references, the flow graphs and the RPC
version history are generated from the code at build time. Nothing here
needs the network: a build runs offline, with warnings as errors
(``tox -e docs``).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Our extensions, and the repository for autodoc and tenks.spec.
sys.path[:0] = [os.path.join(HERE, '_exts'),
                os.path.abspath(os.path.join(HERE, '..', '..'))]

project = 'Tenks'
copyright = 'Tenks developers'

extensions = [
    'myst_parser',
    'sphinx.ext.autodoc',
    'sphinx.ext.graphviz',
    'oslo_config.sphinxext',
    'reno.sphinxext',
    'spec_reference',
    'flow_graphs',
    'openstackdocstheme',
]

source_suffix = {'.rst': 'restructuredtext', '.md': 'markdown'}
exclude_patterns = ['_build']
# The README's sections start at its own heading levels (## or ###).
suppress_warnings = ['myst.header']

# OpenStack's theme, as docs.openstack.org publishes projects; it builds
# offline.
html_theme = 'openstackdocs'
openstackdocs_auto_name = False
graphviz_output_format = 'svg'
autodoc_member_order = 'bysource'
