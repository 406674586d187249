"""BMC faults on request: a node's BMC made to misbehave (see
tenks.bmc_faults), and made well again.

The conductor asks the node's hostagent, which stores the fault where
the BMC's daemon reads it, and once the agent has done so records it in
the node's record (``bmc_fault``): the record says what the BMC shows.
A fault the agent could not clear stays recorded. A teardown removes
the BMC, its fault with it, and the record.
"""

import uuid

from tenks import bmc_faults
from tenks import exceptions
from tenks import names


class BmcFaults:
    """The BMC faults of the conductor ``conductor``'s nodes."""

    def __init__(self, conductor):
        self.db = conductor.db
        self.agents = conductor.agents

    def set(self, node, kind, duration=None, probability=None,
            cluster=None):
        """Make the BMC of ``node`` (a name or UUID; ``cluster`` when
        several clusters have a node of that name) show a fault of
        ``kind``; return the node."""
        row = self._find(node, cluster)
        refusal = bmc_faults.refusal(row.bmc_type, kind)
        if refusal:
            raise exceptions.BmcFaultInvalid(node=row.name, reason=refusal)
        try:
            fault = bmc_faults.make(kind, duration, probability)
        except ValueError as e:
            raise exceptions.BmcFaultInvalid(node=row.name,
                                             reason=str(e)) from None
        self._apply(row, fault)
        return self.db.get_node(row.uuid).as_dict()

    def clear(self, node=None, cluster=None, all_nodes=False):
        """Clear the fault of ``node``'s BMC, or (``all_nodes``) of every
        node (of ``cluster``) that has one. Returns {'cleared': [node
        names], 'failed': {node name: why}}: a node whose agent could not
        clear it keeps it recorded."""
        if all_nodes:
            rows = [r for r in self.db.list_nodes(cluster)
                    if r.bmc_fault is not None]
        else:
            rows = [self._find(node, cluster)]
        cleared, failed = [], {}
        for row in rows:
            try:
                self._apply(row, None)
            except exceptions.TenksError as e:
                if not all_nodes:
                    raise
                failed[row.name] = str(e)
            else:
                cleared.append(row.name)
        return {'cleared': cleared, 'failed': failed}

    def _apply(self, row, fault):
        record = self.db.get_cluster(row.cluster)
        self.agents.request(
            row.hypervisor, 'set_bmc_fault', 'bmc-fault/%s' % uuid.uuid4(),
            name=row.name, bmc=row.bmc_type, fault=fault,
            owner=names.owner(record.name, record.uuid))
        self.db.update_node(row.uuid, bmc_fault=fault)

    def _find(self, node, cluster):
        """The record of the node with this UUID or name (of
        ``cluster``)."""
        if not isinstance(node, str) or not node:
            raise exceptions.NodeNotFound(node=node, where='')
        row = self.db.get_node(node)
        if row is not None and cluster in (None, row.cluster):
            return row
        found = [r for r in self.db.list_nodes(cluster) if r.name == node]
        if not found:
            raise exceptions.NodeNotFound(
                node=node, where=' in cluster %s' % cluster if cluster
                else '')
        if len(found) > 1:
            raise exceptions.NodeAmbiguous(
                node=node, count=len(found), matches=', '.join(
                    'cluster %s on %s' % (r.cluster, r.hypervisor)
                    for r in found))
        return found[0]
