# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Whether the operator's Ansible settings leave a node's host key pins in force.

The azureml_compute inventory plugin points ssh at its pinned known_hosts with
``ansible_ssh_common_args`` (``-o UserKnownHostsFile=<file> -o GlobalKnownHostsFile=/dev/null
-o StrictHostKeyChecking=yes``). Ansible's ssh connection builds the command line as
``ssh_args``, then ``-o StrictHostKeyChecking=no`` where ``host_key_checking`` is off, then
``ssh_common_args``, then ``ssh_extra_args`` (``sftp_extra_args``, ``scp_extra_args`` for file
transfers), and ssh takes the **first** value of each option. So:

* ``host_key_checking`` off voids the pins. Its value is the last defined of the variables
  ``ansible_host_key_checking``, ``ansible_ssh_host_key_checking`` (Ansible's order), else the
  environment or ansible.cfg. The plugin sets both variables to true on each host it pins: an
  inventory source's host vars outrank the environment, ansible.cfg and every group_vars, so
  only a setting above them (host_vars files, play vars, extra vars) can turn it off;
* ``ssh_args`` come first: a ``StrictHostKeyChecking``, ``UserKnownHostsFile`` or
  ``GlobalKnownHostsFile`` there wins over the plugin's;
* ``ansible_ssh_common_args`` set above the plugin's host var replaces the plugin's options;
* ``KnownHostsCommand`` anywhere adds keys that no pin holds.

:func:`host_key_problem` takes the settings as a task sees them (variables resolved by
Ansible's precedence, the environment and ansible.cfg through the ``config`` lookup) and
answers ``""`` (ssh checks the node against its pin) or the one sentence that refuses the run,
naming the setting and the fix.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

# The ssh connection's host_key_checking variables, in Ansible's order (the last defined wins).
HOST_KEY_CHECKING_VARS = ("ansible_host_key_checking", "ansible_ssh_host_key_checking")
# The other options of the ssh connection that reach the command line, in its order, with
# their variables (the last defined wins) and, for the sentence, where else they are set.
ARG_OPTIONS = (
    ("ssh_args", ("ansible_ssh_args",), "ssh_args in ansible.cfg's [ssh_connection] (ANSIBLE_SSH_ARGS)"),
    ("ssh_common_args", ("ansible_ssh_common_args",),
     "ssh_common_args in ansible.cfg's [ssh_connection] (ANSIBLE_SSH_COMMON_ARGS)"),
    ("ssh_extra_args", ("ansible_ssh_extra_args",),
     "ssh_extra_args in ansible.cfg's [ssh_connection] (ANSIBLE_SSH_EXTRA_ARGS)"),
    ("sftp_extra_args", ("ansible_sftp_extra_args",),
     "sftp_extra_args in ansible.cfg's [ssh_connection] (ANSIBLE_SFTP_EXTRA_ARGS)"),
    ("scp_extra_args", ("ansible_scp_extra_args",),
     "scp_extra_args in ansible.cfg's [ssh_connection] (ANSIBLE_SCP_EXTRA_ARGS)"),
)
# ssh's getopt string (OpenSSH 9): the flags that take an argument.
_WITH_ARGUMENT = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
_FALSE = frozenset({"false", "no", "off", "n", "0", "f"})
_FIX = ("remove it (the azureml_compute inventory keeps host key checking on against each node's pinned keys; "
        "a node that was re-imaged is let in with known_hosts_repin)")


def _is_false(value: Any) -> bool:
    return value is False or str(value).strip().lower() in _FALSE


def ssh_options(args: str) -> list[tuple[str, str]]:
    """The ``-o`` options of an ssh argument string, in order: ``(name lowered, value)``, as ssh
    reads them (``-o Name=value``, ``-o 'Name value'``, ``-oName=value``, ``-4o Name=value``)."""
    try:
        words = shlex.split(args or "")
    except ValueError:
        words = (args or "").split()
    out = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("-") or word == "-":
            continue
        position = 1
        while position < len(word):
            flag = word[position]
            position += 1
            if flag in _WITH_ARGUMENT:
                value = word[position:]
                if not value and index < len(words):
                    value, index = words[index], index + 1
                if flag == "o":
                    name, _sep, rest = value.strip().replace("=", " ", 1).partition(" ")
                    out.append((name.lower(), rest.strip().strip('"')))
                break
    return out


def resolved(settings: Mapping[str, Any], config: Mapping[str, Any], option: str,
             names: tuple[str, ...], elsewhere: str) -> tuple[Any, str]:
    """(value, where it was set) of a connection option: the last defined variable, else config."""
    for name in reversed(names):
        if settings.get(name) is not None:
            return settings[name], name
    return config.get(option), elsewhere


def host_key_problem(host: str, settings: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> str:
    """``""`` where ssh checks ``host`` against its pinned known_hosts only, else the sentence.

    ``settings``: the host's variables as a task sees them (``aml_known_hosts_file``, the
    variables of :data:`HOST_KEY_CHECKING_VARS` and :data:`ARG_OPTIONS`; undefined ones left out
    or None). ``config``: the ssh connection's settings from the environment and ansible.cfg
    (``host_key_checking``, ``ssh_args``, ...). A host without ``aml_known_hosts_file`` is not
    pinned by the plugin and has no problem here.
    """
    config = config or {}
    pinned_file = settings.get("aml_known_hosts_file")
    if not pinned_file:
        return ""
    checking, where = resolved(settings, config, "host_key_checking", HOST_KEY_CHECKING_VARS,
                               "host_key_checking in ansible.cfg or ANSIBLE_HOST_KEY_CHECKING")
    if checking is not None and _is_false(checking):
        return (f"host {host}: {where} turns host key checking off, which makes ssh accept a changed host key "
                f"and voids the node's pin: {_FIX}")
    want = {"stricthostkeychecking": None, "userknownhostsfile": str(pinned_file),
            "globalknownhostsfile": "/dev/null"}
    seen: set[str] = set()
    for option, names, elsewhere in ARG_OPTIONS:
        args, where = resolved(settings, config, option, names, elsewhere)
        for name, value in ssh_options(str(args or "")):
            if name == "knownhostscommand" and value.lower() != "none":
                return (f"host {host}: {where} sets KnownHostsCommand, which makes ssh trust keys the node's pin "
                        f"does not hold: {_FIX}")
            if name not in want or name in seen:
                continue
            seen.add(name)
            good = (value.lower() in ("yes", "true") if name == "stricthostkeychecking"
                    else value == want[name])
            if not good:
                return (f"host {host}: {where} sets {_CASED[name]}={value} ahead of the pinned "
                        f"{_CASED[name]}={want[name] or 'yes'}, and ssh takes the first value, which voids the "
                        f"node's pin: {_FIX}")
    missing = sorted(_CASED[name] for name in want if name not in seen)
    if missing:
        _value, where = resolved(settings, config, "ssh_common_args", ("ansible_ssh_common_args",), "")
        return (f"host {host}: {where or 'ansible_ssh_common_args'} replaces the inventory's ssh options, so ssh "
                f"has no {', '.join(missing)} of the node's pin: set ssh_common_args in the azureml_compute "
                "inventory file instead (they are added after the pinned options)")
    return ""


_CASED = {"stricthostkeychecking": "StrictHostKeyChecking", "userknownhostsfile": "UserKnownHostsFile",
          "globalknownhostsfile": "GlobalKnownHostsFile"}
