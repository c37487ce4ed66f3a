"""The pins hold whatever the operator's Ansible settings say (amlhpc.trust.host_key_checks).

Settings are generated at every level Ansible reads them from, lowest first: the environment
and ansible.cfg, group_vars, the inventory plugin's host vars (what azureml_compute sets on a
pinned node), host_vars files, play vars, extra vars. The test resolves them by Ansible's
documented variable precedence, builds the ssh command line in the ssh connection's order
(``ssh_args``, ``StrictHostKeyChecking=no`` where host key checking is off, ``ssh_common_args``,
the extra args), and asks real OpenSSH (``ssh -G``: the effective configuration, no
connection) whether it checks the node against its pinned file only. The promise:

* :func:`host_key_problem` answers "" exactly where ssh checks the pin, and a sentence (naming
  the setting and the fix) exactly where it does not: never a run that voids a pin, never a
  refusal that ssh would not need;
* settings at the levels the plugin's host vars outrank (environment, ansible.cfg, group_vars)
  never void a pin.
"""

from __future__ import annotations

import subprocess

from hypothesis import example, given, settings
from hypothesis import strategies as st

from amlhpc.trust.host_key_checks import host_key_problem, ssh_options

PIN = "/p/state/known_hosts"
PLUGIN = {"aml_known_hosts_file": PIN,
          "ansible_ssh_common_args": f"-o UserKnownHostsFile={PIN} -o GlobalKnownHostsFile=/dev/null "
                                     "-o StrictHostKeyChecking=yes",
          "ansible_host_key_checking": True, "ansible_ssh_host_key_checking": True}
LEVELS = ("group_vars", "plugin", "host_vars", "play_vars", "extra_vars")  # lowest first
ARG_VARS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_sftp_extra_args")
CONFIG_OF = {"ansible_ssh_args": "ssh_args", "ansible_ssh_common_args": "ssh_common_args",
             "ansible_ssh_extra_args": "ssh_extra_args", "ansible_sftp_extra_args": "sftp_extra_args"}

OPTION = st.sampled_from([
    ("StrictHostKeyChecking", "yes"), ("StrictHostKeyChecking", "no"), ("StrictHostKeyChecking", "accept-new"),
    ("StrictHostKeyChecking", "ask"), ("UserKnownHostsFile", PIN), ("UserKnownHostsFile", "/tmp/other"),
    ("UserKnownHostsFile", "/dev/null"), ("GlobalKnownHostsFile", "/dev/null"),
    ("GlobalKnownHostsFile", "/etc/ssh/ssh_known_hosts"), ("KnownHostsCommand", "/bin/cat %k"),
    ("ControlMaster", "auto"), ("ServerAliveInterval", "30"), ("stricthostkeychecking", "No")])
FORM = st.sampled_from(["-o {n}={v}", "-o{n}={v}", "-o '{n} {v}'", "-C -o {n}={v}", "-4o {n}={v}"])


@st.composite
def args(draw) -> str:
    parts = [draw(FORM).format(n=n, v=v) for n, v in draw(st.lists(OPTION, max_size=3))]
    return " ".join(parts)


BOOL = st.sampled_from([True, False, "False", "no", "yes", "true", "0"])


@st.composite
def level(draw) -> dict:
    out = {}
    for name in ("ansible_host_key_checking", "ansible_ssh_host_key_checking"):
        if draw(st.booleans()):
            out[name] = draw(BOOL)
    for name in ARG_VARS:
        if draw(st.integers(0, 3)) == 0:
            out[name] = draw(args())
    return out


@st.composite
def config(draw) -> dict:
    out = {}
    if draw(st.booleans()):
        out["host_key_checking"] = draw(st.sampled_from([True, False]))
    for name in CONFIG_OF.values():
        if draw(st.integers(0, 2)) == 0:
            out[name] = draw(args())
    return out


def resolve(levels: dict[str, dict]) -> dict:
    """Ansible's variable precedence: a variable set at a higher level wins."""
    out: dict = {}
    for name in LEVELS:
        out.update(levels.get(name, {}))
    return out


def _false(value) -> bool:
    return str(value).lower() in ("false", "no", "0", "off", "n", "f")


