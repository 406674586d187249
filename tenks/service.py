"""Run a Tenks service in the foreground until SIGTERM or SIGINT."""

import os
import signal
import sys
import threading

from oslo_log import log as logging

from tenks import conf as tenks_conf
from tenks import rpc


def run(name, factory, argv=None):
    conf = tenks_conf.new_conf()
    logging.register_options(conf)
    rpc.register_opts(conf)
    conf(sys.argv[1:] if argv is None else argv, project='tenks',
         prog='tenks-%s' % name)
    logging.setup(conf, 'tenks')
    bus = rpc.Bus(conf)
    service = factory(conf, bus)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    service.start()
    logging.getLogger(__name__).info('tenks-%s started on %s', name,
                                     bus.url.split('@')[-1])
    stopping.wait()
    if service.stop():
        # Operations handed back still run in threads that would keep
        # the process alive: their flows are persisted, so just go.
        logging.getLogger(__name__).info('tenks-%s stopped', name)
        os._exit(0)
    bus.cleanup()
