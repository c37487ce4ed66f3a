"""Templates compiled once in the main process and inherited by forked workers
(plugins/plugin_utils/template_cache.py, the amlhpc.azureml.template_cache callback): every
template renders as Ansible renders it without the cache, errors included, and a worker
forked after :func:`warm` compiles none of the templates it warmed."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleError
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from ansible._internal._templating import _jinja_bits

ROOT = Path(__file__).resolve().parents[2]
_NAME = "amlhpc_template_cache_under_test"
_spec = importlib.util.spec_from_file_location(_NAME, ROOT / "plugins" / "plugin_utils" / "template_cache.py")
template_cache = importlib.util.module_from_spec(_spec)
sys.modules[_NAME] = template_cache  # its dataclass needs its module registered
_spec.loader.exec_module(template_cache)

init_plugin_loader()  # the lookup below is ansible.builtin's
T = trust_as_template
VARIABLES = {
    "a": "alpha", "b": "yes", "n": 3, "items": [1, 2, 3], "vm": "Standard_ND96isr_H100_v5",
    "nested": {"k": T("{{ a }}-x")}, "chained": T("{{ nested.k | upper }}"), "maybe": None,
}
TEMPLATES = [
    "{{ a }}",
    "{{ a | default('x') }}",
    "{{ b | bool }}",
    "{{ '16G' if 'h100' in vm | lower else '8G' }}",
    "pre-{{ a }}-{{ n * 2 }}-post",
    "{% for i in items %}{{ i }},{% endfor %}",
    "{{ chained }}",
    "{{ maybe if maybe is not none else 'none' }}",
    "{{ items | map('string') | join(':') }}",
    "{{ {'enabled': b | bool, 'count': items | length} }}",
    '{{ "c:\\new" }}',
    "#jinja2:variable_start_string:'[[', variable_end_string:']]'\n[[ a ]] {{ a }}",
    "{{ lookup('ansible.builtin.env', 'AMLHPC_TEMPLATE_CACHE_TEST') }}",
]
# These do not compile (an unknown filter is a compile error), and this one fails when rendered.
COMPILE_ERRORS = ["{{ a | amlhpc_no_such_filter }}", "{{ a ", "{% for %}"]
FAILING = COMPILE_ERRORS + ["{{ undefined_name }}"]


def render(template: str, **options):
    try:
        return ("ok", Templar(variables=VARIABLES).template(T(template), **options))
    except AnsibleError as exc:
        return ("error", type(exc).__name__, exc.message)


def in_a_forked_worker(cache, work):
    """(templates compiled, what ``work()`` returned) in a process forked now, as Ansible forks a
    worker per host-task."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            before = cache.compiled
            result = work()
            os.write(write, json.dumps([cache.compiled - before, result]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        compiled, result = json.loads(answer.read())
    os.waitpid(pid, 0)
    return compiled, [tuple(r) for r in result]


@pytest.fixture()
def cache(monkeypatch):
    monkeypatch.setenv("AMLHPC_TEMPLATE_CACHE_TEST", "from the environment")
    template_cache.uninstall()
    yield template_cache.install()
    template_cache.uninstall()


def test_every_template_renders_as_without_the_cache_and_is_compiled_once(cache, monkeypatch):
    template_cache.uninstall()
    plain = [render(t) for t in TEMPLATES + FAILING]
    assert all(r[0] == "ok" for r in plain[:len(TEMPLATES)]), plain
    assert all(r[0] == "error" for r in plain[len(TEMPLATES):]), plain
    cache = template_cache.install()
    first = [render(t) for t in TEMPLATES + FAILING]
    compiled = cache.compiled
    again = [render(t) for t in TEMPLATES + FAILING]
    assert first == plain and again == plain
    assert cache.compiled == compiled, "a template was compiled twice"
    assert cache.hits >= len(TEMPLATES)


def test_the_key_holds_the_settings_the_code_depends_on(cache):
    env = _jinja_bits.AnsibleEnvironment()
    key = template_cache.code_key(env, "{{ a }}", None, None, False)
    assert key == template_cache.code_key(_jinja_bits.AnsibleEnvironment(), "{{ a }}", None, None, False)
    assert key != template_cache.code_key(env, "{{ b }}", None, None, False)
    with _jinja_bits._TemplateCompileContext(escape_backslashes=True):
        escaped = template_cache.code_key(env, "{{ a }}", None, None, False)
    assert escaped != key
    other = _jinja_bits.AnsibleEnvironment()
    other.variable_start_string = "[["
    assert template_cache.code_key(other, "{{ a }}", None, None, False) != key
    other.autoescape = lambda name: True
    assert template_cache.code_key(other, "{{ a }}", None, None, False) is None
    assert template_cache.code_key(env, "{{ a }}", "name", None, False) != key


def test_a_backslash_escaped_and_an_unescaped_compile_do_not_share_code(cache):
    source = '{{ "a\\nb" }}'
    template_cache.uninstall()
    plain = render(source), render(source, escape_backslashes=False)
    assert plain[0] != plain[1]
    template_cache.install()
    assert (render(source), render(source, escape_backslashes=False)) == plain
    assert (render(source, escape_backslashes=False), render(source)) == (plain[1], plain[0])


def test_a_worker_forked_after_warm_compiles_none_of_the_warmed_templates(cache):
    in_variables = template_cache.templates_in(VARIABLES)  # as the callback walks a host's variables
    assert in_variables == {"{{ a }}-x", "{{ nested.k | upper }}"}
    warmed = template_cache.warm([T(t) for t in TEMPLATES + FAILING] + sorted(in_variables))
    assert warmed == len(TEMPLATES) + 1 + 2  # the undefined name compiles; it fails when rendered
    compiled, results = in_a_forked_worker(cache, lambda: [render(t) for t in TEMPLATES])
    assert compiled == 0 and all(r[0] == "ok" for r in results)


def test_warm_skips_what_does_not_compile_and_it_fails_where_rendered(cache):
    assert template_cache.warm([T("{{ a "), T("{{ a }}")]) == 1
    assert render("{{ a ")[0] == "error"


def test_templates_in_finds_trusted_templates_in_plain_and_yaml_containers_only():
    class Elsewhere(dict):  # e.g. hostvars: not walked
        pass

    value = {
        "one": T("{{ a }}"), "plain": "no template", "untrusted": "{{ from_a_fact }}",
        "list": [T("x{{ b }}"), {"deep": (T("{% if n %}1{% endif %}"),)}],
        "other": Elsewhere(x=T("{{ hidden }}")), "number": 5,
    }
    assert template_cache.templates_in(value) == {"{{ a }}", "x{{ b }}", "{% if n %}1{% endif %}"}


def test_uninstall_puts_back_ansible_s_own_compile(cache):
    assert _jinja_bits.AnsibleEnvironment.compile is not template_cache._ORIGINAL_COMPILE
    template_cache.uninstall()
    assert _jinja_bits.AnsibleEnvironment.compile is template_cache._ORIGINAL_COMPILE
    assert template_cache.active() is None


CONDITIONALS = ["a == 'alpha'", "n > 2 and b | bool", "'h100' in vm | lower", "maybe is none", "items | length == 3",
                "undefined_name is defined", "nested.k is search('x')", " a is string "]


def evaluate(conditional: str):
    try:
        return ("ok", Templar(variables=VARIABLES).evaluate_conditional(T(conditional)))
    except AnsibleError as exc:
        return ("error", type(exc).__name__, exc.message)


def test_conditionals_evaluate_as_without_the_cache_and_a_forked_worker_compiles_none(cache):
    broken = ["a ==", "a | amlhpc_no_such_filter"]
    template_cache.uninstall()
    plain = [evaluate(c) for c in CONDITIONALS + broken]
    assert [r[0] for r in plain] == ["ok"] * len(CONDITIONALS) + ["error"] * len(broken), plain
    cache = template_cache.install()
    assert template_cache.warm_expressions([T(c) for c in CONDITIONALS + broken] + [True, None], escape_backslashes=False) == len(CONDITIONALS)
    template_cache.warm(template_cache.templates_in(VARIABLES))  # nested.k is a template
    compiled, results = in_a_forked_worker(cache, lambda: [evaluate(c) for c in CONDITIONALS + broken])
    assert compiled == 0 and results == plain
    assert [evaluate(c) for c in CONDITIONALS + broken] == plain


def test_an_expression_and_a_template_of_the_same_text_do_not_share_code(cache):
    env = _jinja_bits.AnsibleEnvironment()
    template = template_cache.code_key(env, "a", None, None, False)
    assert template != template_cache.code_key(env, "a", None, None, False, expression=False)
    assert template_cache.code_key(env, "a", None, None, False, expression=False) != \
        template_cache.code_key(env, "a", None, None, False, expression=True)
    assert render("a") == ("ok", "a") and evaluate("a == 'alpha'") == ("ok", True)


_FORKED_LOADS = r'''
import json, os, sys, importlib.util
from ansible.plugins.loader import PluginLoader, init_plugin_loader
from ansible.template import Templar, trust_as_template
init_plugin_loader()
spec = importlib.util.spec_from_file_location("tc", sys.argv[1])
tc = importlib.util.module_from_spec(spec); sys.modules["tc"] = tc; spec.loader.exec_module(tc)
prepare, template, variables = sys.argv[2], trust_as_template(sys.argv[3]), json.loads(sys.argv[4])
if prepare == "load":
    tc.load_builtin_jinja_plugins()
elif prepare == "warm":
    tc.install()
    tc.warm([template, trust_as_template("{{ lookup('amlhpc.no_such.lookup', 'x') }}")])
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    loads = []
    original = PluginLoader._load_module_source
    def counted(self, *args, **kwargs):
        loads.append(self.type)
        return original(self, *args, **kwargs)
    PluginLoader._load_module_source = counted
    out = Templar(variables=variables).template(template)
    os.write(write, json.dumps([sorted(set(loads)), out]).encode())
    os._exit(0)
os.close(write)
print(os.fdopen(read).read())
os.waitpid(pid, 0)
'''


def plugin_loads_in_a_forked_worker(prepare: str, template: str, variables: dict | None = None) -> tuple[list, object]:
    """(the plugin types whose code a worker loaded to render ``template``, what it rendered), in
    a fresh interpreter whose main process first did ``prepare`` ("load": the builtin Jinja
    plugins; "warm": the cache installed and the template warmed; "none": nothing)."""
    res = subprocess.run([sys.executable, "-c", _FORKED_LOADS, str(ROOT / "plugins" / "plugin_utils" / "template_cache.py"),
                          prepare, template, json.dumps(variables or {})],
                         capture_output=True, text=True, timeout=120, check=True)
    loaded, out = json.loads(res.stdout)
    return loaded, out


@pytest.mark.parametrize("load", ["load", "none"])
def test_a_worker_forked_after_the_builtin_plugins_were_loaded_loads_none(load):
    """A test named by a string (selectattr's 'equalto') is looked up when rendered, not when
    compiled: a worker loaded all of Ansible's test plugins for it, unless the main process had."""
    loaded, out = plugin_loads_in_a_forked_worker(
        load, "{{ items | selectattr('k', 'equalto', 2) | map(attribute='k') | list }}", {"items": [{"k": 1}, {"k": 2}]})
    assert out == [2]
    assert loaded == ([] if load == "load" else ["filter", "test"])


def test_a_worker_forked_after_warm_looks_up_none_of_the_filters_and_tests_they_name(cache, monkeypatch):
    """Ansible looks up a filter or test that is not one of its own (Jinja's ``length``) through
    the plugin folders, once per Jinja environment, and each worker's templar makes new ones.
    With the cache, a name is looked up once per process: a worker forked after warm looks up
    none of the names its templates' code names, and renders them as before. A name given as a
    string (``map('string')``) is looked up where rendered, once per worker."""
    from ansible.plugins.loader import Jinja2Loader
    named = ["{{ items | length }}", "{{ items | first }}", "{{ items | map('string') | join(':') }}",
             "{{ a is string }}", "{{ (items | last) is divisibleby 3 }}"]
    template_cache.uninstall()
    plain = [render(t) for t in named]
    cache = template_cache.install()
    template_cache.warm([T(t) for t in named])

    def looked_up():
        calls = []
        original = Jinja2Loader.get_with_context
        Jinja2Loader.get_with_context = lambda self, name, *a, **k: calls.append(name) or original(self, name, *a, **k)
        try:
            results = [render(t) for t in named]
            assert [render(t) for t in named] == results  # a second templar: nothing looked up again
            return [calls, results]
        finally:
            Jinja2Loader.get_with_context = original

    compiled, (calls, results) = in_a_forked_worker(cache, looked_up)
    assert compiled == 0
    assert list(calls) == ["string"]
    assert [tuple(r) for r in results] == plain


def test_a_filter_that_is_not_found_is_not_kept(cache):
    first = render("{{ a | amlhpc_no_such_filter }}")
    assert first[0] == "error"
    assert render("{{ a | amlhpc_no_such_filter }}") == first


@pytest.mark.parametrize("warm", ["warm", "none"])
def test_a_worker_forked_after_warm_finds_the_lookups_its_templates_name_loaded(tmp_path, warm):
    """``lookup('name', ...)`` names its plugin by a string, loaded where the template renders:
    each node's worker loaded the plugin's code again (the inventory's stage_sas names
    amlhpc.azureml.blob_sas). Warm loads it in the main process, without running it."""
    marker = tmp_path / "ran"
    template = f"{{{{ lookup('ansible.builtin.pipe', 'touch {marker}; echo ran') }}}}"
    loaded, out = plugin_loads_in_a_forked_worker(warm, template)
    assert out == "ran" and marker.exists()  # the worker ran it
    assert loaded == ([] if warm == "warm" else ["lookup"])


def test_warm_loads_a_lookup_without_running_it(cache, tmp_path):
    marker = tmp_path / "ran"
    assert template_cache.warm([T(f"{{{{ lookup('ansible.builtin.pipe', 'touch {marker}') }}}}")]) == 1
    assert not marker.exists()
    env = _jinja_bits.AnsibleEnvironment()
    assert template_cache.load_lookups(env, "{{ query('ansible.builtin.pipe', 'true') }}") == 1
    assert template_cache.load_lookups(env, "{{ lookup('amlhpc.no_such.lookup', 'x') }}") == 0
    assert template_cache.load_lookups(env, "{{ lookup(name, 'x') }}") == 0
