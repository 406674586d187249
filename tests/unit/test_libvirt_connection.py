"""The libvirt driver's shared connection (libvirt's test driver, in
this process)."""

from hostagent.drivers.virt import libvirt as libvirt_driver
from tenks import conf as tenks_conf


def driver(tmp_path):
    conf = tenks_conf.new_conf()
    conf([], default_config_files=[])
    conf.set_override('state_dir', str(tmp_path))
    conf.set_override('libvirt_uri', 'test:///default', group='hostagent')
    return libvirt_driver.LibvirtDriver(conf)


def test_a_live_connection_is_shared(tmp_path):
    made = driver(tmp_path)
    assert made._connection() is made._connection()


def test_a_dead_connection_is_replaced_not_closed_under_its_users(
        tmp_path, monkeypatch):
    """Another thread may still be inside a call on the dead connection:
    closing it there would free it under that call."""
    made = driver(tmp_path)
    first = made._connection()
    monkeypatch.setattr(libvirt_driver.LibvirtDriver, '_alive',
                        staticmethod(lambda conn: False))
    second = made._connection()
    assert second is not first
    # The thread holding the first can still use it; its last user's
    # reference closes it.
    assert first.getURI() == 'test:///default'
