"""Put the twin's AzureML in place of azure-ai-ml's MLClient, in every Python started with this
folder on PYTHONPATH and TWIN_AZUREML_STATE set (the Ansible modules the test's
ansible-playbook runs on the controller). Nothing else is touched; without the variable this
file does nothing. See tests/twin/azureml.py."""

import importlib.abc
import importlib.util
import os
import sys

if os.environ.get("TWIN_AZUREML_STATE"):

    class _TwinAzureMLFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "azure.ai.ml":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            real_exec = spec.loader.exec_module

            def exec_module(module):
                real_exec(module)
                tests = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                if tests not in sys.path:
                    sys.path.append(tests)
                from twin.azureml import TwinMLClient
                module.MLClient = TwinMLClient

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _TwinAzureMLFinder())
