"""Who may call what: oslo.policy rules on the caller's request context.

Aggregates and the state of a hypervisor are for admins, as in Nova:
the calls of the conductor RPC API that change or show them carry the
caller's oslo.context request context (with its roles), and a service
that forwards a user's context is refused unless the rules allow it.
The rules can be changed in a policy file ([oslo_policy] policy_file).
"""

from oslo_context import context as oslo_context
from oslo_policy import policy

from tenks import exceptions

ADMIN = 'rule:context_is_admin'

RULES = [
    policy.RuleDefault('context_is_admin', 'role:admin',
                       description='Who counts as an admin.'),
] + [
    policy.RuleDefault('tenks:aggregate:%s' % action, ADMIN,
                       description=description)
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
    policy.RuleDefault('tenks:hypervisor:update', ADMIN,
                       description='Enable or disable a hypervisor.'),
]


def list_rules():
    """For oslo-policy-sample-generator (namespace ``tenks``)."""
    return RULES


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

    def __init__(self, conf):
        self.enforcer = policy.Enforcer(conf)
        self.enforcer.register_defaults(RULES)

    def authorize(self, action, context):
        """Raise PolicyNotAuthorized unless the context (a dict off the
        bus) may do ``action``."""
        context = oslo_context.RequestContext.from_dict(context or {})
        self.enforcer.authorize(
            action, {}, context, do_raise=True,
            exc=exceptions.PolicyNotAuthorized, action=action)
