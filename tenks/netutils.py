"""This host's sockets: whether a port is free, asked by the hostagent
for a host's facts (hostagent.manager) and by the VirtualPDU driver to
know its process is up (hostagent.drivers.bmc.virtualpdu)."""

import errno
import socket


def udp_port_free(address, port):
    """Whether nothing is bound to UDP ``address:port``; OSError when
    it cannot tell."""
    family = socket.AF_INET6 if ':' in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        try:
            sock.bind((address, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return False
            raise
    return True
