"""The OpenStack cloud the nodes are enrolled in: Ironic, Nova, Placement.

One openstacksdk connection, made on first use. Which cloud, first match
wins:

1. ``[openstack] cloud`` (the ``tenks --os-cloud`` option sets it): a
   cloud of clouds.yaml;
2. the standalone endpoints (``[openstack] ironic_url``, ``nova_url``,
   ``placement_url``): services without Keystone;
3. whatever the ``openstack`` CLI would use: ``OS_CLOUD``, the openrc
   variables (``OS_AUTH_URL``, ..., ``OS_AUTH_TYPE=none`` with
   ``OS_BAREMETAL_ENDPOINT_OVERRIDE``...), or the only cloud of
   clouds.yaml, read by openstacksdk's own loader (standard search path,
   ``OS_CLIENT_CONFIG_FILE`` included).

A cloud of clouds.yaml (1. or 3.) is completed by the OS_* variables the
way the ``openstack`` CLI completes it: through the defaults of
openstacksdk's argparse options, so ``OS_CLOUD=mycloud OS_PASSWORD=...``
brings the password that clouds.yaml leaves out.

Credentials stay in openstacksdk; nothing here logs them. openstacksdk
is imported on first use: it takes a third of a second, and only a
deploy that enrols nodes needs it.
"""

import argparse
import contextlib
import functools
import os
import threading

from tenks import exceptions

# What a standalone Nova and Placement without Keystone trust.
STANDALONE_HEADERS = {
    'X-Auth-Token': 'admin',
    'X-User-Id': 'tenks',
    'X-Project-Id': 'tenks',
    'X-Roles': 'admin',
}
# openstacksdk service -> (its name, [openstack] option of its endpoint)
SERVICES = {'baremetal': ('Ironic', 'ironic_url'),
            'compute': ('Nova', 'nova_url'),
            'placement': ('Placement', 'placement_url')}
HOW_TO_CONFIGURE = ('set OS_CLOUD (or tenks --os-cloud, or [openstack] '
                    'cloud), the openrc variables, or [openstack] %s')


class Cloud:

    def __init__(self, conf):
        self.conf = conf.openstack
        self._connection = None
        self._lock = threading.Lock()

    @property
    def connection(self):
        """The connection; ConfigError names the cloud that is wrong."""
        with self._lock:
            if self._connection is None:
                self._connection = self._connect()
            return self._connection

    @property
    def configured(self):
        """Whether any of the three ways above names a cloud."""
        return self.source is not None

    @functools.cached_property
    def source(self):
        """((kind, what to connect to), where that came from), or None."""
        if self.conf.cloud:
            return ('cloud', (None, self.conf.cloud)), (
                'cloud %s of clouds.yaml ([openstack] cloud)'
                % self.conf.cloud)
        if any(self.conf[option] for _, option in SERVICES.values()):
            return ('standalone', None), 'the [openstack] endpoints'
        from openstack.config import loader as sdk_loader
        try:
            config = sdk_loader.OpenStackConfig()
        except Exception as e:
            raise exceptions.ConfigError(
                reason='cannot read clouds.yaml: %s' % e) from e
        name = config.default_cloud
        # openstacksdk falls back to an empty cloud called "defaults"
        # when neither clouds.yaml nor OS_* variables say anything.
        if name is None or (name == 'defaults'
                            and os.environ.get('OS_CLOUD') != 'defaults'):
            return None
        if name == config.envvar_key:
            return ('loader', (config, name)), 'the OS_* environment variables'
        return ('loader', (config, name)), 'cloud %s of clouds.yaml' % name

    def _connect(self):
        import openstack
        source = self.source
        if source is None:
            raise exceptions.ConfigError(
                reason='no OpenStack cloud is configured: %s'
                % HOW_TO_CONFIGURE % 'ironic_url')
        (kind, what), described = source
        if kind == 'standalone':
            from keystoneauth1 import noauth
            from keystoneauth1 import session as ksa_session
            session = ksa_session.Session(
                auth=noauth.NoAuth(), additional_headers=STANDALONE_HEADERS)
            return resend_when_dropped(openstack.connection.Connection(
                session=session,
                **{'%s_endpoint_override' % service: self.conf[option]
                   for service, (_, option) in SERVICES.items()
                   if self.conf[option]}))
        config, name = what
        try:
            if config is None:
                from openstack.config import loader as sdk_loader
                config = sdk_loader.OpenStackConfig()
            # What the openstack CLI does: options whose defaults are the
            # OS_* variables, merged over the named cloud.
            argv = ['--os-cloud', name]
            parser = argparse.ArgumentParser(add_help=False)
            config.register_argparse_arguments(parser, argv)
            options, _ = parser.parse_known_args(argv)
            conn = openstack.connection.Connection(
                config=config.get_one(argparse=options))
        except Exception as e:
            # ConfigException (no such cloud) or keystoneauth's
            # MissingRequiredOptions (an openrc without a password...).
            raise exceptions.ConfigError(
                reason='cannot use %s: %s' % (described, e)) from e
        return resend_when_dropped(conn)

    def endpoint(self, service):
        """The endpoint of ``service``, or None when the catalogue has none.

        CloudUnavailable when Keystone cannot be reached or refuses the
        credentials: the catalogue cannot be read then.
        """
        from keystoneauth1 import exceptions as ksa_exceptions
        from openstack import exceptions as sdk
        connection = self.connection
        try:
            return connection.endpoint_for(service)
        except (sdk.EndpointNotFound, ksa_exceptions.EndpointNotFound):
            return None
        except (ksa_exceptions.ClientException, sdk.SDKException) as e:
            auth = connection.config.config.get('auth') or {}
            raise exceptions.CloudUnavailable(
                service='Keystone',
                endpoint=auth.get('auth_url') or '(no auth_url)',
                reason='%s (%s)' % (e, self.source[1])) from e

    def check(self, services):
        """Raise CloudUnavailable unless every service answers."""
        if not services:
            return
        from keystoneauth1 import exceptions as ksa_exceptions
        for service in services:
            name, option = SERVICES[service]
            if not self.configured:
                raise exceptions.CloudUnavailable(
                    service=name, endpoint='(none configured)',
                    reason=HOW_TO_CONFIGURE % option)
            endpoint = self.endpoint(service)
            if endpoint is None:
                raise exceptions.CloudUnavailable(
                    service=name, endpoint='(none configured)',
                    reason='%s has no %s endpoint; %s'
                    % (self.source[1], service,
                       HOW_TO_CONFIGURE % option))
            try:
                self.connection.session.get(endpoint, raise_exc=False,
                                            timeout=10)
            except ksa_exceptions.ConnectionError as e:
                raise exceptions.CloudUnavailable(
                    service=name, endpoint=endpoint, reason=str(e)) from e

    def check_ironic_drivers(self, wanted):
        """Raise IronicDriverMissing unless Ironic enables every
        hardware type of ``wanted`` ({driver: [where the spec asks for
        it]}): one list of Ironic's drivers."""
        if not wanted:
            return
        enabled = sorted(d.name for d in self.connection.baremetal.drivers())
        missing = {d: where for d, where in wanted.items()
                   if d not in enabled}
        if missing:
            raise exceptions.IronicDriverMissing(
                endpoint=self.endpoint('baremetal'),
                missing='; '.join(
                    '%s (%s)' % (d, exceptions.first_of(where, 3, ', '))
                    for d, where in sorted(missing.items())),
                enabled=', '.join(enabled) or 'none')


