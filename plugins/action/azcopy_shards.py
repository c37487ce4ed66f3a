# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin: plan each node's shard of a data set for azcopy staging (runs on the controller).

Documentation: plugins/modules/azcopy_shards.py (the action-only plugin's doc stub).
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_cmd import auth_argument_spec
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_model import predict, rates_from
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.azcopy_sas import check_sas, redact, sas_argv_warning
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.sdk.blob_listing import (
    ContainerMissing,
    ListingError,
    identity_credential,
    list_blobs,
)
from ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc.staging.shards import (
    MODES,
    ShardError,
    empty_source_error,
    moved_files,
    plan_shards,
    plan_shards_without,
    plan_summary,
)

_ARGS = {
    "hosts": {"type": "list", "elements": "str"},
    "exclude": {"type": "list", "elements": "str", "default": []},
    "mode": {"type": "str", "default": "suffix", "choices": list(MODES)},
    "account_url": {"type": "str"},
    "container": {"type": "str"},
    "prefix": {"type": "str", "default": ""},
    **auth_argument_spec(),
    "model": {"type": "dict", "default": {}},
    "list": {"type": "bool", "default": True},
    "allow_idle": {"type": "bool", "default": False},
    "allow_empty": {"type": "bool", "default": False},
}


def ranked_hosts(task_vars: dict[str, Any]) -> list[str]:
    """The play's hosts in (cluster, rank) order."""
    hosts = list(task_vars.get("ansible_play_hosts_all") or task_vars.get("ansible_play_hosts") or [])
    hostvars = task_vars.get("hostvars", {})

    def key(h: str) -> tuple[str, int, str]:
        hv = hostvars.get(h, {})
        return (str(hv.get("aml_cluster", "")), int(hv.get("aml_node_rank", 0)), h)

    return sorted(hosts, key=key)


class ActionModule(ActionBase):
    """Plan the shards; the result is meant to be registered (run_once) and read per host."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _unused, args = self.validate_argument_spec(argument_spec=_ARGS)
        excluded = list(args["exclude"])
        hosts = args["hosts"]
        if not hosts:  # a node the gate left out may be gone from the play: the plan over every node needs it
            play = list(task_vars.get("ansible_play_hosts_all") or task_vars.get("ansible_play_hosts") or [])
            hosts = ranked_hosts({"ansible_play_hosts_all": [*play, *(h for h in excluded if h not in play)],
                                  "hostvars": task_vars.get("hostvars", {})})
        mode = args["mode"]
        auth = args["auth"]
        sas = (args["sas"] or "") if auth == "sas" else ""
        warnings: list[str] = []
        argv_warning = sas_argv_warning(auth, args["account_url"] or "")
        if argv_warning:
            warnings.append(argv_warning)
        listing = None
        no_container = False
        if args["list"] or mode == "balanced":
            missing = [k for k in ("account_url", "container") if not args[k]]
            if missing:
                raise AnsibleActionFail(f"azcopy_shards needs {' and '.join(missing)} to list the container")
            if sas:
                check = check_sas(sas, "rl")
                if check.errors:
                    raise AnsibleActionFail(" ".join(check.errors))
                warnings += check.warnings
            secrets = [x for x in (sas, args["client_secret"]) if x]
            # The failure is raised after the except block: an AnsibleActionFail made inside one
            # records the traceback of the exception handled (ansible-core 2.18 shows it at -vvv),
            # whose message is not redacted.
            failure = None
            try:
                credential = sas or None
                if auth != "sas":
                    credential = identity_credential(auth, msi_client_id=args["msi_client_id"],
                                                     tenant_id=args["tenant_id"], client_id=args["client_id"],
                                                     client_secret=args["client_secret"] or "")
                listing = list_blobs(args["account_url"], args["container"], args["prefix"], credential=credential)
            except ContainerMissing as exc:
                if not self._task.check_mode:
                    failure = redact(str(exc), secrets)
                # check mode: a run would make and fill it first (prepare_dataset) or stop here
                warnings.append(redact(f"check mode: {exc}: no shard to plan yet", secrets))
                listing, no_container = [], True
            except Exception as exc:  # pylint: disable=broad-exception-caught  # any error may quote the URL
                failure = redact(str(exc) if isinstance(exc, (ListingError, ValueError))
                                 else f"listing the container failed: {type(exc).__name__}: {exc}", secrets)
            if failure is not None:
                raise AnsibleActionFail(failure)
            # (a missing container, in check mode, was warned about just above)
            refused = None if no_container else empty_source_error(listing, args["container"], args["prefix"],
                                                                   args["allow_empty"])
            if refused and not self._task.check_mode:
                raise AnsibleActionFail(refused)
            if refused:  # check mode removes nothing; the data set may be uploaded by this run first
                warnings.append(f"check mode: {refused}")
        try:
            shards = plan_shards_without(hosts, excluded, mode, listing, allow_idle=args["allow_idle"])
            whole = plan_shards(hosts, mode, listing, allow_idle=args["allow_idle"]) if excluded else shards
        except ShardError as exc:
            raise AnsibleActionFail(str(exc)) from None
        plan = plan_summary(shards, mode, listed=listing is not None)
        plan["excluded"] = [h for h in hosts if h in set(excluded)]
        # What leaving the nodes out moves: {to host: {from host: blob names}} (suffix mode with no
        # listing: the suffixes), for the plan's line and check mode.
        if listing is None:
            owner = {x: s.host for s in whole for x in s.suffixes}
            plan["moved"] = {}
            for shard in shards:
                for x in shard.suffixes:
                    if owner[x] != shard.host:
                        plan["moved"].setdefault(shard.host, {}).setdefault(owner[x], []).append(f"{x:03d}")
        else:
            plan["moved"] = moved_files(whole, shards)
        plan["moved_files"] = sum(len(v) for to in plan["moved"].values() for v in to.values())
        try:
            rates = rates_from(args["model"])
        except ValueError as exc:
            raise AnsibleActionFail(str(exc)) from None
        plan["prediction"] = (predict([s.bytes for s in shards], [s.raw_bytes for s in shards], rates)
                              if listing is not None else {})
        if listing is not None and not listing and args["allow_empty"]:
            warnings.append(f"container {args['container']!r} has no blobs under prefix {args['prefix']!r}: "
                            "every shard is empty")
        if plan["idle_hosts"] and listing:
            warnings.append(f"{len(plan['idle_hosts'])} host(s) get no data: {', '.join(plan['idle_hosts'][:5])}")
        for w in warnings:
            self._display.warning(w)
        result.update(plan)
        result["changed"] = False
        result["hosts"] = hosts
        result["sas_warnings"] = warnings
        return result
