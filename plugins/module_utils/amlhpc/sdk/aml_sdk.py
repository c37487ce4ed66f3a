# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The Azure SDK connections of the azureml_compute plugin and the aml_compute_cluster and
aml_job modules: one place that turns an ``AuthPlan`` into a credential and a workspace.

This file and the job runners (``aml_job_v1``, ``aml_job_v2``, which get their workspace
and ``MLClient`` from here) are the only ones that talk to Azure. Both SDKs are imported lazily, inside the
functions, so a missing SDK is one clear sentence and the tests can put fakes in at the
SDK boundary (``azureml.core.Workspace``, ``azureml.core.compute.AmlCompute``,
``azure.ai.ml.MLClient``) without touching anything else.

* ``azureml-core`` (SDK v1): ``Workspace`` + ``AmlCompute(ws, name)`` + ``list_nodes()``.
* ``azure-ai-ml`` (SDK v2): ``MLClient`` + ``compute.get`` + ``compute.list_nodes``. The
  node objects of azure-ai-ml 1.35.x carry their data only under camelCase keys
  (see ``aml_nodes.record_from_object``), which is read here explicitly.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ..azure.aml_nodes import (
    AmlNodesError,
    AuthPlan,
    ClusterInfo,
    ClusterSpec,
    auth_failed,
    cluster_not_found,
    not_amlcompute,
    record_from_object,
    sdk_missing,
    subnet_parts,
    workspace_not_found,
)
from ..validate.azure_ids import workspace_problems


def token_scope(resource: str) -> str:
    """azure-identity's scope for a resource URI (azureml-core asks for tokens by resource)."""
    return resource.rstrip("/") + "/.default"


class IdentityTokens:
    """azureml-core's ``get_token_for_audience`` from an azure-identity credential."""

    def __init__(self, credential: Any) -> None:
        self.credential = credential

    def __call__(self, audience: str) -> str:
        return self.credential.get_token(token_scope(audience)).token


def identity_credential(plan: AuthPlan, **pipeline: Any) -> Any:
    """azure-identity's credential for ``plan``, against its cloud's login authority.
    ``pipeline``: azure-core pipeline options of the credential's HTTP requests (``transport``)."""
    from azure import identity
    authority = plan.cloud_info.authority
    if plan.kind == "secret":
        return identity.ClientSecretCredential(tenant_id=plan.tenant, client_id=plan.client_id,
                                               client_secret=plan.secret, authority=authority, **pipeline)
    if plan.kind == "certificate":
        return identity.CertificateCredential(tenant_id=plan.tenant, client_id=plan.client_id,
                                              certificate_path=plan.certificate_path,
                                              password=plan.certificate_password, authority=authority, **pipeline)
    if plan.kind == "workload_identity":
        return identity.WorkloadIdentityCredential(tenant_id=plan.tenant, client_id=plan.client_id,
                                                   token_file_path=plan.federated_token_file, authority=authority,
                                                   **pipeline)
    if plan.source == "msi":
        return identity.ManagedIdentityCredential(**({"client_id": plan.client_id} if plan.client_id else {}),
                                                  **pipeline)
    if plan.source == "cli":
        return identity.AzureCliCredential()
    # auto's last step: azure-identity's own chain (its environment names, workload identity, managed
    # identity, the Azure CLI, ...); a client_id among the options names the managed identity.
    return identity.DefaultAzureCredential(authority=authority, exclude_interactive_browser_credential=True,
                                           **({"managed_identity_client_id": plan.client_id} if plan.client_id
                                              else {}), **pipeline)


def _exc_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def is_auth_error(exc: BaseException) -> bool:
    """An SDK's "the credential was refused" (whatever its message says)."""
    names = _exc_names(exc)
    return bool(names & {"AuthenticationException", "ClientAuthenticationError", "CredentialUnavailableError",
                         "AuthenticationError"})


def is_not_found(exc: BaseException) -> bool:
    """An SDK's "no such resource" (ask is_auth_error first: AAD's refusals may say "not found")."""
    if "ResourceNotFoundError" in _exc_names(exc):
        return True
    text = _exc_text(exc).lower()
    # v1: ComputeTargetException("ComputeTargetNotFound: ..."), ProjectSystemException("Workspace not found.")
    return "notfound" in text or "not found" in text or "could not be found" in text


