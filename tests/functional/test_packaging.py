"""The sdist and the wheel install a working Tenks: one version
everywhere, the commands, the sample config, the example specs and every
file of the packages (the alembic migrations included)."""

import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

import pytest

import tenks
from tenks.db import migrations

pytestmark = pytest.mark.functional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PACKAGES = ('tenks', 'flows', 'conductor', 'hostagent')


def run(*args, cwd='/'):
    """Run a command away from this tree, which python -c would import."""
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    done = subprocess.run(args, capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)
    assert done.returncode == 0, '%s: %s%s' % (args, done.stdout,
                                               done.stderr)
    return done.stdout


def source_files():
    """Every file of the packages in this tree, relative to it."""
    found = set()
    for package in PACKAGES:
        for top, dirs, files in os.walk(os.path.join(ROOT, package)):
            dirs[:] = [d for d in dirs if d != '__pycache__']
            found.update(os.path.relpath(os.path.join(top, f), ROOT)
                         for f in files if not f.endswith('.pyc'))
    return found


@pytest.fixture(scope='module')
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp('dist')
    run(sys.executable, '-m', 'build', '--outdir', str(out), ROOT)
    [sdist] = out.glob('*.tar.gz')
    [wheel] = out.glob('*.whl')
    return sdist, wheel


def fresh_venv(path):
    """A new venv that finds the dependencies in this test's venv (so
    that nothing is downloaded or compiled) but not this tree's tenks."""
    run(sys.executable, '-m', 'venv', str(path))
    python = str(path / 'bin' / 'python')
    site = run(python, '-c', 'import sysconfig; '
               'print(sysconfig.get_paths()["purelib"])').strip()
    with open(os.path.join(site, 'tenks-test-deps.pth'), 'w') as f:
        f.write(sysconfig.get_paths()['purelib'] + '\n')
    return python


def test_wheel_and_sdist_carry_one_version_and_every_file(dist):
    sdist, wheel = dist
    version = tenks.__version__
    assert wheel.name == 'tenks-%s-py3-none-any.whl' % version
    assert sdist.name == 'tenks-%s.tar.gz' % version
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        metadata = whl.read('tenks-%s.dist-info/METADATA' % version).decode()
    assert 'Version: %s\n' % version in metadata
    assert 'Summary: Virtual bare metal clusters' in metadata
    assert sorted(source_files() - names) == []
    data = 'tenks-%s.data/data/' % version
    assert data + 'etc/tenks/tenks.conf.sample' in names
    assert data + 'share/tenks/examples/quickstart.yaml' in names
    with tarfile.open(sdist) as tar:
        in_sdist = {n.split('/', 1)[1] for n in tar.getnames() if '/' in n}
    assert sorted(source_files() - in_sdist) == []
    for path in ('README.md', 'etc/tenks/tenks.conf.sample',
                 'etc/quickstart.yaml', 'setup.cfg', 'pyproject.toml'):
        assert path in in_sdist


@pytest.mark.parametrize('which', ['wheel', 'sdist'])
def test_installed_tenks_works(dist, tmp_path, which):
    package = dist[1] if which == 'wheel' else dist[0]
    venv = tmp_path / 'venv'
    python = fresh_venv(venv)
    # From the sdist, pip builds a wheel first (setuptools from the
    # local wheel cache or the index).
    run(python, '-m', 'pip', 'install', '-q', '--no-deps', str(package))
    tenks_cmd = str(venv / 'bin' / 'tenks')
    where = run(python, '-c', 'import tenks; print(tenks.__file__)')
    assert where.startswith(str(venv)), where

    assert run(tenks_cmd, '--version').split() == [
        'tenks', tenks.__version__]
    assert run(python, '-c', 'from importlib import metadata; '
               'print(metadata.version("tenks"))').strip() == (
        tenks.__version__)
    helped = run(tenks_cmd, '--help')
    assert 'deploy' in helped and '--os-cloud' in helped
    for command in ('tenks-conductor', 'tenks-hostagent', 'tenks-manage'):
        assert '--config-file' in run(str(venv / 'bin' / command), '--help')

    sample = venv / 'etc' / 'tenks' / 'tenks.conf.sample'
    with open(os.path.join(ROOT, 'etc', 'tenks', 'tenks.conf.sample')) as f:
        assert sample.read_text() == f.read()
    example = venv / 'share' / 'tenks' / 'examples' / 'quickstart.yaml'
    # The installed code accepts the installed example.
    assert run(python, '-c', 'import sys, yaml; from tenks import spec; '
               'print(spec.validate(yaml.safe_load(open(sys.argv[1])), '
               'source=sys.argv[1])["cluster"])',
               str(example)).strip() == 'quickstart'
    # Its migrations make a state database, as a first command does.
    assert run(python, '-c', 'import sys; from tenks.db import api, '
               'migration; engine = api.create_engine(api.default_url('
               'sys.argv[1])); migration.upgrade(engine); '
               'print(api.schema_version(engine))',
               str(tmp_path)).strip() == migrations.HEAD
