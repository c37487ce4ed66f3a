"""`.ci/public-apis` (run by `make lint`): every use of a private Ansible name in plugins/ is
named, file:line; public ones are not. Tried on snippets of each kind (the private ones are the
lines 2.1.0 had: plugin_utils/pipelined.py, inventory/amlhpc_yaml.py, the inventory plugin) and
on this tree's files."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_loader = importlib.machinery.SourceFileLoader("public_apis", str(ROOT / ".ci" / "public-apis"))
_spec = importlib.util.spec_from_loader("public_apis", _loader)
public_apis = importlib.util.module_from_spec(_spec)
_loader.exec_module(public_apis)

PRIVATE = {
    "internal": "from ansible._internal._templating import _engine\n",
    "internal import": "import ansible._internal\n",
    "release": "from ansible.release import __version__\n",
    "loader": "from ansible.plugins.loader import connection_loader\n",
    "loader module": "from ansible.plugins import loader\n",
    "builtin plugin": "from ansible.plugins.inventory.yaml import InventoryModule\n",
    "builtin plugin module": "from ansible.plugins.inventory import yaml\n",
    "config manager": "from ansible import constants as C\nC.config.get_config_value('X')\n",
    "pipelining check": "def run(self):\n    return self._is_pipelining_enabled('new')\n",
    "connection option": "def run(self):\n    self._connection.set_option('pipelining', True)\n",
    "monkeypatch": "from ansible.plugins.action import ActionBase\nActionBase.run = lambda self: None\n",
    "gc": "import gc\ngc.freeze()\n",
}
PUBLIC = {
    "action base": "from ansible.plugins.action import ActionBase\nclass A(ActionBase):\n    pass\n",
    "inventory bases": "from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable\n",
    "inventory cache helper": "from ansible.plugins.inventory import get_cache_plugin\n",
    "release, public copy": "from ansible.module_utils.ansible_release import __version__\n",
    "own options": "def parse(self):\n    self.set_option('cache', False)\n    self.get_option('x')\n",
    "constants": "from ansible import constants as C\nkeep = C.DEFAULT_KEEP_REMOTE_FILES\n",
    "execute module": "def run(self):\n    return self._execute_module(module_name='x')\n",
}


@pytest.mark.parametrize("case", list(PRIVATE))
def test_each_private_use_is_named(case, tmp_path):
    path = tmp_path / "plugin.py"
    path.write_text(PRIVATE[case])
    assert public_apis.problems(path), case


@pytest.mark.parametrize("case", list(PUBLIC))
def test_public_uses_are_not(case, tmp_path):
    path = tmp_path / "plugin.py"
    path.write_text(PUBLIC[case])
    assert public_apis.problems(path) == [], case


def test_this_trees_plugins_are_clean():
    """What `make lint` runs: every plugin, the inventory plugin included."""
    res = subprocess.run([sys.executable, str(ROOT / ".ci" / "public-apis"), "plugins"], cwd=ROOT, capture_output=True,
                         text=True, check=False)
    assert res.returncode == 0 and res.stdout == "", res.stdout
