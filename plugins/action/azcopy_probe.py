# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.azcopy_probe: the stage role's first task on a node. On the
controller: the stage's inputs (a shard in the plan, a SAS with auth sas); then the module on
the node (the azcopy probe and the install decision, never the shard or a secret). The result
carries the module's answers (``needed``, ``src_kind``) and the node's ``shard``."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_install import stage_input_error


class ActionModule(ActionBase):
    """Check the stage's inputs, then probe azcopy on the node."""

    TRANSFERS_FILES = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        shard = args.pop("shard", None)
        auth = args.get("auth", "sas")
        host = str((task_vars or {}).get("inventory_hostname", ""))
        error = stage_input_error(host, shard, auth, boolean(args.pop("has_sas", False)))
        if error:
            result.update(failed=True, msg=error)
            return result
        result.update(self._execute_module(module_name="amlhpc.azureml.azcopy_probe", module_args=args,
                                           task_vars=task_vars))
        if not result.get("failed"):
            result["shard"] = shard
        return result
