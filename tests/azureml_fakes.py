"""Fake Azure, plugged in at the SDK boundary only.

* SDK v1 (azureml-core): ``azureml.core.Workspace`` and ``azureml.core.compute.AmlCompute`` /
  ``ComputeTarget`` are replaced. Their ``list_nodes()`` joins REST pages with the SDK's own
  ``get_paginated_compute_nodes`` (its HTTP session faked), so the records are the SDK's
  camelCase dicts, paged the way the resource provider pages them. Cluster properties come
  from a REST ``ComputeResource`` payload through the SDK's own ``ScaleSettings`` and
  ``AmlComputeStatus`` deserializers.
* SDK v2 (azure-ai-ml): the real ``MLClient`` with its HTTP transport replaced. Everything
  above the wire is the real SDK, including the 1.35.x ``AmlComputeNodeInfo`` bug. Jobs
  (``World.add_job``) answer the job GET (resource manager), the workspace's discovery URL,
  the artifact datastore and run history's run details, so the SDK's own ``jobs.stream``
  runs and raises its ``JobException`` for a failed job exactly as it does against Azure.
  ``jobs.download`` alone is replaced (``install_v2``): it fetches blobs through
  azure-storage-blob, which does not take the client's transport; the fake asks the job's
  status through the real client first and refuses a job that has not ended, as the SDK does.

``World`` holds the workspace's clusters and counts the calls.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

SUB = "00000000-0000-0000-0000-000000000000"
RG = "rg-hpc"
WS = "ws-hpc"
ARM = "https://management.azure.com"
FAKE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFAKEKEY amlhpc@controller"


def make_nodes(n: int, cluster: str = "gpu", states: dict[int, str] | None = None, shuffle: bool = True,
               public_ip: str | None = "20.84.17.201", nat: bool = True) -> list[dict[str, Any]]:
    """``n`` camelCase node records like the resource provider returns (NAT ports from 50000).
    ``nat=False``: a cluster without node public IPs (enableNodePublicIp false), whose records
    carry no public IP and no port (AmlComputeNodeInformation's publicIpAddress and port, null)."""
    states = states or {}
    out = []
    for i in range(n):
        digest = hashlib.sha256(f"{cluster}-{i}".encode()).hexdigest()
        out.append({"nodeId": f"tvmps_{digest}_d", "privateIpAddress": f"10.0.{i // 250}.{4 + i % 250}",
                    "publicIpAddress": public_ip if nat else None, "port": 50000 + i if nat else None,
                    "nodeState": states.get(i, "idle"), "runId": None})
    if shuffle:  # the API does not list nodes in rank order
        out = out[1::2] + out[0::2]
    return out


def identity_payload(block: dict[str, Any] | None) -> dict[str, Any] | None:
    """The "identity" of a GET, from the one a request sent: ARM adds the principal ids, and
    each user-assigned identity gets its principal and client id."""
    if not block or str(block.get("type", "None")) == "None":
        return None
    out: dict[str, Any] = {"type": block["type"]}
    if "SystemAssigned" in block["type"]:
        out.update(principalId="11111111-0000-0000-0000-000000000001", tenantId="22222222-0000-0000-0000-000000000002")
    users = block.get("userAssignedIdentities") or {}
    if users:
        out["userAssignedIdentities"] = {
            rid: {"principalId": hashlib.sha256(rid.lower().encode()).hexdigest()[:8] + "-0000-0000-0000-000000000003",
                  "clientId": hashlib.sha256(rid.lower().encode()).hexdigest()[8:16] + "-0000-0000-0000-000000000004"}
            for rid in users}
    return out


def compute_payload(name: str, vm_size: str = "STANDARD_ND96ASR_V4", min_nodes: int = 4, max_nodes: int = 4,
                    admin_user: str = "azureuser", ssh_key: str | None = FAKE_KEY,
                    public_access: str = "Enabled", current: int | None = None, vm_priority: str = "Dedicated",
                    identity: dict[str, Any] | None = None, idle: str = "PT1800S",
                    subnet: str | None = None, node_public_ip: bool = True) -> dict[str, Any]:
    """A REST ComputeResource of an AmlCompute cluster (GET .../computes/<name>). ``identity``:
    the identity block as a create request sends it (None: the cluster has none)."""
    current = max_nodes if current is None else current
    identity = identity_payload(identity)
    creds: dict[str, Any] = {"adminUserName": admin_user}
    if ssh_key:
        creds["adminUserSshPublicKey"] = ssh_key
    return {
        "id": f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.MachineLearningServices/"
              f"workspaces/{WS}/computes/{name}",
        "name": name, "type": "Microsoft.MachineLearningServices/workspaces/computes", "location": "eastus",
        "tags": {},
        **({"identity": identity} if identity else {}),
        "properties": {
            "computeType": "AmlCompute", "computeLocation": "eastus", "description": None,
            "resourceId": None, "provisioningState": "Succeeded", "provisioningErrors": None,
            "isAttachedCompute": False, "disableLocalAuth": True,
            "createdOn": "2026-11-01T10:00:00.000Z", "modifiedOn": "2026-11-01T10:00:00.000Z",
            "properties": {
                "vmSize": vm_size, "vmPriority": vm_priority, "osType": "Linux",
                "scaleSettings": {"minNodeCount": min_nodes, "maxNodeCount": max_nodes,
                                  "nodeIdleTimeBeforeScaleDown": idle},
                "userAccountCredentials": creds, "subnet": {"id": subnet} if subnet else None,
                "remoteLoginPortPublicAccess": public_access, "enableNodePublicIp": node_public_ip,
                "allocationState": "Steady", "allocationStateTransitionTime": "2026-11-01T10:05:00.000Z",
                "errors": None, "currentNodeCount": current, "targetNodeCount": current,
                "nodeStateCounts": {"idleNodeCount": current, "runningNodeCount": 0, "preparingNodeCount": 0,
                                    "unusableNodeCount": 0, "leavingNodeCount": 0, "preemptedNodeCount": 0},
            },
        },
    }


GALLERY_IMAGE = (f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/galleries/hpc/images/"
                 "ubuntu-hpc/versions/1.0.0")
# The properties of an AmlCompute's GET that an update is not asked to change, each set to a value
# other than its default: a custom image, node-level metrics, an isolated network, a description,
# local auth off, tags, and one the REST models of today do not know (as a newer API version adds them).
EVERY_PROPERTY = {
    "inner": {"virtualMachineImage": {"id": GALLERY_IMAGE}, "isolatedNetwork": True,
              "propertyBag": {"enableNodeLevelMetrics": True}, "osType": "Linux",
              "remoteLoginPortPublicAccess": "NotSpecified", "enableNodePublicIp": False,
              "subnet": {"id": f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/"
                               "vnet-hpc/subnets/nodes"},
              "enableOSPatching": True, "futureSetting": {"kept": "as returned"}},
    "outer": {"description": "CosmoFlow nodes", "disableLocalAuth": True, "resourceId": None},
    "tags": {"team": "hpc", "cost-centre": "42"},
}


def with_every_property(compute: dict[str, Any]) -> dict[str, Any]:
    """``compute`` (a GET payload) with every property of EVERY_PROPERTY set."""
    compute["properties"]["properties"].update(json.loads(json.dumps(EVERY_PROPERTY["inner"])))
    compute["properties"].update(EVERY_PROPERTY["outer"])
    compute["tags"] = dict(EVERY_PROPERTY["tags"])
    return compute


def rest_enum(value: str, members: tuple[str, ...]) -> str:
    """``value`` as the REST enum spells it (ARM matches enum values without regard to case);
    a value that is none of ``members`` is refused, as ARM refuses it (400)."""
    for member in members:
        if str(value).lower() == member.lower():
            return member
    raise ValueError(f"The value '{value}' is not valid; expected one of {', '.join(members)}")


API = "https://eastus.api.azureml.ms"
WS_ID = f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.MachineLearningServices/workspaces/{WS}"

# The workspace's artifact store (GET .../datastores/workspaceartifactstore), as the resource manager answers.
ARTIFACT_DATASTORE = {
    "id": f"{WS_ID}/datastores/workspaceartifactstore", "name": "workspaceartifactstore",
    "type": "Microsoft.MachineLearningServices/workspaces/datastores",
    "properties": {"datastoreType": "AzureBlob", "accountName": "wshpcstore", "containerName": "azureml",
                   "endpoint": "core.windows.net", "protocol": "https", "credentials": {"credentialsType": "AccountKey"},
                   "isDefault": False, "tags": {}, "properties": {}}}


def job_payload(name: str, status: str, compute: str = "gpu") -> dict[str, Any]:
    """A REST JobBase of a command job (GET .../jobs/<name>), with the default output every job
    gets (the artifact store) and the studio link, as the resource manager returns them."""
    return {
        "id": f"{WS_ID}/jobs/{name}", "name": name, "type": "Microsoft.MachineLearningServices/workspaces/jobs",
        "properties": {
            "jobType": "Command", "status": status, "displayName": name, "experimentName": "cosmoflow",
            "command": "python train.py", "computeId": f"{WS_ID}/computes/{compute}",
            "environmentId": f"{WS_ID}/environments/amlhpc-cosmoflow/versions/1",
            "distribution": {"distributionType": "Mpi", "processCountPerInstance": 8},
            "resources": {"instanceCount": 4, "shmSize": "64g"},
            "services": {"Studio": {"jobServiceType": "Studio",
                                    "endpoint": f"https://ml.azure.com/runs/{name}?wsid={WS_ID}"}},
            "outputs": {"default": {"jobOutputType": "uri_folder", "mode": "ReadWriteMount",
                                    "uri": f"azureml://datastores/workspaceartifactstore/ExperimentRun/dcid.{name}"}},
            "properties": {}, "tags": {}, "isArchived": False},
        "systemData": {"createdAt": "2026-11-01T10:00:00.000Z", "createdBy": "amlhpc", "createdByType": "User"}}


def run_details_payload(name: str, status: str, error: dict[str, Any] | None) -> dict[str, Any]:
    """Run history's RunDetails (GET .../runs/<name>/details); the logs of a command job on
    the common runtime live in the artifact store, not in ``logFiles``."""
    return {"runId": name, "target": "gpu", "status": status, "error": error, "logFiles": {}, "warnings": [],
            "startTimeUtc": "2026-11-01T10:06:00.000Z", "properties": {}}


# What AmlCompute's GET carries that no request sets: the service's own state.
READ_ONLY = ("allocationState", "allocationStateTransitionTime", "errors", "currentNodeCount", "targetNodeCount",
             "nodeStateCounts")


@dataclass
class World:
    """A workspace with clusters; both fakes read and change it."""

    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {"compute": ..., "nodes": [...]}
    # name -> the "identity" block of the create request, as the real SDK serialised it
    identities: dict[str, Any] = field(default_factory=dict)
    # name -> the "identity" blocks of the requests that changed it (v1 PATCH, v2 PUT), in order
    identity_updates: dict[str, list[Any]] = field(default_factory=dict)
    page_size: int = 100
    auth_error: str | None = None
    workspace: str = WS
    calls: Counter = field(default_factory=Counter)
    credentials: list[Any] = field(default_factory=list)
    waits: list[Any] = field(default_factory=list)  # timeout_in_minutes of v1 wait_for_completion calls
    # The workspace's default Key Vault (v1 Workspace.get_default_keyvault().set_secret).
    secrets: dict[str, str] = field(default_factory=dict)
    # Nodes a created or scaled cluster gets (a real cluster takes minutes; here at once).
    grow_on_scale: bool = True
    # A scale-down leaves the nodes listed for this many more node listings (AmlCompute
    # releases them once they have been idle for the idle time); 0: at once.
    release_after_polls: int = 0
    _releasing: dict[str, list[int]] = field(default_factory=dict)
    # name -> the properties.properties of each request that created or changed it, as the SDK serialised them
    sent: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # name -> the bodies of the PATCH requests that changed it, as the SDK or the module sent them
    patches: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # name -> the bodies of the PUT requests that replaced an existing cluster
    puts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # route -> the answers it gives before its own, in order ("job": the job GET, "details": run
    # history's run details, "storage": the workspace storage behind jobs.download): an HTTP
    # status (its body and headers as Azure sends them, fault_answer), "reset" or "timeout".
    faults: dict[str, list[Any]] = field(default_factory=dict)
    # name -> a v2 job: {"statuses": [...], "at": index, "error": {...} | None, "artifacts": {path: text}}
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add_job(self, name: str, statuses: list[str], error: str | None = None,
                artifacts: dict[str, str] | None = None) -> None:
        """A command job whose status goes through ``statuses``: the job GET reads the current one,
        each run-details read of run history moves on to the next (the last one stays).
        ``error``: the message of the run's error (run history's ``error.error.message``);
        ``artifacts``: its files in the artifact store (``user_logs/std_log_process_0.txt``, ``outputs/...``)."""
        self.jobs[name] = {"statuses": list(statuses), "at": 0, "artifacts": dict(artifacts or {}),
                           "error": {"error": {"code": "UserError", "message": error}} if error else None}

    def job_status(self, name: str, advance: bool = False) -> str:
        job = self.jobs[name]
        if advance:
            job["at"] = min(job["at"] + 1, len(job["statuses"]) - 1)
        return job["statuses"][job["at"]]

    def refresh(self) -> None:
        """Called when a client connects (azureml-core's Workspace): a world kept elsewhere
        (the twin's state file) is read again here; this one lives in memory."""

    def add(self, name: str, nodes: list[dict[str, Any]], **props: Any) -> None:
        props.setdefault("min_nodes", len(nodes))
        props.setdefault("max_nodes", len(nodes))
        self.clusters[name] = {"compute": compute_payload(name, current=len(nodes), **props), "nodes": nodes}

    def pages(self, name: str) -> list[dict[str, Any]]:
        releasing = self._releasing.get(name)
        if releasing is not None:
            if releasing[0] <= 0:
                del self._releasing[name]
                self.clusters[name]["nodes"] = make_nodes(releasing[1], name, nat=self.node_public_ip(name))
            releasing[0] -= 1
        nodes = self.clusters[name]["nodes"]
        chunks = [nodes[i:i + self.page_size] for i in range(0, len(nodes), self.page_size)] or [[]]
        out = []
        for i, chunk in enumerate(chunks):
            page: dict[str, Any] = {"nodes": [dict(n) for n in chunk]}
            if i + 1 < len(chunks):
                page["nextLink"] = (f"{ARM}/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft."
                                    f"MachineLearningServices/workspaces/{WS}/computes/{name}/listNodes"
                                    f"?api-version=2023-08-01-preview&$skipToken={i + 1}")
            out.append(page)
        return out

    def page_from_link(self, url: str) -> dict[str, Any]:
        m = re.search(r"/computes/([^/]+)/listNodes.*skipToken=(\d+)", url)
        assert m, url
        return self.pages(m.group(1))[int(m.group(2))]

    def set_scale(self, name: str, min_nodes: int, max_nodes: int, idle: str | None = None) -> None:
        """Record the scale settings (``idle``: nodeIdleTimeBeforeScaleDown as sent, ISO 8601)."""
        compute = self.clusters[name]["compute"]
        scale = compute["properties"]["properties"]["scaleSettings"]
        scale["minNodeCount"], scale["maxNodeCount"] = min_nodes, max_nodes
        if idle:
            scale["nodeIdleTimeBeforeScaleDown"] = idle
        if self.release_after_polls and len(self.clusters[name]["nodes"]) > min_nodes:
            self._releasing[name] = [self.release_after_polls, min_nodes]
        elif self.grow_on_scale:
            self.clusters[name]["nodes"] = make_nodes(min_nodes, name, nat=self.node_public_ip(name))
            compute["properties"]["properties"]["currentNodeCount"] = min_nodes

    def create(self, name: str, vm_size: str, min_nodes: int, max_nodes: int, admin_user: str,
               ssh_key: str | None, public_access: str, sent: dict[str, Any] | None = None) -> None:
        """A cluster made from a create request; ``sent``: the request's properties.properties,
        whose VM priority, subnet and node public IP the answer carries (the priority as the
        REST enum spells it: ARM reads enums without regard to case)."""
        sent = sent or {}
        if sent:
            self.sent.setdefault(name, []).append(sent)
        subnet = (sent.get("subnet") or {}).get("id")
        self.clusters[name] = {"compute": compute_payload(
            name, vm_size, min_nodes, max_nodes, admin_user, ssh_key, public_access, current=0,
            identity=self.identities.get(name), vm_priority=rest_enum(sent.get("vmPriority") or "Dedicated",
                                                                      ("Dedicated", "LowPriority")),
            subnet=subnet, node_public_ip=sent.get("enableNodePublicIp", True) is not False), "nodes": []}
        self.set_scale(name, min_nodes, max_nodes)

    def node_public_ip(self, name: str) -> bool:
        """Whether the cluster's nodes get public IPs (and NAT ports)."""
        return self.clusters[name]["compute"]["properties"]["properties"].get("enableNodePublicIp", True) is not False

    def identity_of(self, name: str) -> dict[str, Any] | None:
        return self.clusters[name]["compute"].get("identity")

    def patch_identity(self, name: str, block: dict[str, Any]) -> None:
        """A PATCH (azureml-core's add_identity): the type is the one sent; user-assigned
        identities sent are added to those there, one sent as null is removed (ARM's merge)."""
        have = self.identity_of(name) or {}
        users = dict(have.get("userAssignedIdentities") or {}) if "UserAssigned" in block.get("type", "") else {}
        for rid, value in (block.get("userAssignedIdentities") or {}).items():
            if value is None:
                users.pop(rid, None)
            else:
                users[rid] = value
        self.put_identity(name, {"type": block["type"], "userAssignedIdentities": users})

    def put_whole(self, name: str, body: dict[str, Any]) -> None:
        """A PUT of an existing cluster (azure-ai-ml's begin_update): as ARM does, the resource
        becomes what was sent; only what the service itself keeps (its read-only state) stays."""
        self.puts.setdefault(name, []).append(json.loads(json.dumps(body)))
        compute = self.clusters[name]["compute"]
        props = compute["properties"]
        inner = props["properties"]
        kept = {k: inner.get(k) for k in READ_ONLY}
        sent = body.get("properties") or {}
        for key in ("description", "disableLocalAuth", "resourceId"):
            props[key] = sent.get(key)
        props["properties"] = {**(sent.get("properties") or {}), **kept}
        compute["tags"] = body.get("tags") or {}

    def put_identity(self, name: str, block: dict[str, Any] | None) -> None:
        """A PUT of the whole resource (azure-ai-ml's begin_update): its identity replaces the old."""
        self.identity_updates.setdefault(name, []).append(block)
        compute = self.clusters[name]["compute"]
        compute.pop("identity", None)
        answer = identity_payload(block)
        if answer:
            compute["identity"] = answer


# ---------------------------------------------------------------------------------------
# SDK v1


def install_v1(monkeypatch, world: World) -> None:
    """Replace azureml-core's Workspace and AmlCompute/ComputeTarget with fakes over ``world``."""
    import azureml._compute._util as util
    import azureml.core
    import azureml.core.compute
    from azureml.core.compute import AmlCompute as RealAmlCompute
    from azureml.core.compute.amlcompute import AmlComputeStatus, ScaleSettings
    from azureml.exceptions import AuthenticationException, ComputeTargetException, ProjectSystemException

    class Response:
        def __init__(self, payload):
            self.status_code = 200
            self.content = json.dumps(payload).encode()
            self.headers = {"Content-Type": "application/json"}

    class Session:
        def get(self, url, headers=None, **kwargs):
            world.calls["v1 GET listNodes nextLink"] += 1
            return Response(world.page_from_link(url))

    monkeypatch.setattr(util, "get_requests_session", Session)

    class FakeWorkspace:
        def __init__(self, subscription_id, resource_group, workspace_name, auth=None, **kwargs):
            world.calls["v1 Workspace"] += 1
            world.refresh()
            world.credentials.append(auth)
            if world.auth_error:
                raise AuthenticationException(world.auth_error)
            if (subscription_id, resource_group, workspace_name) != (SUB, RG, world.workspace):
                raise ProjectSystemException("Workspace not found.")
            self.subscription_id, self.resource_group, self.name = subscription_id, resource_group, workspace_name

        def get_default_keyvault(self):
            class Keyvault:
                def set_secret(self, name, value):
                    world.secrets[name] = value
            return Keyvault()

    class FakeAmlCompute:
        provisioning_configuration = staticmethod(RealAmlCompute.provisioning_configuration)

        def __init__(self, workspace, name):
            world.calls["v1 AmlCompute"] += 1
            if name not in world.clusters:
                raise ComputeTargetException(f"ComputeTargetNotFound: Compute Target with name {name} not found "
                                             "in provided workspace")
            self.workspace, self.name = workspace, name
            self._load()

        def _load(self):
            compute = world.clusters[self.name]["compute"]
            props = compute["properties"]
            inner = props["properties"]
            creds = inner.get("userAccountCredentials") or {}
            self.type = props["computeType"]
            self.provisioning_state = props["provisioningState"]
            self.vm_size = inner["vmSize"]
            self.vm_priority = inner["vmPriority"]
            self.scale_settings = ScaleSettings.deserialize(inner["scaleSettings"])
            self.admin_username = creds.get("adminUserName")
            self.admin_user_ssh_key = creds.get("adminUserSshPublicKey")
            self.remote_login_port_public_access = inner.get("remoteLoginPortPublicAccess")
            # As azureml-core's AmlCompute._initialize reads the subnet (its id split into names).
            subnet = (inner.get("subnet") or {}).get("id")
            self.vnet_resourcegroup_name = subnet.split("/resourceGroups/")[1].split("/")[0] if subnet else None
            self.vnet_name = subnet.split("/virtualNetworks/")[1].split("/")[0] if subnet else None
            self.subnet_name = subnet.split("/subnets/")[1] if subnet else None
            self.status = AmlComputeStatus.deserialize(props)
            # As azureml-core's AmlCompute._initialize reads them.
            self.identity_type = compute["identity"]["type"] if "identity" in compute else None
            self.identity_id = compute["identity"]["userAssignedIdentities"] \
                if self.identity_type and "userAssignedIdentities" in compute["identity"] else None

        def add_identity(self, identity_type, identity_id=None):
            world.calls["v1 add_identity (PATCH)"] += 1
            # azureml-core's own checks and PATCH body.
            RealAmlCompute._validate_identity(identity_type, identity_id)
            payload = {"location": "eastus", "properties": {}, "identity": {}}
            if identity_id and identity_type == "UserAssigned":
                payload["identity"] = {"type": "UserAssigned", "userAssignedIdentities": {}}
                RealAmlCompute._build_identity_id_payload(payload, identity_id)
            elif identity_type == "SystemAssigned":
                payload["identity"] = {"type": "SystemAssigned"}
            world.patch_identity(self.name, payload["identity"])
            self._load()

        def list_nodes(self):
            world.calls["v1 list_nodes (POST listNodes)"] += 1
            return util.get_paginated_compute_nodes(world.pages(self.name)[0], {"Authorization": "Bearer x"})

        def update(self, min_nodes=None, max_nodes=None, idle_seconds_before_scaledown=None):
            world.calls["v1 update"] += 1
            # As azureml-core's update(): the ScaleSettings it PATCHes, serialised by the SDK.
            settings = ScaleSettings(min_nodes, max_nodes, idle_seconds_before_scaledown
                                     or self.scale_settings.idle_seconds_before_scaledown).serialize()
            world.set_scale(self.name, settings["minNodeCount"], settings["maxNodeCount"],
                            settings["nodeIdleTimeBeforeScaleDown"])

        def wait_for_completion(self, show_output=False, min_node_count=None, timeout_in_minutes=25,
                                is_delete_operation=False):
            world.calls["v1 wait_for_completion"] += 1
            world.waits.append(timeout_in_minutes)
            self._load()

    class FakeComputeTarget:
        @staticmethod
        def create(workspace, name, provisioning_configuration):
            world.calls["v1 ComputeTarget.create"] += 1
            c = provisioning_configuration
            c.validate_configuration()
            # The REST body azureml-core would send (its own serialiser), for what the fake does not model.
            body = RealAmlCompute._build_create_payload(c, "eastus", SUB)
            world.identities[name] = body.get("identity")
            world.create(name, c.vm_size, c.scale_settings.minimum_node_count, c.scale_settings.maximum_node_count,
                         c.admin_username, c.admin_user_ssh_key, c.remote_login_port_public_access,
                         sent=body["properties"]["properties"])
            return FakeAmlCompute(workspace, name)

    from azureml.core import authentication

    class Auth:
        """The v1 authentication classes reach for the network when built; these record their arguments."""

        def __init__(self, **kwargs):
            for key, value in kwargs.items():
                setattr(self, f"_{key}", value)

    class AzureCliAuthentication(Auth):
        pass

    class ServicePrincipalAuthentication(Auth):
        def __init__(self, tenant_id, service_principal_id, service_principal_password, cloud="AzureCloud"):
            super().__init__(tenant_id=tenant_id, service_principal_id=service_principal_id,
                             service_principal_password=service_principal_password, cloud=cloud)

    class MsiAuthentication(Auth):
        pass

    class TokenAuthentication(Auth):
        def __init__(self, get_token_for_audience, cloud=None):
            super().__init__(get_token_for_audience=get_token_for_audience, cloud=cloud)

    for cls in (AzureCliAuthentication, ServicePrincipalAuthentication, MsiAuthentication, TokenAuthentication):
        monkeypatch.setattr(authentication, cls.__name__, cls)
    monkeypatch.setattr(azureml.core, "Workspace", FakeWorkspace)
    monkeypatch.setattr(azureml.core.compute, "AmlCompute", FakeAmlCompute)
    monkeypatch.setattr(azureml.core.compute, "ComputeTarget", FakeComputeTarget)


# ---------------------------------------------------------------------------------------
# SDK v2


# The error bodies Azure sends: the resource manager's and run history's JSON, the storage's XML.
STORAGE_403 = ('<?xml version="1.0" encoding="utf-8"?><Error><Code>AuthorizationFailure</Code><Message>This request '
               'is not authorized to perform this operation.\nRequestId:0d2c4e1a-601e-0007-4f3a-1f1b2c000000\n'
               'Time:2026-11-28T22:00:00.0000000Z</Message></Error>')
FAULT_CODES = {403: "AuthorizationFailed", 404: "ResourceNotFound", 409: "Conflict", 429: "TooManyRequests",
               500: "InternalServerError", 502: "BadGateway", 503: "ServiceUnavailable", 504: "GatewayTimeout"}


def fault_answer(status: int, storage: bool = False) -> tuple[dict[str, str], bytes]:
    """(headers, body) of an error answer as Azure sends it: a 429 or 5xx carries Retry-After
    (0 here, so the SDK's retries do not sleep), the storage answers XML with x-ms-error-code."""
    headers = {"x-ms-request-id": "0d2c4e1a-601e-0007-4f3a-1f1b2c000000"}
    if status == 429 or status >= 500:
        headers["Retry-After"] = "0"
    if storage:
        headers.update({"Content-Type": "application/xml", "x-ms-error-code": "AuthorizationFailure"})
        return headers, STORAGE_403.encode()
    headers["Content-Type"] = "application/json"
    code = FAULT_CODES.get(status, "Error")
    return headers, json.dumps({"error": {"code": code, "message": f"The service answered {status} {code}."}}).encode()


def request_body(request: Any, kinds: tuple[type, ...] = (str, bytes)) -> Any:
    """What the SDK sent: azure-core's HttpRequest of azure.core.rest carries it in ``content``; the
    legacy one of azure.core.pipeline.transport, which azure-ai-ml 1.31's compute operations still
    send, in ``body`` alone."""
    content = getattr(request, "content", None)
    return content if isinstance(content, kinds) else request.body


def fake_transport(world: World):
    """An azure-core HTTP transport that answers azure-ai-ml's REST calls from ``world``."""
    import requests
    from azure.core.pipeline.transport import HttpTransport
    from azure.core.rest._requests_basic import RestRequestsTransportResponse

    def respond(request, status: int, payload: Any):
        r = requests.Response()
        r.status_code = status
        r._content = json.dumps(payload).encode()
        r.raw = io.BytesIO(r._content)
        r.headers["Content-Type"] = "application/json"
        r.url = request.url
        response = RestRequestsTransportResponse(request=request, internal_response=r)
        response.read()  # azure-ai-ml reads some answers (discovery, logs) without its pipeline's help
        return response

    def not_found(request, what: str):
        return respond(request, 404, {"error": {"code": "ResourceNotFound", "message": f"The Resource '{what}' "
                                                "under resource group 'rg-hpc' was not found."}})

    def fault(request, route: str):
        """The next scripted answer of ``route`` (None: answer as the service does)."""
        queue = world.faults.get(route)
        if not queue:
            return None
        answer = queue.pop(0)
        if answer is None:  # this one answered as the service does
            return None
        world.calls[f"fault {route} {answer}"] += 1
        if answer == "reset":
            from azure.core.exceptions import ServiceResponseError
            raise ServiceResponseError("('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))")
        if answer == "timeout":
            from azure.core.exceptions import ServiceResponseTimeoutError
            raise ServiceResponseTimeoutError("HTTPSConnectionPool(host='eastus.api.azureml.ms', port=443): "
                                              "Read timed out. (read timeout=300)")
        headers, body = fault_answer(answer)
        r = requests.Response()
        r.status_code = answer
        r._content = body
        r.raw = io.BytesIO(body)
        r.headers.update(headers)
        r.url = request.url
        response = RestRequestsTransportResponse(request=request, internal_response=r)
        response.read()
        return response

    class Transport(HttpTransport):
        def __enter__(self):
            return self

        def __exit__(self, *args):
            pass

        def open(self):
            pass

        def close(self):
            pass

        def send(self, request, **kwargs):
            url, method = request.url, request.method
            path = url.split("?")[0]
            world.calls[f"host {url.split('/')[2]}"] += 1
            ws = re.search(r"/workspaces/([^/?]+)", path)
            if ws and ws.group(1) != world.workspace:
                world.calls[f"v2 {method} (no workspace)"] += 1
                return not_found(request, f"Microsoft.MachineLearningServices/workspaces/{ws.group(1)}")
            m = re.search(r"/computes/([^/?]+)(/listNodes)?$", path)
            if m and m.group(2):
                world.calls["v2 POST listNodes" if "skipToken" not in url else "v2 GET listNodes nextLink"] += 1
                if m.group(1) not in world.clusters:
                    return not_found(request, f"computes/{m.group(1)}")
                if "skipToken" in url:
                    return respond(request, 200, world.page_from_link(url))
                return respond(request, 200, world.pages(m.group(1))[0])
            if m:
                name = m.group(1)
                world.calls[f"v2 {method} compute"] += 1
                if method == "PUT":
                    body = json.loads(request_body(request))
                    inner = body["properties"]["properties"]
                    if name not in world.clusters:
                        world.identities[name] = body.get("identity")
                    else:
                        world.put_identity(name, body.get("identity"))
                    creds = inner.get("userAccountCredentials") or {}
                    scale = inner["scaleSettings"]
                    if name in world.clusters:
                        world.sent.setdefault(name, []).append(inner)
                        world.put_whole(name, body)
                        world.set_scale(name, scale.get("minNodeCount", 0), scale["maxNodeCount"],
                                        scale.get("nodeIdleTimeBeforeScaleDown"))
                    else:
                        try:
                            world.create(name, inner["vmSize"], scale.get("minNodeCount", 0), scale["maxNodeCount"],
                                         creds.get("adminUserName"), creds.get("adminUserSshPublicKey"),
                                         inner.get("remoteLoginPortPublicAccess", "NotSpecified"), sent=inner)
                        except ValueError as exc:
                            return respond(request, 400, {"error": {"code": "BadRequest", "message": str(exc)}})
                    return respond(request, 200, world.clusters[name]["compute"])
                if name not in world.clusters:
                    return not_found(request, f"computes/{name}")
                if method == "PATCH":
                    # ClusterUpdateParameters: the scale settings and/or the identity; nothing else changes
                    # (ARM merges the user-assigned identities sent into those there).
                    body = json.loads(request_body(request))
                    world.patches.setdefault(name, []).append(body)
                    scale = ((body.get("properties") or {}).get("properties") or {}).get("scaleSettings")
                    if scale:
                        world.set_scale(name, scale.get("minNodeCount", 0), scale["maxNodeCount"],
                                        scale.get("nodeIdleTimeBeforeScaleDown"))
                    if body.get("identity"):
                        world.patch_identity(name, body["identity"])
                return respond(request, 200, world.clusters[name]["compute"])
            job = re.search(r"/jobs/([^/?]+)$", path)
            if job and method == "GET":
                # A job of World.jobs; any other name is free (azure-ai-ml's jobs.get raises
                # ResourceNotFoundError).
                world.calls["v2 GET job"] += 1
                scripted = fault(request, "job")
                if scripted is not None:
                    return scripted
                if job.group(1) not in world.jobs:
                    return not_found(request, f"jobs/{job.group(1)}")
                return respond(request, 200, job_payload(job.group(1), world.job_status(job.group(1))))
            details = re.search(r"/history/v1\.0/.*/runs/([^/?]+)/details$", path)
            if details and url.startswith(API) and method == "GET":
                world.calls["v2 GET run details"] += 1
                scripted = fault(request, "details")
                if scripted is not None:
                    return scripted
                name = details.group(1)
                if name not in world.jobs:
                    return not_found(request, f"runs/{name}")
                details = run_details_payload(name, world.job_status(name, advance=True), world.jobs[name]["error"])
                return respond(request, 200, details)
            if url == f"{API}/discovery":
                world.calls["v2 GET discovery"] += 1
                return respond(request, 200, {"api": API, "history": API, "experimentation": API,
                                              "modelmanagement": API, "pipelines": API, "studiocoreservices": API})
            if ws and re.search(r"/datastores/workspaceartifactstore(/listSecrets)?$", path):
                world.calls[f"v2 {method} artifact datastore"] += 1
                if path.endswith("/listSecrets"):
                    return respond(request, 200, {"secretsType": "AccountKey", "key": "ZmFrZS1rZXk="})
                return respond(request, 200, ARTIFACT_DATASTORE)
            if ws and path.endswith(f"/workspaces/{world.workspace}"):
                world.calls["v2 GET workspace"] += 1
                return respond(request, 200, {
                    "id": f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.MachineLearningServices/"
                          f"workspaces/{WS}", "name": WS, "location": "eastus",
                    "type": "Microsoft.MachineLearningServices/workspaces", "kind": "Default",
                    "properties": {"friendlyName": WS, "provisioningState": "Succeeded",
                                   "discoveryUrl": f"{API}/discovery"}})
            raise AssertionError(f"the fake Azure has no answer for {method} {url}")

    return Transport()


def fake_credential(world: World, wrapped: Any = None) -> Any:
    """A token credential that hands out a fake token (or ``world.auth_error``), wrapping the
    one the code under test built (kept in ``wrapped``)."""
    from azure.core.credentials import AccessToken, AccessTokenInfo
    from azure.core.exceptions import ClientAuthenticationError

    class Credential:
        def __init__(self, wrapped):
            self.wrapped = wrapped

        def _check(self):
            world.calls["v2 get_token"] += 1
            if world.auth_error:
                raise ClientAuthenticationError(world.auth_error)

        def get_token(self, *scopes, **kwargs):
            self._check()
            world.calls[f"scope {' '.join(scopes)}"] += 1
            return AccessToken("fake-token", int(time.time()) + 3600)

        def get_token_info(self, *scopes, **kwargs):
            self._check()
            world.calls[f"scope {' '.join(scopes)}"] += 1
            return AccessTokenInfo("fake-token", int(time.time()) + 3600)

    return Credential(wrapped)


def install_v2(monkeypatch, world: World) -> None:
    """Make ``azure.ai.ml.MLClient`` the real client over a fake HTTP transport and a fake credential."""
    import azure.ai.ml

    real = azure.ai.ml.MLClient

    class FakeMLClient(real):
        def __init__(self, credential, subscription_id=None, resource_group_name=None, workspace_name=None,
                     **kwargs):
            world.calls["v2 MLClient"] += 1
            world.credentials.append(credential)
            kwargs["transport"] = fake_transport(world)
            # azure-core's public retry setting: the SDK retries as it does against Azure, without
            # sleeping between tries (a Retry-After of 0 reads as none, and a reset has no answer).
            kwargs.setdefault("retry_backoff_factor", 0)
            super().__init__(fake_credential(world, credential), subscription_id, resource_group_name, workspace_name,
                             **kwargs)
            self.jobs.download = fake_download(world, self.jobs)

    monkeypatch.setattr(azure.ai.ml, "MLClient", FakeMLClient)
    install_arm(monkeypatch, lambda: world)


def install_arm(monkeypatch, world_of) -> None:
    """The requests the code under test sends to the resource manager itself (aml_sdk's PATCH of
    a cluster, through an azure-core ``PipelineClient``) answered from the world ``world_of()``
    returns: azure-core's ``RequestsTransport`` sends a resource manager's requests to the fake
    transport (any other host, such as the twin's Azurite, as it does), and its
    ``BearerTokenCredentialPolicy`` gets a resource manager's tokens from the fake credential
    (wrapping the one the code under test built). The SDK's own clients pass their transport and
    use their own policy classes: they are not touched."""
    from azure.core.pipeline import policies, transport

    def is_arm(url: str) -> bool:
        return url.split("/")[2] in ARM_HOSTS if "://" in url else False

    real_policy = policies.BearerTokenCredentialPolicy
    real_transport = transport.RequestsTransport

    class TokenPolicy(real_policy):  # type: ignore[misc,valid-type]
        def __init__(self, credential, *scopes, **kwargs):
            if scopes and all(is_arm(s) for s in scopes):
                credential = fake_credential(world_of(), credential)
            super().__init__(credential, *scopes, **kwargs)

    class Transport(real_transport):  # type: ignore[misc,valid-type]
        def send(self, request, **kwargs):
            if is_arm(request.url):
                return fake_transport(world_of()).send(request, **kwargs)
            return super().send(request, **kwargs)

    monkeypatch.setattr(policies, "BearerTokenCredentialPolicy", TokenPolicy)
    monkeypatch.setattr(transport, "RequestsTransport", Transport)


# The resource managers of the clouds (azure_auth.CLOUDS).
ARM_HOSTS = {"management.azure.com", "management.chinacloudapi.cn", "management.usgovcloudapi.net"}


def fake_download(world: World, jobs: Any):
    """``jobs.download`` over ``world``: the job asked through the real client, refused (the
    SDK's JobException) unless it has ended, its artifacts written where the SDK puts them
    (``<download_path>/artifacts/<path>``)."""
    from pathlib import Path

    from azure.ai.ml.exceptions import ErrorTarget, JobException
    from azure.ai.ml.operations._run_history_constants import RunHistoryConstants

    def download(name: str, *, download_path: Any = ".", output_name: Any = None, all: bool = False) -> None:
        world.calls["v2 download"] += 1
        status = jobs.get(name).status
        queue = world.faults.get("storage")
        if queue:
            # azure-storage-blob (which does not take the client's transport) raises this for the
            # storage's answer: a 403 as a storage firewall sends it.
            answer = queue.pop(0)
            world.calls[f"fault storage {answer}"] += 1
        else:
            answer = None
        if answer is not None:
            from azure.core.exceptions import HttpResponseError, ServiceResponseError
            if answer in ("reset", "timeout"):
                raise ServiceResponseError("('Connection aborted.', ConnectionResetError(104, 'Connection reset by "
                                           "peer'))")
            error = HttpResponseError(message="This request is not authorized to perform this operation.\n"
                                              "RequestId:0d2c4e1a-601e-0007-4f3a-1f1b2c000000\n"
                                              "ErrorCode:AuthorizationFailure")
            error.status_code = answer
            raise error
        if status not in RunHistoryConstants.TERMINAL_STATUSES:
            msg = f"This job is in state {status}. Download is allowed only in states " \
                  f"{RunHistoryConstants.TERMINAL_STATUSES}"
            raise JobException(message=msg, target=ErrorTarget.JOB, no_personal_data_message=msg)
        for path, text in world.jobs[name]["artifacts"].items():
            target = Path(download_path) / "artifacts" / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)

    return download


