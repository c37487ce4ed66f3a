# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Inventory plugin: YAML inventories, leaving plugin configuration files to their plugin."""

from __future__ import annotations

DOCUMENTATION = r"""
name: amlhpc_yaml
short_description: YAML inventory files (as ansible.builtin.yaml reads them), except plugin configuration files
version_added: "1.0.0"
description:
  - Reads YAML inventories in the format of the builtin C(yaml) inventory plugin - top-level groups,
    each with C(hosts) (host patterns such as C(node[1:4]) or C(host:2222), each with its variables),
    C(vars) and C(children) - except that it declines files whose names end in
    C(.azureml_compute.yml) or C(.azureml_compute.yaml), which are configuration files of the
    azureml_compute plugin, not YAML inventories.
  - The builtin plugin attempts every C(.yml) file; when a broken C(*.azureml_compute.yml)
    fails in its own plugin, the builtin one then adds an unrelated error
    ("Plugin configuration YAML file, not YAML inventory") to the real one. With this plugin
    in C(enable_plugins) instead of C(yaml), the real error is the only one shown.
  - Since 2.2.0 it reads the file itself through ansible-core's public inventory-plugin interface
    (the base file plugin, the data loader, the inventory's add and set calls); it is no longer
    a subclass of the builtin plugin.
options:
  yaml_extensions:
    description: Extensions of the files read as YAML (as for ansible.builtin.yaml); a file without one is read too.
    type: list
    elements: string
    default: ['.yaml', '.yml', '.json']
    env:
      - name: ANSIBLE_YAML_FILENAME_EXT
      - name: ANSIBLE_INVENTORY_PLUGIN_EXTS
    ini:
      - key: yaml_valid_extensions
        section: defaults
      - section: inventory_plugin_yaml
        key: yaml_valid_extensions
"""

EXAMPLES = r"""
# ansible.cfg
# [inventory]
# enable_plugins = amlhpc.azureml.azureml_compute, amlhpc.azureml.amlhpc_yaml, host_list
"""

import inspect
import os
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.module_utils.ansible_release import __version__ as ansible_core_version
from ansible.plugins.inventory import BaseFileInventoryPlugin

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.core_range import core_floor_error

# Files that belong to another plugin by their name.
PLUGIN_CONFIG_SUFFIXES = (".azureml_compute.yml", ".azureml_compute.yaml")
SECTIONS = ("hosts", "vars", "children")


class InventoryModule(BaseFileInventoryPlugin):
    """amlhpc_yaml inventory plugin."""

    NAME = "amlhpc.azureml.amlhpc_yaml"

    def verify_file(self, path: str) -> bool:
        if str(path).endswith(PLUGIN_CONFIG_SUFFIXES) or not super().verify_file(path):
            return False
        ext = os.path.splitext(path)[1]
        return not ext or ext in self.get_option("yaml_extensions")

    def _load(self, path: str) -> Any:
        """The file's data; on ansible-core 2.19 and later marked as the inventory's own, whose
        templates ({{ ansible_playbook_python }}) may be rendered, as the builtin plugin marks it."""
        trusted = {"trusted_as_template": True} \
            if "trusted_as_template" in inspect.signature(self.loader.load_from_file).parameters else {}
        try:
            return self.loader.load_from_file(path, cache="none", **trusted)
        except Exception as exc:
            raise AnsibleParserError(f"{path}: {exc}") from exc

    def parse(self, inventory: Any, loader: Any, path: str, cache: bool = True) -> None:
        refused = core_floor_error(ansible_core_version)
        if refused:
            raise AnsibleParserError(refused)
        super().parse(inventory, loader, path, cache)
        self.set_options()
        data = self._load(path)
        if not data:
            raise AnsibleParserError(f"{path}: an empty YAML file is no inventory")
        if not isinstance(data, Mapping):
            raise AnsibleParserError(f"{path}: a YAML inventory is a mapping of groups, not a {type(data).__name__}")
        if data.get("plugin"):
            raise AnsibleParserError(f"{path}: a configuration file of the {data['plugin']} plugin, not a YAML "
                                     "inventory; enable that plugin in ansible.cfg's [inventory] enable_plugins")
        for name, group in data.items():
            self._group(name, group)

    def _group(self, name: Any, body: Any) -> str | None:
        """Add group ``name`` (its hosts, variables and child groups); returns its name as added."""
        if body is not None and not isinstance(body, Mapping):
            self.display.warning(f"Skipping '{name}' as this is not a valid group definition")
            return None
        try:
            group = self.inventory.add_group(name)
        except AnsibleError as exc:
            raise AnsibleParserError(f"Unable to add group {name}: {exc}") from exc
        for key, value in (body or {}).items():
            if isinstance(value, str) and key in SECTIONS:
                value = {value: None}  # "hosts: node1" is short for "hosts: {node1: }"
            if value is None:
                continue
            if not isinstance(value, Mapping):
                if key in SECTIONS:
                    raise AnsibleParserError(f'Invalid "{key}" entry for "{group}" group, requires a dictionary, '
                                             f'found "{type(value)}" instead.')
                self.display.warning(f"Skipping key ({key}) in group ({group}) as it is not a mapping")
                continue
            if key == "vars":
                for var, var_value in value.items():
                    self.inventory.set_variable(group, var, var_value)
            elif key == "children":
                for child, child_body in value.items():
                    added = self._group(child, child_body)
                    if added is not None:
                        self.inventory.add_child(group, added)
            elif key == "hosts":
                for pattern, host_vars in value.items():
                    if not isinstance(pattern, str):
                        raise AnsibleParserError(f"Host pattern {pattern} must be a string. Enclose integers/floats "
                                                 "in quotation marks.")
                    hosts, port = self._expand_hostpattern(pattern)
                    self._populate_host_vars(hosts, host_vars or {}, group, port)
            else:
                self.display.warning(f'Skipping unexpected key ({key}) in group ({group}), only "vars", "children" '
                                     'and "hosts" are valid')
        return group
