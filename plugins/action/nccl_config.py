# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin of amlhpc.azureml.nccl_config: reads the user's topology file on the
controller, reads the node with one shell command and, where the module would write nothing,
returns the module's result for that case without running it (module_utils/amlhpc/nccl_read.py;
the VM size must be known, as the inventory plugin gives it: the instance metadata is the
module's to ask); otherwise runs the module on the node (one module run). It makes the facts it returns
host variables of the play, as ansible.builtin.set_fact does (not cached), so that no
set_fact task per node is needed. Where the play imported the role without Ansible's own
argument check, it checks the role's variables first (plugin_utils/role_args.py)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import VariableLayer

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.nccl_read import (
    CONFIG_ARGUMENT_SPEC,
    read_command,
    unchanged_outcome,
)
from ansible_collections.amlhpc.azureml.plugins.plugin_utils.role_args import RoleCheckedAction


class ActionModule(RoleCheckedAction):
    """Run nccl_config on the node; its facts become host variables."""

    def run_checked(self, result: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
        args = dict(self._task.args)
        src = args.get("topo_file_src") or ""
        if src and args.get("topo_file_content") is None:
            try:
                path = self._find_needle("files", src)
                with open(path, encoding="utf-8") as fh:
                    args["topo_file_content"] = fh.read()
            except (AnsibleError, OSError, UnicodeDecodeError) as exc:
                raise AnsibleActionFail(f"nccl_topo_file_src {src!r}: {exc}") from exc
        unchanged = self._unchanged(args)
        if unchanged is not None:
            result.update(unchanged)
        else:
            result.update(self._execute_module(module_name="amlhpc.azureml.nccl_config", module_args=args,
                                               task_vars=task_vars))
        facts = result.get("facts")
        self.register_host_variables({}, VariableLayer.CACHEABLE_FACT)  # facts of the play, never cached
        if isinstance(facts, dict) and not result.get("failed"):
            self.register_host_variables(facts, VariableLayer.EPHEMERAL_FACT)
        return result

    def _unchanged(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The module's result when one shell read of the node shows nothing to write, else None."""
        if any(str(args.get(k) or "").startswith("~") for k in ("topo_file_dest", "conf_path", "env_path")):
            return None  # a path under a home folder is the node's to expand
        checked = ArgumentSpecValidator(CONFIG_ARGUMENT_SPEC).validate(args)
        if checked.error_messages:
            return None  # the module refuses them, in its own words
        params = checked.validated_parameters
        if params["imds"] and not params["vm_size"]:
            return None  # the module asks the instance metadata
        read = self._low_level_execute_command(read_command(params), sudoable=True)
        if read.get("rc") != 0:
            return None
        outcome = unchanged_outcome(params, read.get("stdout", ""))
        if outcome is not None:
            outcome["invocation"] = {"module_args": {k: v for k, v in params.items() if k != "topo_file_content"}}
        return outcome
