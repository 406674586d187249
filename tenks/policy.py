"""Who may call what: oslo.policy rules on the caller's request context.

Aggregates and the state of a hypervisor are for admins, as in Nova:
the calls of the conductor RPC API that change or show them carry the
caller's oslo.context request context (with its roles), and a service
that forwards a user's context is refused unless the rules allow it.
The rules can be changed in a policy file ([oslo_policy] policy_file).
"""

import threading

from oslo_context import context as oslo_context

from tenks import exceptions

ADMIN = 'rule:context_is_admin'

# name -> (check string, description). oslo.policy is imported only where
# a rule is checked: it brings requests along, a tenth of a second that
# every command would otherwise pay at start.
RULES = dict([
    ('context_is_admin', ('role:admin', 'Who counts as an admin.')),
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
] + [
    ('tenks:hypervisor:update', (ADMIN, 'Enable or disable a hypervisor.')),
    ('tenks:hypervisor:maintenance', (
        ADMIN, 'Put a hypervisor into maintenance, moving its nodes away, '
               'or take it out.')),
])


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


def to_dict(context):
    """``context`` (a RequestContext, a dict or None) for the bus."""
    if context is None:
        return {}
    return context if isinstance(context, dict) else context.to_dict()


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
                from oslo_policy import policy
                enforcer = policy.Enforcer(self.conf)
                enforcer.register_defaults(list_rules())
                self._enforcer = enforcer
            return self._enforcer

    def authorize(self, action, context):
        """Raise PolicyNotAuthorized unless the context (a dict off the
        bus) may do ``action``."""
        context = oslo_context.RequestContext.from_dict(context or {})
        self.enforcer.authorize(
            action, {}, context, do_raise=True,
            exc=exceptions.PolicyNotAuthorized, action=action)
