"""``tenks node list`` of a big cluster, page by page: every node once,
in the order asked, whichever page it starts at."""

import uuid

import pytest

from conductor import rpcapi as conductor_rpcapi
from tenks import constants
from tenks import exceptions
from tenks import policy
from tenks.db import api as db_api
from tenks.db import migration
from tenks.db import views
from tests.unit.test_rpcapi import Bus


def node(cluster, index):
    return dict(
        uuid=str(uuid.uuid4()), cluster=cluster,
        name='%s%d' % (cluster, index),
        hypervisor='hv%d' % (index % 3), node_type='type%d' % (index % 2),
        spec_index=0, vcpus=1 + index % 4, memory_mb=512 * (1 + index % 3),
        volumes=[], nics=[{'mac': '52:54:00:00:00:%02x' % index}],
        bmc_type='redfish', bmc_address='127.0.0.%d' % (1 + index % 2),
        bmc_port=8000 + index % 5, bmc_system_id=str(uuid.uuid4()),
        state='deployed' if index % 4 else 'deploying')


@pytest.fixture
def db(state_dir):
    state_dir.mkdir()
    engine = db_api.create_engine(
        'sqlite:///%s' % (state_dir / 'state.sqlite'))
    with migration.schema_lock(str(state_dir)):
        migration.upgrade(engine)
    db = db_api.StateDB(engine)
    db.add_nodes([node('a', i) for i in range(23)] +
                 [node('b', i) for i in range(11)])
    yield db
    engine.dispose()


def pages(records, size, **order):
    """Every page of ``size`` nodes, each asked after the last node of
    the one before."""
    found, marker = [], None
    while True:
        page = records.list_nodes(limit=size, marker=marker, **order)
        assert len(page) <= size
        found.append(page)
        if len(page) < size:
            return found
        marker = page[-1]['uuid']


@pytest.mark.parametrize('key', constants.NODE_SORT_KEYS)
@pytest.mark.parametrize('direction', ['asc', 'desc'])
def test_pages_hold_every_node_once_in_order(db, key, direction):
    records = views.Records(db)
    everything = records.list_nodes(sort_key=key, sort_dir=direction)
    expected = sorted(everything, key=lambda n: (n[key], n['uuid']),
                      reverse=direction == 'desc')
    assert everything == expected
    paged = [n for page in pages(records, 5, sort_key=key,
                                 sort_dir=direction) for n in page]
    assert paged == expected and len(paged) == 34


def test_default_order_is_cluster_then_name(db):
    records = views.Records(db)
    listed = [(n['cluster'], n['name']) for page in pages(records, 4)
              for n in page]
    assert listed == sorted(listed) and len(listed) == 34


def test_a_cluster_pages_alone(db):
    records = views.Records(db)
    first = records.list_nodes('b', limit=6)
    rest = records.list_nodes('b', limit=6, marker=first[-1]['uuid'])
    assert [n['cluster'] for n in first + rest] == ['b'] * 11
    assert len({n['uuid'] for n in first + rest}) == 11


def test_an_unknown_marker_is_named(db):
    with pytest.raises(exceptions.NodeNotFound,
                       match='No node named nope or with that UUID '
                             r'\(the marker\)'):
        views.Records(db).list_nodes(marker='nope')


@pytest.mark.parametrize('args,problem', [
    ({'limit': 0}, 'limit 0 is not a whole number above 0'),
    ({'limit': '5'}, "limit '5' is not a whole number above 0"),
    ({'sort_key': 'spec'}, "sort key 'spec' is not one of name, uuid"),
    ({'sort_dir': 'up'}, "sort direction 'up' is not 'asc' or 'desc'"),
])
def test_bad_listing_arguments_are_named(db, args, problem):
    with pytest.raises(exceptions.ListingInvalid,
                       match='Cannot list nodes so: ' + problem):
        views.Records(db).list_nodes(**args)


def test_paging_needs_version_1_8():
    """Without paging, list_nodes goes at 1.0 as before; with it, at
    1.8, and a conductor capped lower is named rather than asked."""
    bus = Bus()
    api = conductor_rpcapi.ConductorAPI(bus)
    context = policy.admin_context()
    for call in (lambda: api.list_nodes(context, 'c'),
                 lambda: api.list_nodes(context, 'c', limit=5,
                                        marker=None, sort_key='name')):
        try:
            call()
        except Exception:
            pass  # nothing answers the recorded call
    assert [(m, a, o['version']) for _, m, a, o in bus.sent] == [
        ('list_nodes', {'cluster': 'c'}, '1.0'),
        ('list_nodes', {'cluster': 'c', 'limit': 5, 'sort_key': 'name'},
         '1.8')]
    capped = conductor_rpcapi.ConductorAPI(Bus(conductor='1.7'))
    with pytest.raises(exceptions.VersionCapped,
                       match='list_nodes with limit, sort_key needs '
                             'version 1.8'):
        capped.list_nodes(context, limit=5, sort_key='name')


def test_cli_pages_through_a_cluster(db, tenks):
    names, marker = [], []
    while True:
        done = tenks('node', 'list', '--cluster', 'a',
                               '--sort', 'name:desc', '--limit', '10',
                     '-f', 'value', '-c', 'name', '-c', 'uuid', *marker)
        assert done.code == 0, done.err
        rows = [line.split() for line in done.out.splitlines()]
        names += [name for name, _ in rows]
        if len(rows) < 10:
            break
        marker = ['--marker', rows[-1][1]]
    assert names == sorted(['a%d' % i for i in range(23)], reverse=True)


def test_cli_refuses_bad_paging(db, tenks):
    done = tenks('node', 'list', '--sort', 'colour')
    assert done.code == 1
    assert "sort key 'colour' is not one of name" in done.err
    with pytest.raises(SystemExit):
        tenks('node', 'list', '--limit', '0')
