"""The OpenStack cloud the nodes are enrolled in: Ironic, Nova, Placement.

One openstacksdk connection, made on first use, from a clouds.yaml cloud
or from standalone endpoints without Keystone ([openstack] options).
Credentials stay in openstacksdk; nothing here logs them. openstacksdk
is imported on first use: it takes a third of a second, and only a
deploy that enrols nodes needs it.
"""

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


class Cloud:

    def __init__(self, conf):
        self.conf = conf.openstack
        self._connection = None
        self._lock = threading.Lock()

    @property
    def connection(self):
        with self._lock:
            if self._connection is None:
                self._connection = self._connect()
            return self._connection

    def _connect(self):
        import openstack
        from keystoneauth1 import noauth
        from keystoneauth1 import session as ksa_session
        if self.conf.cloud:
            return openstack.connect(cloud=self.conf.cloud)
        session = ksa_session.Session(auth=noauth.NoAuth(),
                                      additional_headers=STANDALONE_HEADERS)
        return openstack.connection.Connection(
            session=session,
            **{'%s_endpoint_override' % service: self.conf[option]
               for service, (_, option) in SERVICES.items()
               if self.conf[option]})

    def endpoint(self, service):
        try:
            return self.connection.endpoint_for(service)
        except Exception:
            return None

    def check(self, services):
        """Raise CloudUnavailable unless every service answers."""
        from keystoneauth1 import exceptions as ksa_exceptions
        for service in services:
            name, option = SERVICES[service]
            endpoint = self.endpoint(service)
            if endpoint is None:
                raise exceptions.CloudUnavailable(
                    service=name, endpoint='(none configured)',
                    reason='set [openstack] cloud, or %s' % option)
            try:
                self.connection.session.get(endpoint, raise_exc=False,
                                            timeout=10)
            except ksa_exceptions.ConnectionError as e:
                raise exceptions.CloudUnavailable(
                    service=name, endpoint=endpoint, reason=str(e)) from e


def sdk_exceptions():
    """openstacksdk's exceptions module, imported when first needed."""
    from openstack import exceptions as sdk
    return sdk
