# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The only code that imports the Azure SDKs (azure-ai-ml, azureml-core, azure-identity,
azure-storage-blob): the inventory's and aml_compute_cluster's connections, aml_job's two SDK
backends and the Blob listing (which the job's own stage uses too). Each SDK is imported where it
is used, so the rest of the package imports without them."""
