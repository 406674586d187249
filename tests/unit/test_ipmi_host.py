"""The IPMI host's control requests and its session bookkeeping, in this
process: BMCs of libvirt's test driver (its domain ``test``) on loopback
UDP ports, no IPMI client."""

import json
import os
import random
import socket
import stat
import struct
import time
import types

import pytest
from pyghmi.ipmi.private import session as ipmisession

from hostagent.drivers.bmc import ipmi_host
from hostagent.drivers.bmc import ipmi_store
from tenks import netutils

URI = 'test:///default'


def free_udp_port():
    """A free UDP port of 127.0.0.1 below the kernel's ephemeral range.
    A port from that range (bind to 0) may be handed to any process's
    passing socket (an ipmitool, a DNS query) while a test has it free
    between stopping and starting what binds it."""
    with open('/proc/sys/net/ipv4/ip_local_port_range') as f:
        low = int(f.read().split()[0])
    for port in random.sample(range(max(1024, low - 10000), low), 100):
        if netutils.udp_port_free('127.0.0.1', port):
            return port
    raise RuntimeError('no free UDP port below %d' % low)


def udp_free(port):
    return netutils.udp_port_free('127.0.0.1', port)


def definition(port, **fields):
    return dict({'domain': 'test', 'address': '127.0.0.1', 'port': port,
                 'username': 'admin', 'password': 'secret',
                 'libvirt_uri': URI, 'owner': 'tenks:c:d/hv1'}, **fields)


def line(request):
    return json.dumps(request).encode() + b'\n'


@pytest.fixture
def host(tmp_path):
    directory = tmp_path / 'ipmi'
    (directory / ipmi_store.BMCS).mkdir(parents=True, mode=0o700)
    host = ipmi_host.Host(str(directory))
    yield host
    for served in host._bmcs.values():
        if served.sock is not None:
            served.sock.close()
    host._workers.shutdown()


def ask(host, request):
    return host.handle(line(request))


MALFORMED = [
    (b'garbage\n', 'not JSON'),
    (b'\n', 'not JSON'),
    (b'\xff\xfe\n', 'not JSON'),
    (b'[' * 100000 + b'\n', 'not JSON'),
    (b'{"op": "list"}', 'ended by a newline'),
    (b'[]\n', '"op" one of add, compare, list, remove'),
    (b'{}\n', '"op" one of'),
    (b'{"op": "reboot"}\n', '"op" one of'),
    (b'{"op": ["add"]}\n', '"op" one of'),
    (b'{"op": "add"}\n', "'add' takes bmc"),
    (b'{"op": "list", "all": true}\n', "'list' takes nothing else"),
    (line({'op': 'add', 'bmc': 'test'}), 'a BMC is an object'),
    (line({'op': 'add', 'bmc': dict(definition(6230), extra=1)}),
     'a BMC is an object'),
    (line({'op': 'add', 'bmc': definition('6230')}), 'port must be'),
    (line({'op': 'add', 'bmc': definition(True)}), 'port must be'),
    (line({'op': 'add', 'bmc': definition(70000)}), 'port must be'),
    (line({'op': 'add', 'bmc': definition(6230, address='bmc.example')}),
     'address must be an IP address'),
    (line({'op': 'add', 'bmc': definition(6230, password='')}),
     'password must be a string'),
    (line({'op': 'add', 'bmc': definition(6230, username=None)}),
     'username must be a string'),
    (line({'op': 'add', 'bmc': definition(6230, domain='../../../x')}),
     'a domain name has no "/"'),
    (line({'op': 'add', 'bmc': definition(6230, domain='.hidden')}),
     'does not start with "."'),
    (line({'op': 'add', 'bmc': definition(6230, domain='x' * 201)}),
     'a domain name is a string of 1 to 200'),
    (line({'op': 'remove', 'domain': '/etc/passwd'}), 'a domain name'),
    (line({'op': 'remove', 'domain': 7}), 'a domain name'),
    (line({'op': 'compare', 'bmcs': {'test': definition(6230)}}),
     'bmcs must be a list'),
    (line({'op': 'compare', 'bmcs': [definition(6230), None]}),
     'a BMC is an object'),
]


@pytest.mark.parametrize('request_line,message', MALFORMED)
def test_a_malformed_request_gets_an_error_and_changes_nothing(
        host, tmp_path, request_line, message):
    port = free_udp_port()
    assert ask(host, {'op': 'add', 'bmc': definition(port)})['result'][
        'created']
    before = sorted(os.walk(tmp_path))

    answer = host.handle(request_line)

    assert answer['kind'] == 'invalid', answer
    assert message in answer['error']
    assert answer['bmcs'] == 1
    assert sorted(os.walk(tmp_path)) == before
    assert ask(host, {'op': 'list'})['result']['bmcs'] == [
        {'domain': 'test', 'address': '127.0.0.1', 'port': port,
         'status': 'running'}]


def test_a_request_over_the_size_limit_is_refused(host, monkeypatch):
    monkeypatch.setattr(ipmi_host, 'MAX_REQUEST', 100)
    answer = host.handle(b'{"op": "list", "pad": "%s"}\n' % (b'x' * 100))
    assert answer == {'error': 'a request is at most 100 bytes',
                      'kind': 'invalid', 'bmcs': 0}


