"""Tenks runs on native threads, never on eventlet.

oslo.service (imported by oslo.messaging) picks its eventlet backend
unless told otherwise, and futurist imports eventlet whenever it is
installed: a quarter of a second of start-up and a deprecation warning
for a library Tenks never uses. :func:`use_threads` runs before either
is imported, in every Tenks process that uses the bus (the services,
rpc users); the CLI only hides eventlet, so that ``--version`` and the
read-only commands load no oslo.service.
"""

import sys


def hide_eventlet():
    """Hide eventlet from the libraries that would import it only
    because it is installed (futurist); imports nothing."""
    if 'eventlet' not in sys.modules:
        sys.modules['eventlet'] = None


def use_threads():
    """Select oslo.service's threading backend; hide eventlet."""
    hide_eventlet()
    from oslo_service import backend
    if backend.get_backend_type() is None:
        backend.init_backend(backend.BackendType.THREADING)
