# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Inventory plugin: YAML inventories, leaving plugin configuration files to their plugin."""

from __future__ import annotations

DOCUMENTATION = r"""
name: amlhpc_yaml
short_description: YAML inventory files (ansible.builtin.yaml), except plugin configuration files
version_added: "1.0.0"
description:
  - The builtin C(yaml) inventory plugin, except that it declines files whose names end in
    C(.azureml_compute.yml) or C(.azureml_compute.yaml), which are configuration files of the
    azureml_compute plugin, not YAML inventories.
  - The builtin plugin attempts every C(.yml) file; when a broken C(*.azureml_compute.yml)
    fails in its own plugin, the builtin one then adds an unrelated error
    ("Plugin configuration YAML file, not YAML inventory") to the real one. With this plugin
    in C(enable_plugins) instead, the real error is the only one shown.
options:
  yaml_extensions:
    description: Extensions of the files read as YAML (as for ansible.builtin.yaml).
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
# enable_plugins = azureml_compute, amlhpc_yaml, host_list
"""

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory.yaml import InventoryModule as YamlInventoryModule
from ansible.release import __version__ as ansible_core_version

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.core_range import core_floor_error

# Files that belong to another plugin by their name.
PLUGIN_CONFIG_SUFFIXES = (".azureml_compute.yml", ".azureml_compute.yaml")


class InventoryModule(YamlInventoryModule):
    """amlhpc_yaml inventory plugin."""

    NAME = "amlhpc.azureml.amlhpc_yaml"

    def verify_file(self, path: str) -> bool:
        if str(path).endswith(PLUGIN_CONFIG_SUFFIXES):
            return False
        return super().verify_file(path)

    def parse(self, inventory, loader, path, cache=True):
        refused = core_floor_error(ansible_core_version)
        if refused:
            raise AnsibleParserError(refused)
        super().parse(inventory, loader, path, cache)
