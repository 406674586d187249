"""The documentation builds as tox -e docs builds it: warnings (a broken
include, reference or docstring, a key without a description, a flow
that no longer builds) are errors."""

import html as html_lib
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def test_documentation_builds_without_warnings(tmp_path):
    html = tmp_path / 'html'
    # From the repository's root, as tox runs it (reno finds the notes
    # from there).
    build = subprocess.run(
        [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q',
         '-b', 'html', 'doc/source', str(html)],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert build.returncode == 0, build.stderr
    architecture = (html / 'reference' / 'architecture.html').read_text()
    # The deploy and teardown flows, drawn, with their tasks.
    graphs = re.findall(r'<object data="\.\./(_images/graphviz-\w+\.svg)"',
                        architecture)
    assert len(graphs) == 2
    deploy, teardown = [html_lib.unescape((html / graph).read_text())
                        for graph in graphs]
    assert 'bridge:hv1:brtenks0' in deploy and 'cluster:commit' in deploy
    assert 'remove-pool:hv1:tenks-example' in teardown
    spec = (html / 'reference' / 'spec.html').read_text()
    assert 'node_types.&lt;name&gt;.volumes[].capacity' in spec
    notes = (html / 'releasenotes.html').read_text()
    assert 'Documentation in' in notes
