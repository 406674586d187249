"""Placement: which resource providers offer what."""

import time

from tenks import constants
from tenks import exceptions


def providers_offering(conn, resource_class, traits):
    """The uuids of the providers that offer a unit of
    ``resource_class`` and every trait in ``traits``."""
    # Placement refuses to query a class or trait it does not know yet:
    # nobody has reported it, so nobody offers it.
    for path in ['/resource_classes/%s' % resource_class] + [
            '/traits/%s' % trait for trait in traits]:
        if conn.placement.get(
                path, microversion=constants.PLACEMENT_REQUIRED_TRAITS,
                raise_exc=False).status_code == 404:
            return set()
    query = 'resources=%s:1' % resource_class
    if traits:
        query += '&required=%s' % ','.join(sorted(traits))
    response = conn.placement.get('/resource_providers?' + query,
                                  microversion=constants.PLACEMENT_REQUIRED_TRAITS)
    response.raise_for_status()
    return {p['uuid'] for p in response.json()['resource_providers']}


def wait_for_offers(conn, wanted, timeout, interval):
    """Wait until, for each (resource class, traits, {node uuid: node
    name}) of ``wanted``, every node's own provider offers a unit of the
    class with the traits; PlacementTimeout after ``timeout`` seconds
    names the classes still short."""
    deadline = time.monotonic() + timeout
    while True:
        short = []
        for rc, traits, nodes in wanted:
            missing = sorted(nodes[uuid] for uuid in set(nodes) -
                             providers_offering(conn, rc, traits))
            if missing:
                short.append('%s%s: %d of %d nodes offer it (not yet %s)'
                             % (rc, ' with %s' % ', '.join(traits)
                                if traits else '',
                                len(nodes) - len(missing), len(nodes),
                                exceptions.first_of(missing, 5, ', ')))
        if not short:
            return
        if time.monotonic() > deadline:
            raise exceptions.PlacementTimeout(timeout=timeout,
                                              short='; '.join(short))
        time.sleep(interval)

