"""Values of the CLI's tables: data for ``-f json|yaml``, readable text
for ``-f table|value|csv`` (cliff's FormattableColumn)."""

import json

from cliff import columns


def _text(value):
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


class ListColumn(columns.FormattableColumn):
    """A list: its items separated by commas, mappings one per line."""

    def human_readable(self):
        if any(isinstance(item, dict) for item in self._value):
            return '\n'.join(DictColumn(item).human_readable()
                             for item in self._value)
        return ', '.join(map(_text, self._value))


class DictColumn(columns.FormattableColumn):
    """A mapping: key=value pairs, keys sorted."""

    def human_readable(self):
        return ', '.join('%s=%s' % (key, _text(value))
                         for key, value in sorted(self._value.items()))


class ProgressColumn(columns.FormattableColumn):
    """An operation's progress, {stage: [done, total]}."""

    def human_readable(self):
        return ', '.join('%s %d/%d' % (stage, done, total) for stage,
                         (done, total) in sorted(self._value.items()))


class SpecColumn(columns.FormattableColumn):
    """A cluster spec: YAML, as it was written."""

    def human_readable(self):
        import yaml  # only for a table, where the spec is shown
        return yaml.safe_dump(self._value, default_flow_style=False,
                              sort_keys=False).rstrip()
