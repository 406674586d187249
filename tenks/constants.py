"""Constants that more than one module uses: each defined here once and
used by name. (States are in tenks.states.)"""

GIB = 1024 ** 3

# The standard resource classes a hypervisor offers, and that a
# bare-metal flavor asks none of.
VCPU = 'VCPU'
MEMORY_MB = 'MEMORY_MB'
DISK_GB = 'DISK_GB'
RESOURCE_CLASSES = (VCPU, MEMORY_MB, DISK_GB)

# What a plan does to a node or a thing (an entry's 'action').
CREATE = 'create'
UPDATE = 'update'
DELETE = 'delete'
REPLACE = 'replace'
# A thing found otherwise than recorded, made as recorded again.
REPAIR = 'repair'
# Node actions besides those: nothing to do.
KEEP = 'keep'

# The bridge type of a NIC that names none.
DEFAULT_BRIDGE_TYPE = 'linuxbridge'

# The types of BMC a node may have; the outlets of one PDU (a cluster's on
# a hypervisor: VirtualPDU's APC Rack PDU).
BMC_TYPES = ('ipmi', 'redfish', 'snmp')
PDU_OUTLETS = 24

# The "hypervisor" of what Tenks records in the cloud rather than on a
# host: Ironic nodes and Nova flavors.
CLOUD_HOST = 'openstack'

# The kinds of thing Tenks records, in the stages a teardown removes
# them: flavors before the nodes they schedule to, Ironic nodes (with
# their ports) before their BMC, a BMC before its domain, a domain
# before its disks and ports, ports before their bridge, volumes before
# their pool.
REMOVAL_STAGES = (
    ('nova_flavor',),
    ('ironic_node',),
    ('bmc',),
    ('domain',),
    ('volume', 'port'),
    ('uplink',),
    ('bridge',),
    ('pool',),
)
# The things of a hypervisor that its nodes share, in removal order.
HOST_REMOVAL = ('uplink', 'bridge', 'pool')

# OpenStack Placement microversions Tenks asks for: 'required' traits in
# resource provider queries; a provider's generation in a PUT of its
# aggregates.
PLACEMENT_REQUIRED_TRAITS = '1.18'
PLACEMENT_PROVIDER_AGGREGATES = '1.19'

# What nodes can be listed by (tenks node list --sort): columns every node
# has a value in, so a page can start after any node.
NODE_SORT_KEYS = ('name', 'uuid', 'cluster', 'hypervisor', 'node_type',
                  'vcpus', 'memory_mb', 'bmc_type', 'bmc_address', 'bmc_port',
                  'state')