def command_lines(variables: dict, cfg: dict) -> list[list[str]]:
    """The option words of the ssh command and the sftp command, in the ssh connection's order."""
    def option(var):
        return variables[var] if variables.get(var) is not None else cfg.get(CONFIG_OF[var])

    checking = variables.get("ansible_ssh_host_key_checking", variables.get("ansible_host_key_checking",
                                                                            cfg.get("host_key_checking", True)))
    head = [option("ansible_ssh_args") or ""]
    if _false(checking):
        head.append("-o StrictHostKeyChecking=no")
    head.append(option("ansible_ssh_common_args") or "")
    return [head + [option("ansible_ssh_extra_args") or ""], head + [option("ansible_sftp_extra_args") or ""]]


def ssh_checks_the_pin(words: list[str]) -> bool:
    line = " ".join(w for w in words if w)
    said = subprocess.run(f"ssh -G -F /dev/null {line} node", shell=True, capture_output=True, text=True,
                          check=True).stdout
    config_of = dict(row.split(" ", 1) for row in said.splitlines() if " " in row)
    return (config_of.get("stricthostkeychecking") == "true" and config_of.get("userknownhostsfile") == PIN
            and config_of.get("globalknownhostsfile") == "/dev/null" and "knownhostscommand" not in config_of)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(levels=st.fixed_dictionaries({name: level() for name in LEVELS if name != "plugin"}), cfg=config())
@example(levels={"group_vars": {}, "host_vars": {}, "play_vars": {}, "extra_vars": {}},
         cfg={"host_key_checking": False})  # the ANSIBLE_HOST_KEY_CHECKING=False
@example(levels={"group_vars": {}, "host_vars": {"ansible_host_key_checking": False}, "play_vars": {},
                 "extra_vars": {}}, cfg={})  # the later variable of the two is the plugin's, still true
@example(levels={"group_vars": {}, "host_vars": {}, "play_vars": {},
                 "extra_vars": {"ansible_ssh_host_key_checking": "no"}}, cfg={})
def test_a_run_goes_on_exactly_where_ssh_checks_the_pin(levels, cfg):
    variables = resolve({**levels, "plugin": PLUGIN})
    problem = host_key_problem("gpu-0", variables, cfg)
    safe = all(ssh_checks_the_pin(words) for words in command_lines(variables, cfg))
    assert (problem == "") == safe, (problem, variables, cfg)
    if problem:
        assert problem.startswith("host gpu-0: ") and (": remove it" in problem or ": set " in problem), problem


@settings(max_examples=100, deadline=None, derandomize=True)
@given(group_vars=level(), cfg=config())
def test_settings_below_the_inventory_s_host_vars_never_void_a_pin(group_vars, cfg):
    # What the plugin's host vars stand for: host key checking and the common args (ssh_args come
    # before the pins and the extra args add KnownHostsCommand wherever they are set).
    group_vars = {k: v for k, v in group_vars.items() if k not in ("ansible_ssh_args", "ansible_ssh_extra_args",
                                                                   "ansible_sftp_extra_args")}
    cfg = {k: v for k, v in cfg.items() if k in ("host_key_checking", "ssh_common_args")}
    variables = resolve({"group_vars": group_vars, "plugin": PLUGIN})
    assert host_key_problem("gpu-0", variables, cfg) == ""
    assert all(ssh_checks_the_pin(words) for words in command_lines(variables, cfg))


def test_the_sentences_name_the_setting_and_the_fix():
    off = host_key_problem("gpu-1", {**PLUGIN, "ansible_ssh_host_key_checking": False})
    assert off.startswith("host gpu-1: ansible_ssh_host_key_checking turns host key checking off")
    assert "known_hosts_repin" in off
    first = host_key_problem("gpu-1", PLUGIN, {"ssh_args": "-o StrictHostKeyChecking=no"})
    assert "ssh_args in ansible.cfg's [ssh_connection] (ANSIBLE_SSH_ARGS) sets StrictHostKeyChecking=no" in first
    replaced = host_key_problem("gpu-1", {**PLUGIN, "ansible_ssh_common_args": "-o ForwardAgent=no"})
    assert "ansible_ssh_common_args replaces the inventory's ssh options" in replaced
    assert "set ssh_common_args in the azureml_compute inventory file" in replaced
    assert host_key_problem("localhost", {"ansible_host_key_checking": False}) == ""  # not a pinned node


def test_ssh_options_are_read_as_ssh_reads_them():
    assert ssh_options("-o A=1 -oB=2 -o 'C 3' -4o D=4 -C -p 22") == [
        ("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]
    assert ssh_options("-F /x -o StrictHostKeyChecking=no") == [("stricthostkeychecking", "no")]
