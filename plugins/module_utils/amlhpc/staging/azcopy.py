# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""azcopy for data staging: one import for the pieces, each in its own file.

``azcopy_sas``       SAS tokens: redaction, parsing, checks before a job starts
``azcopy_cmd``       command lines, URLs and the authentication environment (SAS or identity)
``azcopy_progress``  running azcopy with JSON output, its result, the progress series
``azcopy_files``     staged files: final names, azcopy's leftovers, size and checksum checks
``azcopy_sync``      one node's stage as a sync with the plan (fetch, repair, report gone): its
                    source, shard plan and watch as three small objects
``azcopy_paths``     names from blobs and node listings kept inside their folder
``azcopy_handoff``   which files outside a node's shard are gone and which another node's, exactly
``azcopy_lock``      one stage of a shard at a time; a dead stage's leftovers taken over
``azcopy_watch``     the controller dies, the node's stage ends
``azcopy_model``     the staging-time model (account egress, NIC, decompression CPU) and time limit

Standard library only.
"""

from __future__ import annotations

from .azcopy_cmd import (  # noqa: F401
    AUTH_MODES,
    auth_env,
    blob_url,
    copy_download_command,
    copy_upload_command,
    with_auth_env,
    with_sas,
)
from .azcopy_files import (  # noqa: F401
    AZCOPY_TEMP_PREFIX,
    MANIFEST_DIRNAME,
    STAGING_DIRNAME,
    VERIFY_MODES,
    ExpectedFile,
    check_file,
    final_name,
    finalize,
    is_gzip_file,
    private_azcopy_env,
    remove_partial,
    sha256_file,
)
from .azcopy_progress import (  # noqa: F401
    AzcopyMessage,
    Cancel,
    JobResult,
    ProgressSeries,
    explain_failure,
    parse_line,
    run_azcopy,
)
from .azcopy_sas import SAS_PERMISSION_NAMES, SasCheck, check_sas, parse_sas, redact  # noqa: F401
from .azcopy_sync import (  # noqa: F401
    Limits,
    ShardPlan,
    StageError,
    StageSource,
    StageWatch,
    plan_sync,
    prune_refusal,
    shard_is_staged,
    stage_shard,
    survey,
)

# What the workload, the modules and the tests import from here.
__all__ = [
    "AUTH_MODES",
    "AZCOPY_TEMP_PREFIX",
    "AzcopyMessage",
    "auth_env",
    "blob_url",
    "copy_download_command",
    "copy_upload_command",
    "with_auth_env",
    "with_sas",
    "MANIFEST_DIRNAME",
    "STAGING_DIRNAME",
    "VERIFY_MODES",
    "ExpectedFile",
    "check_file",
    "final_name",
    "finalize",
    "is_gzip_file",
    "private_azcopy_env",
    "remove_partial",
    "sha256_file",
    "JobResult",
    "ProgressSeries",
    "explain_failure",
    "parse_line",
    "run_azcopy",
    "SAS_PERMISSION_NAMES",
    "SasCheck",
    "check_sas",
    "parse_sas",
    "redact",
    "StageError",
    "Limits",
    "ShardPlan",
    "StageSource",
    "StageWatch",
    "Cancel",
    "plan_sync",
    "prune_refusal",
    "shard_is_staged",
    "stage_shard",
    "survey",
]
