#!/usr/bin/python
"""Ansible module: a Tenks cluster present (deployed as a spec says) or
absent, through the ``tenks`` command."""

import json
import os

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r'''
---
module: tenks_cluster
short_description: Deploy, reconfigure or tear down a Tenks cluster
description:
  - Runs C(tenks deploy) (state present) or C(tenks teardown) (state
    absent) and returns the cluster's nodes. C(changed) is what the
    operation's record says it changed. In check mode, C(tenks plan) tells
    what a deploy would change, and nothing is made.
options:
  spec:
    description: The cluster spec, inline.
    type: dict
  spec_file:
    description: Path of a cluster spec file (YAML) on the target.
    type: path
  cluster:
    description: The cluster's name, for state absent without a spec.
    type: str
  state:
    type: str
    choices: [present, absent]
    default: present
  force:
    description: C(--force) of deploy and teardown.
    type: bool
    default: false
  executable:
    description: The tenks command (a name on PATH or a path).
    type: str
    default: tenks
  venv:
    description: A virtualenv whose bin/tenks to run (wins over executable).
    type: path
  state_dir:
    description: C(--state-dir).
    type: path
  config_files:
    description: C(--config-file), each.
    type: list
    elements: path
    default: []
  os_cloud:
    description: C(--os-cloud), the cloud to enrol nodes in.
    type: str
'''

RETURN = r'''
cluster:
  description: The cluster's name.
  type: str
nodes:
  description: The cluster's nodes when the module returns (name, uuid,
    macs, bmc_type, bmc_address, bmc_port, bmc_system_id, hypervisor,
    state...); in check mode, as they are now.
  type: list
changes:
  description: The changes the deploy made, or would make in check mode
    (node, hypervisor, resource, action, field, old, new).
  type: list
operation:
  description: The id of the deploy or teardown operation.
  type: str
'''

# What tenks names a spec that names no cluster.
DEFAULT_CLUSTER = 'default'


class Tenks:

    def __init__(self, module):
        self.module = module
        params = module.params
        if params['venv']:
            executable = os.path.join(params['venv'], 'bin', 'tenks')
        else:
            executable = module.get_bin_path(params['executable'],
                                             required=True)
        # -q: stderr gets plain progress lines, stdout only the result.
        self.argv = [executable, '-q']
        if params['state_dir']:
            self.argv += ['--state-dir', params['state_dir']]
        for path in params['config_files']:
            self.argv += ['--config-file', path]
        if params['os_cloud']:
            self.argv += ['--os-cloud', params['os_cloud']]

    def run(self, *args):
        """The command's stdout read as JSON; a failure ends the module
        with Tenks' error (and the operation's record, when it has
        one)."""
        argv = self.argv + list(args)
        rc, out, err = self.module.run_command(argv)
        try:
            data = json.loads(out) if out.strip() else None
        except ValueError:
            data = None
        if rc == 0 and data is not None:
            return data
        if isinstance(data, dict) and data.get('error'):
            msg = data['error']
        else:
            msg = err.strip() or 'tenks exited %d' % rc
        self.module.fail_json(msg=msg, rc=rc, cmd=argv, stderr=err,
                              operation=data)

    def nodes(self, cluster):
        return self.run('node', 'list', '--cluster', cluster, '-f', 'json')

    def exists(self, cluster):
        return any(c['name'] == cluster
                   for c in self.run('cluster', 'list', '-f', 'json'))


def spec_path(module):
    """The spec file to give tenks: spec_file, or the inline spec
    written (0600: it may hold BMC passwords) in the module's temporary
    directory, which Ansible removes."""
    if module.params['spec_file']:
        return module.params['spec_file']
    path = os.path.join(module.tmpdir, 'tenks-spec.yaml')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
        # JSON is YAML.
        json.dump(module.params['spec'], f)
    return path


def cluster_name(module):
    params = module.params
    if params['cluster']:
        return params['cluster']
    if params['spec'] is not None:
        return params['spec'].get('cluster', DEFAULT_CLUSTER)
    import yaml
    with open(params['spec_file']) as f:
        return (yaml.safe_load(f) or {}).get('cluster', DEFAULT_CLUSTER)


def present(module, tenks):
    path = spec_path(module)
    force = ['--force'] if module.params['force'] else []
    if module.check_mode:
        cluster = cluster_name(module)
        changes = tenks.run('plan', path, '-f', 'json', *force)
        return dict(changed=bool(changes), changes=changes, cluster=cluster,
                    nodes=tenks.nodes(cluster))
    record = tenks.run('deploy', path, '--yes', '-f', 'json', *force)
    result = record['result']
    for warning in result.get('warnings', []):
        module.warn(warning)
    changes = result.get('plan') or []
    return dict(changed=bool(result['changed'] or changes), changes=changes,
                operation=record['id'], cluster=record['cluster'],
                nodes=tenks.nodes(record['cluster']))


def absent(module, tenks):
    cluster = cluster_name(module)
    if not tenks.exists(cluster):
        return dict(changed=False, cluster=cluster, nodes=[])
    if module.check_mode:
        return dict(changed=True, cluster=cluster, nodes=tenks.nodes(cluster))
    force = ['--force'] if module.params['force'] else []
    record = tenks.run('teardown', cluster, '-f', 'json', *force)
    for warning in record['result'].get('warnings', []):
        module.warn(warning)
    return dict(changed=bool(record['result']['changed']), cluster=cluster,
                nodes=[], operation=record['id'])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            spec=dict(type='dict'),
            spec_file=dict(type='path'),
            cluster=dict(type='str'),
            state=dict(type='str', choices=['present', 'absent'],
                       default='present'),
            force=dict(type='bool', default=False),
            executable=dict(type='str', default='tenks'),
            venv=dict(type='path'),
            state_dir=dict(type='path'),
            config_files=dict(type='list', elements='path', default=[]),
            os_cloud=dict(type='str'),
        ),
        mutually_exclusive=[('spec', 'spec_file')],
        required_if=[('state', 'present', ('spec', 'spec_file'), True),
                     ('state', 'absent', ('spec', 'spec_file', 'cluster'),
                      True)],
        supports_check_mode=True,
    )
    apply = present if module.params['state'] == 'present' else absent
    module.exit_json(**apply(module, Tenks(module)))


if __name__ == '__main__':
    main()
