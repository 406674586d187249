"""The OpenStack side: every call Tenks makes to Ironic, Nova, Glance and
Placement, through openstacksdk (imported on first use).

``connection``: which cloud, and the one connection to it; ``ironic``:
nodes, their ports and provision states; ``nova``: flavors and servers;
``placement``: what providers offer; ``placement_aggregates``: Tenks'
aggregates mirrored in Placement; ``coexistence``: the advisory check
that bare metal and VMs cannot land on each other's hosts. The flows'
tasks and the conductor call these; nothing else talks to the cloud.
"""
