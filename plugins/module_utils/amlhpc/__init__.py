"""amlhpc: the project's pure logic, in plain functions.

Shared by three kinds of caller, so the code here imports only the standard library and
its own siblings (relatively):

* Ansible modules, through AnsiballZ: ``from ansible.module_utils.amlhpc.shards import ...``
* controller-side plugins (inventory, action, filter), which put ``plugins/module_utils``
  on ``sys.path`` (see ``amlhpc_path`` below) and ``import amlhpc.shards``;
* the tests and the CosmoFlow workload, which import ``amlhpc`` the same way.
"""