def test_add_stores_the_definition_privately_and_binds_the_port(host):
    port = free_udp_port()
    assert ask(host, {'op': 'add', 'bmc': definition(port)}) == {
        'result': {'created': True, 'changed': True}, 'bmcs': 1}
    assert not udp_free(port)
    path = os.path.join(host.directory, 'bmcs', 'test.json')
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ipmi_store.read_all(host.directory) == {
        'test': definition(port)}
    assert ask(host, {'op': 'add', 'bmc': definition(port)})['result'] == {
        'created': False, 'changed': False}


def test_new_credentials_keep_the_socket(host):
    port = free_udp_port()
    ask(host, {'op': 'add', 'bmc': definition(port)})
    sock = host._bmcs['test'].sock
    assert ask(host, {'op': 'add', 'bmc': definition(
        port, password='other')})['result'] == {'created': False,
                                                 'changed': True}
    assert host._bmcs['test'].sock is sock
    assert host._bmcs['test'].bmc.authdata == {'admin': 'other'}
    assert ask(host, {'op': 'compare', 'bmcs': [definition(port)]})[
        'result'] == {'changes': {'test': ['password']}}


def test_a_move_to_a_busy_port_leaves_the_bmc_where_it_was(host):
    port = free_udp_port()
    ask(host, {'op': 'add', 'bmc': definition(port)})
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind(('127.0.0.1', 0))
        busy = squatter.getsockname()[1]
        answer = ask(host, {'op': 'add', 'bmc': definition(busy)})
    assert answer == {'error': '127.0.0.1:%d is in use' % busy,
                      'kind': 'port_in_use', 'bmcs': 1}
    assert not udp_free(port)
    assert ipmi_store.read_all(host.directory)['test']['port'] == port

    moved = free_udp_port()
    assert ask(host, {'op': 'add', 'bmc': definition(moved)})['result'][
        'changed']
    assert udp_free(port)
    assert not udp_free(moved)


def test_an_undefined_domain_is_refused(host):
    answer = ask(host, {'op': 'add', 'bmc': definition(
        free_udp_port(), domain='nowhere')})
    assert answer['kind'] == 'failed'
    assert 'nowhere' in answer['error']
    assert answer['bmcs'] == 0
    assert ipmi_store.read_all(host.directory) == {}


def test_remove_frees_the_port_and_forgets_the_bmc(host):
    port = free_udp_port()
    ask(host, {'op': 'add', 'bmc': definition(port)})
    assert ask(host, {'op': 'remove', 'domain': 'test'}) == {
        'result': {'removed': True}, 'bmcs': 0}
    assert udp_free(port)
    assert ipmi_store.read_all(host.directory) == {}
    assert ask(host, {'op': 'remove', 'domain': 'test'})['result'] == {
        'removed': False}


def test_compare(host):
    port = free_udp_port()
    ask(host, {'op': 'add', 'bmc': definition(port)})
    assert ask(host, {'op': 'compare', 'bmcs': [
        definition(port), definition(port, domain='other'),
        definition(port + 1, username='root')]})['result'] == {
        'changes': {'test': ['port', 'username'], 'other': None}}


def test_a_started_host_serves_what_was_stored(host, tmp_path):
    port = free_udp_port()
    ipmi_store.write(host.directory, definition(port))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind(('127.0.0.1', 0))
        busy = squatter.getsockname()[1]
        ipmi_store.write(host.directory, definition(busy, domain='held'))
        path = os.path.join(host.directory, 'bmcs', 'broken.json')
        with open(path, 'w') as f:
            f.write('{"domain": "broken"')
        host.load()
    assert ask(host, {'op': 'list'})['result']['bmcs'] == [
        {'domain': 'held', 'address': '127.0.0.1', 'port': busy,
         'status': 'error'},
        {'domain': 'test', 'address': '127.0.0.1', 'port': port,
         'status': 'running'}]
    assert not udp_free(port)
    assert ask(host, {'op': 'compare', 'bmcs': [
        definition(busy, domain='held')]})['result'] == {
        'changes': {'held': ['stopped']}}


def open_session_request(tag):
    """An RMCP+ Open Session Request (IPMI 2.0, cipher suite 3)."""
    payload = (bytes([tag, 0, 0, 0]) + struct.pack('<I', tag + 1)
               + bytes([0, 0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 8, 1, 0, 0, 0,
                        2, 0, 0, 8, 1, 0, 0, 0]))
    return (bytes([6, 0, 0xff, 7, 6, 0x10]) + bytes(8)
            + struct.pack('<H', len(payload)) + payload)


def test_sessions_are_bounded_and_expire(host, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(ipmi_host, 'time', types.SimpleNamespace(
        monotonic=lambda: now[0], sleep=time.sleep))
    ask(host, {'op': 'add', 'bmc': definition(free_udp_port())})
    served = host._bmcs['test']
    clients = [('127.0.0.1', 40000 + i)
               for i in range(ipmi_host.MAX_SESSIONS + 6)]
    for tag, client in enumerate(clients):
        now[0] += 0.1
        served.answer(open_session_request(tag), client)
    # The least recently seen went; pyghmi's own table keeps none.
    assert sorted(served.sessions) == clients[6:]
    assert not set(clients) & set(ipmisession.Session.bmc_handlers)

    now[0] += ipmi_host.SESSION_TIMEOUT + 1
    served.answer(open_session_request(0), clients[0])
    assert list(served.sessions) == [clients[0]]
