# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""amlhpc: the project's pure logic, in plain functions.

Shared by three kinds of caller, so the code here imports only the standard library and
its own siblings (relatively, so the package works under any name):

* Ansible modules and controller plugins (inventory, action, filter, lookup), as
  ``ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc`` (AnsiballZ ships it
  with each module);
* the CosmoFlow workload, which gets this very folder as the top-level package ``amlhpc``
  (``aml_job`` puts it next to the training code in the job's snapshot; the local backend
  puts ``plugins/module_utils`` on the job's ``PYTHONPATH``);
* the tests, where ``amlhpc`` and the collection name are the same module objects
  (tests/conftest.py).
"""
