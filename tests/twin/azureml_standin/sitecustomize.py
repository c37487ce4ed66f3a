"""Put the twin's AzureML in place of azure-ai-ml's MLClient (and, where the state file has
"computes", of azureml-core's Workspace/AmlCompute/ComputeTarget), in every Python started with
this folder on PYTHONPATH and TWIN_AZUREML_STATE set (ansible-playbook itself, for the inventory
plugin, and the Ansible modules it runs on the controller). Nothing else is touched; without
the variable this file does nothing. See tests/twin/azureml.py."""

import importlib.abc
import importlib.util
import json
import os
import sys

if os.environ.get("TWIN_AZUREML_STATE"):

    def _twin():
        tests = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if tests not in sys.path:
            sys.path.append(tests)
        import twin.azureml
        return twin.azureml

    def _azure_ai_ml(module):
        module.MLClient = _twin().twin_ml_client(module.MLClient)

    def _azureml_core(module):
        with open(os.environ["TWIN_AZUREML_STATE"]) as state:
            stands_in = "computes" in json.load(state)  # only where the test stands in for the cluster's API
        if stands_in:
            # The import system names it in its package only after this returns; the fakes
            # import azureml.core.compute now.
            setattr(sys.modules["azureml"], "core", module)
            _twin().install_azureml_core()

    class _TwinAzureMLFinder(importlib.abc.MetaPathFinder):
        """After the real azure.ai.ml / azureml.core is imported, put the twin in its place."""

        pending = {"azure.ai.ml": _azure_ai_ml, "azureml.core": _azureml_core}

        def find_spec(self, name, path, target=None):
            hook = self.pending.pop(name, None)
            if hook is None:
                return None
            if not self.pending:
                sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            real_exec = spec.loader.exec_module

            def exec_module(module):
                real_exec(module)
                hook(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _TwinAzureMLFinder())
