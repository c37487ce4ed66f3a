# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Callback plugin: compile each task's templates once, before its workers fork."""

from __future__ import annotations

DOCUMENTATION = r"""
name: template_cache
type: aggregate
short_description: Compile each task's templates once, in the main process, before its workers fork
version_added: "1.0.0"
description:
  - Ansible compiles every template it renders in the worker it forks for each host-task, and
    a worker keeps nothing for the next one, so a task on 32 nodes compiles its role's
    defaults, its arguments and the inventory's settings 32 times, and loads the filter and
    test plugins they name 32 times.
  - This callback keeps the code Jinja generates for a template string in the main process,
    and at each play and task start compiles that play's and task's templates there (without
    rendering them; a lookup does not run). The workers inherit the compiled code and the
    loaded plugins by C(fork).
  - What is compiled at the start of a play, from its first host's variables (inventory,
    group and host variables, play variables, cached facts), and at the start of a task, from
    its arguments, its keywords (C(become), C(environment), C(loop), ...), its and its blocks'
    variables, and its role's defaults and variables. Only templates marked trusted are
    compiled; a string from a module result or a fact is never a template.
  - The task's conditionals (C(when), C(changed_when), C(failed_when), C(until)) and its
    C(register) projection are compiled there too, as expressions, without being evaluated.
  - At a role's first task it also reads the role's argument spec where the role's own task
    checks the role's variables (a role imported with C(rolespec_validate=false); see
    C(plugins/plugin_utils/role_args.py)), so that no node's worker reads and parses the file
    again.
  - At each task start it also moves every object the main process holds into the garbage
    collector's permanent generation (C(gc.freeze)). Each worker forked for the task inherits
    them, and its collector no longer walks them (a full collection in a worker walked the
    whole inherited heap, about 50 ms of CPU and 4,400 copied pages each time). The main process
    unfreezes them at each play start, so that its own next full collection frees what a play
    left behind. On a 32-node rerun, with the freeze alone, its memory grew by about 3 MB.
  - Each filter and test name is looked up once per process, not once per Jinja environment
    (each worker's templar makes new ones, and Ansible looked a Jinja filter such as
    C(length), or a collection's, up through the plugin folders each time, about 0.4 ms). The
    names the task's templates name are looked up in the main process while they compile.
  - The lookup plugins a template names (C(lookup('amlhpc.azureml.blob_sas', ...)), C(query))
    are loaded in the main process too, without running them; every node's worker that
    templated the inventory's C(stage_sas) loaded the lookup's code again.
  - It loads Ansible's own filter and test plugins once, in the main process. A worker loads
    them all at its first use of one that no template of the task names (a test named in
    C(selectattr), C(map)), and each loaded them again. With this and the freeze above, the
    SSH trust's task templated its arguments in 3.5 ms of CPU per node instead of 7.9 ms.
  - Templates and conditionals render exactly as before; the cache key holds the source and
    the settings its code depends on (delimiters, whitespace, backslash escaping, code
    generator).
  - On a 32-node rerun of C(site.yml) (AMD EPYC, 2 cores), the workers compiled 2,167
    templates and expressions without it and 10 with it; with it off and on alternately, the
    controller's CPU per rerun dropped by 1.8-4.0 s (README, round 16).
  - Enable it with C(callbacks_enabled = amlhpc.azureml.template_cache) in C(ansible.cfg) (the
    project's C(ansible.cfg) does). It prints nothing; with C(-vvv) it says at the end how many
    templates the main process compiled.
requirements:
  - ansible-core 2.21 (it wraps the Jinja environment's compile step of this release)
"""

import gc

from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

from ansible_collections.amlhpc.azureml.plugins.plugin_utils import role_args, template_cache

display = Display()

# Task keywords whose value may be a template rendered in the worker.
_KEYWORDS = ("name", "become", "become_user", "become_method", "become_flags", "environment", "delegate_to",
             "run_once", "no_log", "ignore_errors", "timeout", "check_mode", "diff", "loop")
# Task keywords that are conditionals (expressions).
_CONDITIONALS = ("when", "changed_when", "failed_when", "until")
# Variables that are not settings: the other hosts' variables and Ansible's own copies.
_SKIPPED = frozenset(("hostvars", "vars", "groups", "group_names", "play_hosts", "ansible_play_hosts",
                      "ansible_play_hosts_all", "ansible_play_batch"))


class CallbackModule(CallbackBase):
    """Warm the template cache at each play and task start."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "amlhpc.azureml.template_cache"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cache = template_cache.install()
        self._seen_roles: set[int] = set()
        template_cache.load_builtin_jinja_plugins()

    def v2_playbook_on_play_start(self, play):
        # The last play's frozen objects back in the collector's reach (its next full
        # collection frees the cycles among them); each task start freezes again.
        gc.unfreeze()
        manager = play.get_variable_manager()
        inventory = getattr(manager, "_inventory", None)
        try:
            hosts = inventory.get_hosts(play.hosts) if inventory is not None else []
            play_vars = manager.get_vars(play=play, host=hosts[0]) if hosts else play.get_vars()
        except Exception as exc:  # pylint: disable=broad-exception-caught  # a pattern to template: the run says why
            display.vvv(f"template_cache: play {play.get_name()!r} not warmed: {exc}")
            return
        found: set[str] = set()
        for name, value in play_vars.items():
            if name not in _SKIPPED:
                template_cache.templates_in(value, found)
        template_cache.warm(found)

    def v2_playbook_on_task_start(self, task, is_conditional):
        found = template_cache.templates_in(task.args)
        for keyword in _KEYWORDS:
            template_cache.templates_in(getattr(task, keyword, None), found)
        template_cache.templates_in(task.get_vars(), found)
        role = getattr(task, "_role", None)
        if role is not None and id(role) not in self._seen_roles:
            self._seen_roles.add(id(role))
            template_cache.templates_in(role.get_default_vars(), found)
            template_cache.templates_in(role.get_vars(), found)
            role_args.read_before_fork(role)
        template_cache.warm(found)
        conditionals = []
        for keyword in _CONDITIONALS:
            value = getattr(task, keyword, None)
            conditionals.extend(value if isinstance(value, list) else [value])
        template_cache.warm_expressions(conditionals, escape_backslashes=False)
        register = getattr(task, "register", None)  # {name: the projection of the result}
        if isinstance(register, dict):
            template_cache.warm_expressions(register.values(), escape_backslashes=True)
        # What the main process holds now, the workers of this task inherit: out of the
        # collector's reach, a worker's collection does not walk (and so copy) every page of it.
        gc.freeze()

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def v2_playbook_on_stats(self, stats):
        display.vvv(f"template_cache: {self._cache.compiled} templates compiled in the main process, "
                    f"{self._cache.hits} found compiled")
