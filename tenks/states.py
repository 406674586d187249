"""The states Tenks records and shows, and the Ironic states it relies
on: each defined here once and used by name.

The values are stored in the state database and returned over RPC: a
name may change, a value may not.
"""

# Operations (tenks operation list).
OPERATION_RUNNING = 'running'
OPERATION_SUCCEEDED = 'succeeded'
OPERATION_FAILED = 'failed'
# Its conductor stopped (or the operation was abandoned) before the end.
OPERATION_INTERRUPTED = 'interrupted'

# Hypervisors, as shown: worked out from the registration, not stored.
HYPERVISOR_UP = 'up'
HYPERVISOR_DOWN = 'down'
# Registered, and no hostagent has answered as that host yet.
HYPERVISOR_UNVERIFIED = 'unverified'
HYPERVISOR_MAINTENANCE = 'maintenance'
HYPERVISOR_DISABLED = 'disabled'

CLUSTER_SCHEDULED = 'scheduled'
CLUSTER_DEPLOYING = 'deploying'
CLUSTER_DEPLOYED = 'deployed'
CLUSTER_FAILED = 'failed'
CLUSTER_DELETING = 'deleting'

NODE_SCHEDULED = 'scheduled'
NODE_DEPLOYED = 'deployed'
# Its first deploy failed and left resources that could not be removed:
# kept (name, UUID, MACs) so a re-run or a teardown can finish.
NODE_FAILED = 'failed'

# A recorded thing: 'creating' from just before the request that makes
# it until its agent confirms it, then 'present'.
RESOURCE_CREATING = 'creating'
RESOURCE_PRESENT = 'present'

# What is found of a thing against what is asked or recorded (a node's
# parts in inspect_nodes, the entries of tenks audit): missing; somebody
# else's (no mark, or another owner's: also what the drivers' batch
# reads give for it); otherwise than asked; a BMC as asked that does not
# run; a volume to grow.
PART_MISSING = 'missing'
PART_FOREIGN = 'foreign'
PART_DIFFERS = 'differs'
PART_STOPPED = 'stopped'
PART_SMALLER = 'smaller'

# What a hostagent's notes say of a deployment (hostagent.deployments),
# weakest proof of death last. 'here': noted only through the
# hostagent's own state directory, which holds no state database: its
# conductor, whose database is elsewhere, knows.
DEPLOYMENT_LIVE = 'live'
DEPLOYMENT_UNKNOWN = 'unknown'
DEPLOYMENT_HERE = 'here'
DEPLOYMENT_DEAD = 'dead'

# A domain's power states (as virsh words them) in which it does not
# run, None when it is not defined: its definition can change at once,
# and a node that moves counts as powered off.
DOMAIN_STOPPED = (None, 'shut off', 'crashed')
# The states the fake virt driver's domains take (hostagent.drivers.fake).
DOMAIN_RUNNING = 'running'
DOMAIN_SHUT_OFF = 'shut off'

# Ironic's provision states Tenks drives a node through.
IRONIC_ENROLL = 'enroll'
IRONIC_MANAGEABLE = 'manageable'
IRONIC_AVAILABLE = 'available'
# Provision states in which Ironic (39) lets a node's interfaces and
# resource class change (conductor update_node; in maintenance any state
# will do). A resource class changed under an instance would not reach
# Nova's record of it. Ironic lets a driver change through in any state
# when it resets the interfaces: Tenks holds it to these states too, as
# that resets the interfaces an instance was deployed with.
IRONIC_FIELD_STATES = (IRONIC_ENROLL, 'inspecting', 'inspect wait',
                       IRONIC_MANAGEABLE, IRONIC_AVAILABLE)
# Ironic keeps a port's physical_network and local_link_connection
# (and so its network binding) from changing outside these states, not
# even in available: there, a maintenance window does it.
IRONIC_PORT_STATES = (IRONIC_ENROLL, 'inspecting', 'inspect wait',
                      IRONIC_MANAGEABLE)
# Resting states without an instance: a node in one of these can be
# removed or resized (Ironic's own delete needs enroll, manageable or
# available). Any other state, including one a newer Ironic adds, means
# an instance may be there (active, deploy failed, error: a failed
# teardown, adopt failed: a running workload Ironic could not take over,
# rescue and service states) or an operation is in flight on the
# machine (deploying, cleaning, inspecting...), which a removed or
# redefined VM would break.
IRONIC_FREE_STATES = frozenset((IRONIC_ENROLL, IRONIC_MANAGEABLE,
                                IRONIC_AVAILABLE, 'inspect failed',
                                'clean failed'))