# A server closes a kept-alive connection once it has been idle for a
# while (gunicorn after 2 s, Apache after 5). A request sent on it just
# then fails with "Connection aborted" although the server never read it.
DROPPED_RESENDS = 2


def resend_when_dropped(conn):
    """``conn``, whose requests of an idempotent method (GET, PUT,
    DELETE...) are sent again, up to DROPPED_RESENDS times, when the
    connection closes under them. A POST or PATCH is not: its caller
    knows whether sending it again is safe (see ironic.enrol)."""
    from urllib3 import exceptions as urllib3_exceptions
    from urllib3.util import retry

    class Resend(retry.Retry):
        def increment(self, method=None, url=None, response=None,
                      error=None, _pool=None, _stacktrace=None):
            # Not after a read timeout: the server may still be at the
            # request, and the caller's timeout means what it says.
            if isinstance(error, urllib3_exceptions.ReadTimeoutError):
                raise error
            return super().increment(method, url, response, error, _pool,
                                     _stacktrace)

    # Nothing else changes: no retry on refused connections (keystoneauth's
    # connect_retries says that), on statuses or after a Retry-After
    # (keystoneauth retries 409 and 503 itself).
    policy = Resend(total=None, connect=0, read=DROPPED_RESENDS, redirect=0,
                    status=0, other=0, respect_retry_after_header=False)
    for adapter in conn.session.session.adapters.values():
        adapter.max_retries = policy
    return conn


@contextlib.contextmanager
def named_errors(service, action):
    """openstacksdk's and keystoneauth's errors inside, as Tenks errors
    naming ``service`` and ``action``: CloudUnreachable when no answer
    came (refused, dropped, or no version document where the endpoint
    should be: the first request of a connection discovers it),
    CloudError when the service refused."""
    from keystoneauth1 import exceptions as ksa_exceptions
    try:
        yield
    except (ksa_exceptions.ConnectionError,
            ksa_exceptions.DiscoveryFailure) as e:
        raise exceptions.CloudUnreachable(
            service=service, action=action, reason=str(e)) from e
    except (ksa_exceptions.ClientException,
            sdk_exceptions().SDKException) as e:
        raise exceptions.CloudError(
            service=service, action=action, reason=str(e)) from e


def sdk_exceptions():
    """openstacksdk's exceptions module, imported when first needed."""
    from openstack import exceptions as sdk
    return sdk