def write_certificate(path: Any) -> str:
    """A self-signed certificate with its private key, PEM, as a certificate service principal
    holds it (azure-identity's CertificateCredential reads it when it is built)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "amlhpc-test-sp")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    with open(path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


def fake_login(seen: list[dict[str, Any]] | None = None):
    """An azure-core HTTP transport that answers azure-identity's token requests as Microsoft Entra
    ID (any cloud's authority: tenant discovery, the token endpoint) and a managed identity
    endpoint (App Service's IDENTITY_ENDPOINT) do; every request is appended to ``seen``
    (method, host, path, query, form or None)."""
    import requests
    from urllib.parse import parse_qs, urlsplit

    from azure.core.pipeline.transport import HttpTransport
    from azure.core.rest._requests_basic import RestRequestsTransportResponse

    seen = [] if seen is None else seen

    def respond(request, payload: Any, status: int = 200):
        r = requests.Response()
        r.status_code = status
        r._content = json.dumps(payload).encode()
        r.raw = io.BytesIO(r._content)
        r.headers["Content-Type"] = "application/json"
        r.url = request.url
        response = RestRequestsTransportResponse(request=request, internal_response=r)
        response.read()
        return response

    class Login(HttpTransport):
        def __enter__(self):
            return self

        def __exit__(self, *args):
            pass

        def open(self):
            pass

        def close(self):
            pass

        def send(self, request, **kwargs):
            url = urlsplit(request.url)
            body = request_body(request, (str, bytes, dict))
            if body and not isinstance(body, dict):
                body = {k: v[0] for k, v in parse_qs(body.decode() if isinstance(body, bytes) else body).items()}
            form = body or None
            seen.append({"method": request.method, "host": url.netloc, "path": url.path,
                         "query": {k: v[0] for k, v in parse_qs(url.query).items()}, "form": form,
                         "headers": dict(request.headers)})
            tenant = url.path.split("/")[1] if url.path.count("/") > 1 else ""
            if url.path.endswith("/.well-known/openid-configuration"):
                base = f"https://{url.netloc}/{tenant}"
                return respond(request, {"token_endpoint": f"{base}/oauth2/v2.0/token", "issuer": f"{base}/v2.0",
                                         "authorization_endpoint": f"{base}/oauth2/v2.0/authorize"})
            if url.path.endswith("/oauth2/v2.0/token"):
                return respond(request, {"access_token": f"token-from-{url.netloc}", "expires_in": 3600,
                                         "token_type": "Bearer"})
            if url.netloc == "169.254.169.254" or url.path.startswith("/msi"):
                return respond(request, {"access_token": "token-from-managed-identity", "expires_on":
                                         int(time.time()) + 3600, "resource": "x", "token_type": "Bearer"})
            raise AssertionError(f"the fake login has no answer for {request.method} {request.url}")

    return Login()
