"""Who may call what: oslo.policy rules on the caller's request context.

Every call of the conductor RPC API carries the caller's oslo.context
request context, and each has a rule: readers read, members deploy, plan
and tear down, admins manage hypervisors and aggregates, hostagents
(the service role) register and report results. The roles are taken as
they come: there is no Keystone to expand implied roles, so the reader
rule names member and admin too. Two more rules say who sees what is
for admins only in what a call returns: a hypervisor's facts and what
comes from them, and deployment UUIDs (see hide_deployments). The rules
can be changed in a policy file ([oslo_policy] policy_file).
"""

import re
import threading
import time

from oslo_context import context as oslo_context
from oslo_log import log as logging

from tenks import exceptions

LOG = logging.getLogger(__name__)

ADMIN = 'rule:context_is_admin'
MEMBER = 'rule:context_is_member'
READER = 'rule:context_is_reader'
SERVICE = 'rule:context_is_service'

# Who sees a hypervisor's admin-only fields, and deployment UUIDs.
HYPERVISOR_ADMIN_FIELDS = 'tenks:hypervisor:admin_fields'
DEPLOYMENTS = 'tenks:cluster:deployment'

# name -> (check string, description). oslo.policy is imported only where
# a rule is checked: it brings requests along, a tenth of a second that
# every command would otherwise pay at start.
RULES = dict([
    ('context_is_admin', ('role:admin', 'Who counts as an admin.')),
    ('context_is_member', ('role:member or %s' % ADMIN,
                           'Who may deploy, plan and tear down clusters.')),
    ('context_is_reader', ('role:reader or %s' % MEMBER,
                           'Who may read what Tenks has made.')),
    ('context_is_service', ('role:service or %s' % ADMIN,
                            'Who may speak for a hostagent.')),
    ('tenks:agent:register', (
        SERVICE, 'Register a hostagent and its facts, or heartbeat.')),
    ('tenks:agent:report_result', (
        SERVICE, 'Report the outcome of a request to a hostagent.')),
    ('tenks:cluster:deploy', (MEMBER, 'Deploy or change a cluster.')),
    ('tenks:cluster:plan', (
        MEMBER, 'Show what deploying a spec would change (it inspects '
                'the hypervisors).')),
    ('tenks:cluster:teardown', (MEMBER, 'Tear a cluster down.')),
    ('tenks:cluster:list', (READER, 'List clusters.')),
    ('tenks:cluster:show', (READER, 'Show a cluster and its nodes.')),
    (DEPLOYMENTS, (
        ADMIN, 'See deployment UUIDs: the uuid of clusters, and the '
               'UUID in owner marks (tenks:<cluster>:<uuid>) wherever a '
               'returned value or error holds one; others get *** in '
               'its place.')),
    ('tenks:node:list', (READER, 'List nodes.')),
    ('tenks:operation:list', (READER, 'List operations.')),
    ('tenks:operation:show', (READER, 'Show an operation.')),
    ('tenks:operation:graph', (READER, 'Draw the flow of an operation.')),
    ('tenks:event:list', (READER, 'List recorded events.')),
    ('tenks:hypervisor:list', (READER, 'List hypervisors.')),
    ('tenks:conductor:list', (READER, 'List the live conductors.')),
    ('tenks:hypervisor:show', (READER, 'Show a hypervisor.')),
    (HYPERVISOR_ADMIN_FIELDS, (
        ADMIN, 'See the facts of hypervisors and what comes from them '
               '(inventories, usages, traits, allocations), their '
               'disabled reasons, aggregates and availability zones.')),
    ('tenks:hypervisor:delete', (
        ADMIN, 'Forget a hypervisor that is down and hosts nothing.')),
    ('tenks:hypervisor:update', (ADMIN, 'Enable or disable a hypervisor.')),
    ('tenks:hypervisor:maintenance', (
        ADMIN, 'Put a hypervisor into maintenance, moving its nodes away, '
               'or take it out.')),
    ('tenks:node:fault:set', (
        ADMIN, "Make a node's BMC misbehave (a BMC fault).")),
    ('tenks:node:fault:clear', (ADMIN, "Clear a node's BMC fault.")),
    ('tenks:audit', (
        ADMIN, 'Compare the records with what the hypervisors and the '
               'cloud hold, and remove what dead deployments left '
               '(clean).')),
] + [
    ('tenks:aggregate:%s' % action, (ADMIN, description))
    for action, description in (
        ('list', 'List host aggregates.'),
        ('show', 'Show a host aggregate.'),
        ('create', 'Create a host aggregate.'),
        ('update', 'Rename a host aggregate or change its zone.'),
        ('set_metadata', 'Set or unset metadata of a host aggregate.'),
        ('delete', 'Delete a host aggregate.'),
        ('add_host', 'Add a hypervisor to a host aggregate.'),
        ('remove_host', 'Remove a hypervisor from a host aggregate.'))
])

