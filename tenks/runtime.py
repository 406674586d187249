"""Tenks runs on native threads, never on eventlet.

oslo.service (imported by oslo.messaging) picks its eventlet backend
unless told otherwise, and futurist imports eventlet whenever it is
installed: a quarter of a second of start-up and a deprecation warning
for a library Tenks never uses. :func:`use_threads` runs before either
is imported, in every Tenks process (the CLI, the services, rpc users).
"""

import sys


def use_threads():
    """Select oslo.service's threading backend; hide eventlet from the
    libraries that would import it only because it is installed."""
    if 'eventlet' not in sys.modules:
        sys.modules['eventlet'] = None
    from oslo_service import backend
    if backend.get_backend_type() is None:
        backend.init_backend(backend.BackendType.THREADING)