def _exc_text(exc: BaseException) -> str:
    """The message of an SDK exception (azureml's keep it in .message, not in str())."""
    for text in (getattr(exc, "message", None), *(str(a) for a in exc.args[:1]), str(exc)):
        if isinstance(text, str) and text.strip():
            return text.strip()
    return type(exc).__name__


# azure-ai-ml's AmlCompute tier for our vm_priority: the SDK sends snake_to_pascal(tier), and the
# REST enum is Dedicated | LowPriority ("lowpriority" would go out as "Lowpriority").
V2_TIER = {"dedicated": "dedicated", "lowpriority": "low_priority"}


# The ARM api-version of the PATCH requests aml_compute_cluster sends itself (ClusterUpdateParameters).
ARM_API_VERSION = "2024-10-01"
# provisioningState values after which an update has ended.
ENDED = {"succeeded", "failed", "canceled"}


def v2_public_access(value: str) -> bool | None:
    """azure-ai-ml's ``ssh_public_access_enabled`` for a remote_login_port_public_access: None is
    how the SDK sends ``NotSpecified`` (closed with a VNet, else open), which only creation sets."""
    return None if value == "NotSpecified" else value == "Enabled"


def _enum_text(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


class AmlClient:
    """A workspace, seen through one SDK."""

    source = ""

    def __init__(self, subscription_id: str, resource_group: str, workspace_name: str, auth: AuthPlan,
                 who: str = "", alternative: str = "use source: nodes_file"):
        self.subscription_id = subscription_id
        self.resource_group = resource_group
        self.workspace_name = workspace_name
        self.auth = auth
        # Who uses the SDK, and the way round a missing one, for sdk_missing.
        self.who, self.alternative = who, alternative

    def _missing_sdk(self) -> AmlNodesError:
        return AmlNodesError(sdk_missing(self.source, sys.executable, self.who, self.alternative))

    def auth_failure(self, exc: BaseException) -> AmlNodesError | None:
        """The one sentence for an authentication error an SDK call raised; None for any other error."""
        if is_auth_error(exc):
            return AmlNodesError(auth_failed(self.auth.source, self.auth.requested, _exc_text(exc)))
        return None

    def _fail(self, exc: BaseException, cluster: str | None = None, workspace_checked: bool = False) -> AmlNodesError:
        auth = self.auth_failure(exc)
        if auth:
            return auth
        if is_not_found(exc):
            if cluster is None or (not workspace_checked and not self.workspace_exists()):
                return AmlNodesError(workspace_not_found(self.workspace_name, self.resource_group,
                                                         self.subscription_id))
            return AmlNodesError(cluster_not_found(cluster, self.workspace_name))
        first = _exc_text(exc).splitlines()[0][:300]
        where = f"cluster '{cluster}' in " if cluster else ""
        return AmlNodesError(f"{self.source} failed on {where}workspace '{self.workspace_name}': "
                             f"{type(exc).__name__}: {first}")

    # Interface -------------------------------------------------------------------------
    def workspace_exists(self) -> bool:
        raise NotImplementedError

    def cluster(self, name: str) -> ClusterInfo | None:
        """The cluster's properties, or None when there is no such cluster."""
        raise NotImplementedError

    def list_nodes(self, name: str) -> list[dict[str, Any]]:
        """camelCase node records, as AmlCompute.list_nodes() returns them."""
        raise NotImplementedError

    def create(self, spec: ClusterSpec, timeout_s: int = 1800) -> None:
        """Create the cluster and wait (at most ``timeout_s``) for the operation."""
        raise NotImplementedError

    def scale(self, name: str, min_nodes: int, max_nodes: int, idle_seconds: int, timeout_s: int = 1800) -> None:
        """Set the scale settings and wait (at most ``timeout_s``) for the operation."""
        raise NotImplementedError

    def add_identity(self, name: str, resource_id: str, timeout_s: int = 1800) -> None:
        """Give the cluster that user-assigned identity too (its other identities kept)."""
        raise NotImplementedError


# ---------------------------------------------------------------------------------------
# SDK v1: azureml-core


def _v1_subnet(subnet: str) -> dict[str, str]:
    """azureml-core's provisioning_configuration arguments of a subnet's resource id (it takes the
    names and builds the id in the workspace's subscription)."""
    if not subnet:
        return {}
    _subscription, group, vnet, name = subnet_parts(subnet)
    return {"vnet_resourcegroup_name": group, "vnet_name": vnet, "subnet_name": name}


class AzuremlCoreClient(AmlClient):
    source = "azureml-core"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            from azureml.core import Workspace  # noqa: F401
            from azureml.core.compute import AmlCompute, ComputeTarget  # noqa: F401
        except ImportError:
            raise self._missing_sdk() from None
        self._ws = None
        self._targets: dict[str, Any] = {}

    def _credential(self) -> Any:
        from azureml.core import authentication as a
        plan = self.auth
        if plan.kind == "secret":
            return a.ServicePrincipalAuthentication(tenant_id=plan.tenant, service_principal_id=plan.client_id,
                                                    service_principal_password=plan.secret, cloud=plan.cloud)
        if plan.source == "msi":
            return a.MsiAuthentication(cloud=plan.cloud,
                                       identity_config={"client_id": plan.client_id} if plan.client_id else None)
        if plan.source == "cli":
            return a.AzureCliAuthentication(cloud=plan.cloud)
        # A certificate, a workload identity or DefaultAzureCredential: azure-identity's credential,
        # handed to azureml-core as the source of its tokens (an audience is a resource URI).
        return a.TokenAuthentication(IdentityTokens(identity_credential(plan)), cloud=plan.cloud)

    def workspace(self) -> Any:
        if self._ws is None:
            from azureml.core import Workspace
            try:
                self._ws = Workspace(self.subscription_id, self.resource_group, self.workspace_name,
                                     auth=self._credential())
            except Exception as exc:  # the SDK raises many kinds; sorted out by _fail
                raise self._fail(exc) from None
        return self._ws

    def workspace_exists(self) -> bool:
        try:
            self.workspace()
        except AmlNodesError:
            return False
        return True

    def _target(self, name: str, fresh: bool = False) -> Any:
        """The AmlCompute object (one GET), kept for the next call unless ``fresh``."""
        from azureml.core.compute import AmlCompute
        if name in self._targets and not fresh:
            return self._targets[name]
        ws = self.workspace()
        try:
            self._targets[name] = AmlCompute(ws, name)
            return self._targets[name]
        except Exception as exc:
            if is_not_found(exc) and not is_auth_error(exc):
                return None
            raise self._fail(exc, name, workspace_checked=True) from None

    def cluster(self, name: str) -> ClusterInfo | None:
        target = self._target(name, fresh=True)
        if target is None:
            return None
        kind = getattr(target, "type", "AmlCompute")
        if kind and kind != "AmlCompute":
            raise AmlNodesError(not_amlcompute(name, self.workspace_name, kind))
        scale = getattr(target, "scale_settings", None)
        status = getattr(target, "status", None)
        return ClusterInfo(
            name=name, vm_size=getattr(target, "vm_size", None),
            min_nodes=getattr(scale, "minimum_node_count", None), max_nodes=getattr(scale, "maximum_node_count", None),
            admin_user=getattr(target, "admin_username", None), ssh_public_key=getattr(target, "admin_user_ssh_key", None),
            remote_login_port_public_access=getattr(target, "remote_login_port_public_access", None),
            provisioning_state=getattr(target, "provisioning_state", None),
            current_node_count=getattr(status, "current_node_count", None),
            idle_seconds=getattr(scale, "idle_seconds_before_scaledown", None),
            vm_priority=getattr(target, "vm_priority", None), identity_type=getattr(target, "identity_type", None),
            # identity_id: the GET's userAssignedIdentities, a mapping id -> {principalId, clientId}
            identity_ids=tuple(getattr(target, "identity_id", None) or ()),
            # azureml-core keeps the subnet's names (the id rebuilt in the workspace's subscription, as
            # it builds it); it does not read enableNodePublicIp back.
            subnet=(f"/subscriptions/{self.subscription_id}/resourceGroups/{target.vnet_resourcegroup_name}/providers/"
                    f"Microsoft.Network/virtualNetworks/{target.vnet_name}/subnets/{target.subnet_name}"
                    if getattr(target, "subnet_name", None) else ""))

    def list_nodes(self, name: str) -> list[dict[str, Any]]:
        target = self._target(name)
        if target is None:
            raise AmlNodesError(cluster_not_found(name, self.workspace_name))
        try:
            return [record_from_object(r) for r in target.list_nodes()]
        except Exception as exc:
            raise self._fail(exc, name, workspace_checked=True) from None

    def create(self, spec: ClusterSpec, timeout_s: int = 1800) -> None:
        from azureml.core.compute import AmlCompute, ComputeTarget
        ws = self.workspace()
        config = AmlCompute.provisioning_configuration(
            vm_size=spec.vm_size, vm_priority=spec.vm_priority, min_nodes=spec.min_nodes, max_nodes=spec.max_nodes,
            idle_seconds_before_scaledown=spec.idle_at_creation, admin_username=spec.admin_user,
            admin_user_ssh_key=spec.ssh_public_key,
            remote_login_port_public_access=spec.remote_login_port_public_access,
            enable_node_public_ip=spec.node_public_ip, **_v1_subnet(spec.subnet),
            **({"identity_type": "UserAssigned", "identity_id": [spec.identity_resource_id]}
               if spec.identity_resource_id else {}))
        try:
            target = ComputeTarget.create(ws, spec.name, config)
            # v1 waits here for min_nodes nodes as well, up to timeout_in_minutes.
            target.wait_for_completion(show_output=False, timeout_in_minutes=max(1, timeout_s // 60))
        except Exception as exc:
            raise self._fail(exc, spec.name, workspace_checked=True) from None

    def scale(self, name: str, min_nodes: int, max_nodes: int, idle_seconds: int, timeout_s: int = 1800) -> None:
        target = self._target(name)
        if target is None:
            raise AmlNodesError(cluster_not_found(name, self.workspace_name))
        try:
            target.update(min_nodes=min_nodes, max_nodes=max_nodes, idle_seconds_before_scaledown=idle_seconds)
            target.wait_for_completion(show_output=False, timeout_in_minutes=max(1, timeout_s // 60))
        except Exception as exc:
            raise self._fail(exc, name, workspace_checked=True) from None

    def add_identity(self, name: str, resource_id: str, timeout_s: int = 1800) -> None:
        target = self._target(name, fresh=True)
        if target is None:
            raise AmlNodesError(cluster_not_found(name, self.workspace_name))
        # A PATCH of type UserAssigned: the ones listed are added to those there
        # (plan_cluster refused a cluster with a system-assigned identity, which it would drop).
        have = list(target.identity_id or ()) if "UserAssigned" in (target.identity_type or "") else []
        try:
            target.add_identity("UserAssigned", [*have, resource_id])
        except Exception as exc:
            raise self._fail(exc, name, workspace_checked=True) from None


# ---------------------------------------------------------------------------------------
# SDK v2: azure-ai-ml


class AzureAiMlClient(AmlClient):
    source = "azure-ai-ml"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            import azure.identity  # noqa: F401
            from azure.ai.ml import MLClient  # noqa: F401
        except ImportError:
            raise self._missing_sdk() from None
        self._client = None
        self._cred = None
        self._arm = None

    def _credential(self) -> Any:
        if self._cred is None:  # one credential for the SDK and the PATCH requests: one login
            self._cred = identity_credential(self.auth)
        return self._cred

    def client(self) -> Any:
        if self._client is None:
            from azure.ai.ml import MLClient
            try:
                self._client = MLClient(self._credential(), self.subscription_id, self.resource_group,
                                        self.workspace_name, cloud=self.auth.cloud, enable_telemetry=False,
                                        show_progress=False)
            except Exception as exc:
                raise self._fail(exc) from None
        return self._client

    def workspace_exists(self) -> bool:
        try:
            self.client().workspaces.get(self.workspace_name)
        except Exception as exc:
            if is_auth_error(exc):
                raise self._fail(exc) from None
            return False
        return True

    def _entity(self, name: str) -> Any:
        try:
            return self.client().compute.get(name)
        except Exception as exc:
            if is_not_found(exc) and not is_auth_error(exc):
                if not self.workspace_exists():
                    raise AmlNodesError(workspace_not_found(self.workspace_name, self.resource_group,
                                                            self.subscription_id)) from None
                return None
            raise self._fail(exc, name) from None

    def cluster(self, name: str) -> ClusterInfo | None:
        entity = self._entity(name)
        if entity is None:
            return None
        kind = _enum_text(getattr(entity, "type", None)) or "amlcompute"
        if kind.lower() != "amlcompute":
            raise AmlNodesError(not_amlcompute(name, self.workspace_name, kind))
        ssh = getattr(entity, "ssh_settings", None)
        public = getattr(entity, "ssh_public_access_enabled", None)
        identity = getattr(entity, "identity", None)
        return ClusterInfo(
            name=name, vm_size=getattr(entity, "size", None), min_nodes=getattr(entity, "min_instances", None),
            max_nodes=getattr(entity, "max_instances", None), admin_user=getattr(ssh, "admin_username", None),
            ssh_public_key=getattr(ssh, "ssh_key_value", None),
            remote_login_port_public_access=None if public is None else ("Enabled" if public else "Disabled"),
            provisioning_state=_enum_text(getattr(entity, "provisioning_state", None)),
            idle_seconds=getattr(entity, "idle_time_before_scale_down", None),
            vm_priority=getattr(entity, "tier", None),
            identity_type=getattr(identity, "type", None),
            identity_ids=tuple(u.resource_id for u in getattr(identity, "user_assigned_identities", None) or ()),
            subnet=getattr(getattr(entity, "network_settings", None), "subnet", None) or "",
            node_public_ip=getattr(entity, "enable_node_public_ip", None))

    def list_nodes(self, name: str) -> list[dict[str, Any]]:
        try:
            # record_from_object: the 1.35.x entities keep their data under camelCase keys.
            return [record_from_object(n) for n in self.client().compute.list_nodes(name)]
        except Exception as exc:
            raise self._fail(exc, name) from None

    def create(self, spec: ClusterSpec, timeout_s: int = 1800) -> None:
        from azure.ai.ml.entities import AmlCompute, AmlComputeSshSettings
        identity = {}
        if spec.identity_resource_id:
            from azure.ai.ml.entities import IdentityConfiguration, ManagedIdentityConfiguration
            identity = {"identity": IdentityConfiguration(type="user_assigned", user_assigned_identities=[
                ManagedIdentityConfiguration(resource_id=spec.identity_resource_id)])}
        if spec.subnet:
            from azure.ai.ml.entities import NetworkSettings
            identity["network_settings"] = NetworkSettings(subnet=spec.subnet)
        entity = AmlCompute(
            **identity, enable_node_public_ip=spec.node_public_ip,
            name=spec.name, size=spec.vm_size, min_instances=spec.min_nodes, max_instances=spec.max_nodes,
            idle_time_before_scale_down=spec.idle_at_creation, tier=V2_TIER.get(spec.vm_priority, spec.vm_priority),
            ssh_public_access_enabled=v2_public_access(spec.remote_login_port_public_access),
            ssh_settings=AmlComputeSshSettings(admin_username=spec.admin_user, ssh_key_value=spec.ssh_public_key))
        try:
            self.client().compute.begin_create_or_update(entity).result(timeout=timeout_s)
        except Exception as exc:
            raise self._fail(exc, spec.name) from None

    # Updates: a PATCH of what changes (ARM's ClusterUpdateParameters), never begin_update's PUT
    # of the whole cluster rebuilt from azure-ai-ml's entity, which drops every property the
    # entity does not model (a custom image, node-level metrics, an isolated network, tags,
    # NotSpecified SSH access sent as Disabled, properties of newer API versions).

    def _compute_url(self, name: str) -> str:
        return (f"{self.auth.cloud_info.resource_manager}/subscriptions/{self.subscription_id}/"
                f"resourceGroups/{self.resource_group}/providers/Microsoft.MachineLearningServices/"
                f"workspaces/{self.workspace_name}/computes/{name}?api-version={ARM_API_VERSION}")

    def _pipeline(self) -> Any:
        """An azure-core pipeline to the cloud's resource manager: the credential's token,
        azure-core's retries (429 and 5xx, Retry-After honoured), its HTTP transport."""
        if self._arm is None:
            from azure.core import PipelineClient
            from azure.core.pipeline import policies, transport
            rm = self.auth.cloud_info.resource_manager
            self._arm = PipelineClient(base_url=rm, transport=transport.RequestsTransport(), policies=[
                policies.HeadersPolicy(), policies.UserAgentPolicy("amlhpc-azureml"), policies.RetryPolicy(),
                policies.BearerTokenCredentialPolicy(self._credential(), token_scope(rm)),
                policies.DistributedTracingPolicy()])
        return self._arm

    def _send(self, method: str, name: str, body: dict[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
        """One request on the cluster's resource; its JSON answer and the response. An error
        answer raises azure-core's exception for it (``_fail`` tells them apart)."""
        from azure.core.exceptions import (
            ClientAuthenticationError,
            HttpResponseError,
            ResourceExistsError,
            ResourceNotFoundError,
            map_error,
        )
        from azure.core.rest import HttpRequest
        response = self._pipeline().send_request(HttpRequest(method, self._compute_url(name), json=body))
        if response.status_code >= 400:
            map_error(response.status_code, response, {401: ClientAuthenticationError, 404: ResourceNotFoundError,
                                                       409: ResourceExistsError})
            raise HttpResponseError(response=response)
        try:
            return (response.json() if response.text() else {}), response
        except ValueError:
            return {}, response

    def _patch(self, name: str, body: dict[str, Any], timeout_s: int) -> None:
        """PATCH ``body`` onto cluster ``name`` and wait (at most ``timeout_s``) until it has
        left Updating (ARM answers 200 when done, 202 while it works)."""
        if self._entity(name) is None:
            raise AmlNodesError(cluster_not_found(name, self.workspace_name))
        deadline = time.monotonic() + max(1, timeout_s)
        try:
            answer, response = self._send("PATCH", name, body)
            while response.status_code == 202 or (
                    str((answer.get("properties") or {}).get("provisioningState", "Succeeded")).lower() not in ENDED):
                if time.monotonic() >= deadline:
                    raise AmlNodesError(f"cluster '{name}' was still updating after {timeout_s}s: see it in the "
                                        "studio (Compute > Compute clusters), then run again")
                retry = response.headers.get("Retry-After", "10")
                time.sleep(min(30.0, max(0.0, float(retry)) if retry.isdigit() else 10.0))
                answer, response = self._send("GET", name)
        except AmlNodesError:
            raise
        except Exception as exc:
            raise self._fail(exc, name) from None

    def scale(self, name: str, min_nodes: int, max_nodes: int, idle_seconds: int, timeout_s: int = 1800) -> None:
        self._patch(name, {"properties": {"properties": {"scaleSettings": {
            "minNodeCount": min_nodes, "maxNodeCount": max_nodes,
            "nodeIdleTimeBeforeScaleDown": f"PT{int(idle_seconds)}S"}}}}, timeout_s)

    def add_identity(self, name: str, resource_id: str, timeout_s: int = 1800) -> None:
        entity = self._entity(name)
        if entity is None:
            raise AmlNodesError(cluster_not_found(name, self.workspace_name))
        # ARM merges the user-assigned identities a PATCH names into those there; the type keeps
        # a system-assigned identity (and what was granted to it).
        have = (getattr(getattr(entity, "identity", None), "type", None) or "").lower().replace("_", "")
        kind = "SystemAssigned,UserAssigned" if "systemassigned" in have else "UserAssigned"
        self._patch(name, {"identity": {"type": kind, "userAssignedIdentities": {resource_id: {}}}}, timeout_s)


CLIENTS = {"azureml-core": AzuremlCoreClient, "azure-ai-ml": AzureAiMlClient}


def connect(source: str, subscription_id: str | None, resource_group: str | None, workspace_name: str | None,
            auth: AuthPlan, who: str = "", alternative: str = "use source: nodes_file") -> AmlClient:
    """A client for one workspace through ``source`` (azureml-core or azure-ai-ml).

    ``who`` names the caller in the errors (default ``source 'SDK'``, the inventory's option);
    ``alternative`` is the way round a missing SDK."""
    subscription_id = subscription_id or auth.subscription_id  # a credential file profile's
    missing = [n for n, v in (("subscription_id", subscription_id), ("resource_group", resource_group),
                              ("workspace_name", workspace_name)) if not v]
    if missing:
        raise AmlNodesError(f"{who or f'source {source!r}'} needs {', '.join(missing)} (subscription_id may also "
                            "come from AZURE_SUBSCRIPTION_ID)")
    # Names Azure would refuse, refused before any call (the SDKs send them as given).
    problems = workspace_problems(who or f"source {source!r}", subscription_id, resource_group, workspace_name)
    if problems:
        raise AmlNodesError("; ".join(problems))
    if source not in CLIENTS:
        raise AmlNodesError(f"source must be one of {', '.join(CLIENTS)} or nodes_file, not {source!r}")
    return CLIENTS[source](subscription_id, resource_group, workspace_name, auth, who=who, alternative=alternative)