# An owner mark, tenks:<cluster>:<deployment uuid>[/<hostagent>]: who
# knows it can word a hostagent request for the deployment's things.
_MARK = re.compile(r'(tenks:[^:\s]+:)[0-9a-f]{8}(?:-[0-9a-f]{4}){3}'
                   r'-[0-9a-f]{12}', re.IGNORECASE)
HIDDEN = '***'


def list_rules():
    """The rules as oslo.policy defaults (also for
    oslopolicy-sample-generator, namespace ``tenks``)."""
    from oslo_policy import policy
    return [policy.RuleDefault(name, check, description=description)
            for name, (check, description) in RULES.items()]


def admin_context():
    """The context of Tenks' own CLI, which acts as admin."""
    return oslo_context.RequestContext(roles=['admin'],
                                       overwrite=False)


def service_context():
    """The context hostagents speak to the conductor with."""
    return oslo_context.RequestContext(roles=['service'],
                                       overwrite=False)


def to_dict(context):
    """``context`` (a RequestContext, a dict or None) for the bus."""
    if context is None:
        return {}
    return context if isinstance(context, dict) else context.to_dict()


def hide_deployments(data):
    """``data`` (JSON) with the deployment UUID of every owner mark in
    it replaced by ***."""
    if isinstance(data, str):
        return _MARK.sub(r'\g<1>' + HIDDEN, data)
    if isinstance(data, dict):
        return {hide_deployments(key): hide_deployments(value)
                for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [hide_deployments(value) for value in data]
    return data


def hide_deployments_in_error(error):
    """``error`` (a TenksError) again, its message and arguments without
    deployment UUIDs."""
    return type(error)(hide_deployments(str(error)),
                       **hide_deployments(error.kwargs))


class Enforcer:
    """oslo.policy's enforcer of RULES, made at the first check."""

    def __init__(self, conf):
        # Its [oslo_policy] options now (a light import), so that they
        # are read and checked with the others.
        from oslo_policy import opts
        opts.set_defaults(conf)
        self.conf = conf
        self._enforcer = None
        self._lock = threading.Lock()

    @property
    def enforcer(self):
        with self._lock:
            if self._enforcer is None:
                enforcer = _throttled_enforcer(self.conf)
                enforcer.register_defaults(list_rules())
                self._enforcer = enforcer
            return self._enforcer

    def authorize(self, action, context):
        """Raise PolicyNotAuthorized unless ``context`` (a dict off the
        bus, or a RequestContext) may do ``action``."""
        context = request_context(context)
        try:
            self.enforcer.authorize(
                action, {}, context, do_raise=True,
                exc=exceptions.PolicyNotAuthorized, action=action,
                roles=', '.join(context.roles) or 'none')
        except exceptions.PolicyNotAuthorized as e:
            LOG.warning('%s (user %s, project %s)', e, context.user_id,
                        context.project_id)
            raise

    def allows(self, action, context):
        """Whether ``context`` may do ``action``."""
        return self.enforcer.authorize(action, {},
                                       request_context(context))


# Seconds between two looks for changes of the policy file (and its
# directories).
RELOAD_INTERVAL = 1.0


def _throttled_enforcer(conf):
    """oslo.policy's Enforcer, looking for changes of the policy file at
    most every RELOAD_INTERVAL seconds. oslo.policy looks at every
    check, searching the configuration directories for the file while
    there is none: two checks per result a hostagent reports, a tenth of
    the conductor's time in a big deploy or teardown."""
    from oslo_policy import policy

    class ThrottledEnforcer(policy.Enforcer):

        _looked = None

        def load_rules(self, force_reload=False):
            now = time.monotonic()
            if (force_reload or self._looked is None or self.rules is None
                    or now - self._looked >= RELOAD_INTERVAL):
                super().load_rules(force_reload)
                self._looked = now

        def clear(self):
            super().clear()
            self._looked = None

    return ThrottledEnforcer(conf)


class InProcess:
    """The policy of a bus that only this process reaches (embedded
    mode, the in-memory transport): every call on it comes from this
    process, whose own user holds the state directory and drives the
    conductor directly, so each passes. oslo.policy, which takes a
    fifth of a second to load its checks, is not loaded."""

    def authorize(self, action, context):
        pass

    def allows(self, action, context):
        return True


def request_context(context):
    """``context`` (a dict off the bus, None or a RequestContext) as a
    RequestContext."""
    if isinstance(context, oslo_context.RequestContext):
        return context
    return oslo_context.RequestContext.from_dict(context or {})
