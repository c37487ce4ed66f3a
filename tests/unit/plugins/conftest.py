"""Unit tests of the collection's plugins, in every ansible-test units context."""

from __future__ import annotations

import importlib
import warnings

# The Azure SDKs the plugins import where they run (aml_sdk, aml_job_v1/v2, blob listing), imported
# once here: ansible-test units runs each test in a fork of its worker (its ansible_forked
# plugin), so an import a test made itself was made again by every test, 2.5 s each for
# azure-ai-ml (the modules context took 383 s for 212 tests on 2 cores; about 25 s without forks).
# An SDK that is not installed is left to the tests that need it.
for _sdk in ("azure.identity", "azure.storage.blob", "azure.ai.ml", "azure.ai.ml.entities", "azureml.core",
             "azureml.core.compute", "azureml.core.runconfig"):
    try:
        with warnings.catch_warnings():  # their import-time deprecations (marshmallow's) are no test's
            warnings.simplefilter("ignore")
            importlib.import_module(_sdk)
    except ImportError:
        pass
