# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Templates compiled once, in the main process, before the workers fork.

Ansible compiles every template string it renders (``Environment.from_string``, which Jinja
never caches), in the worker it forks for each host-task, and that worker keeps nothing for
the next one. On a 32-node rerun of ``site.yml`` the workers compiled 2,167 templates and
expressions, 2.8 s of controller CPU out of 19 (README, round 16): the same few dozen strings
(the roles' defaults, the tasks' arguments, the inventory's settings) once per node, each
worker also loading the filter and test plugins they name.

:func:`install` wraps ``AnsibleEnvironment.compile`` so that the Python code Jinja generates
for a template string is kept in this process (:class:`CodeCache`) and compiled only where it
is missing. :func:`warm` compiles a task's templates in the main process before its workers
fork (the ``amlhpc.azureml.template_cache`` callback calls it at each play and task start):
each worker inherits the compiled code, and the plugins they name, by ``fork``.

The code for a template depends on its source and on the environment's compile-time settings,
so the key holds both (:func:`code_key`): the delimiters and whitespace settings (a
``#jinja2:`` header changes them), Ansible's backslash escaping, the code generator,
``finalize``, the extensions, and whether embedded templates are allowed. Rendering is
unchanged: the code is bound to the environment that asked for it (``Template.from_code``),
exactly as a fresh compile is, and nothing is rendered while warming (a lookup does not run).

The filters and tests a template names are looked up while it compiles; Ansible did that once
per Jinja environment, each worker's templar makes new environments, and a name that is not one
of Ansible's own (Jinja's ``length``, a collection's filter) goes through the plugin folders
each time (about 0.4 ms). :func:`install` also keeps each name's callable for the process
(:func:`_cached_plugin_getitem`), so the workers inherit the lookups ``warm`` made.

A lookup names its plugin by a string, resolved where the template renders; ``warm`` loads the
lookup plugins its templates name (:func:`load_lookups`), without running them.

Expressions (``when``, ``changed_when``: Jinja parses them into a syntax tree and compiles
that) are kept under their source's key too (:func:`warm_expressions` compiles a task's);
their parse is skipped when their code is there.

Not cached: a template that does not compile (it fails as before, where it is rendered), an
environment whose ``autoescape`` is a function, and Ansible's template debugging mode. Only
trusted templates are warmed: a string from a module's result or a fact is never templated.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import jinja2.environment
import jinja2.nodes

from ansible._internal._templating import _jinja_bits
from ansible._internal._templating._engine import TemplateEngine, TemplateOptions
from ansible._internal._templating._jinja_plugins import JinjaPluginIntercept
from ansible.plugins.loader import filter_loader, lookup_loader, test_loader
from ansible.template import is_trusted_as_template

_MEMORY_LIMIT = 4096  # distinct templates kept; a run of site.yml has about 300
_WALK_DEPTH = 32
# Containers walked for templates: plain ones and the tagged ones Ansible's YAML loader makes.
# Anything else (hostvars, a lazy container) is left alone.
_WALKED_MODULES = ("builtins", "ansible.module_utils._internal._datatag")


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"


def code_key(env: Any, source: str, name: str | None, filename: str | None, defer_init: bool,
             expression: bool | None = None) -> str | None:
    """The cache key of the code Jinja generates for ``source`` in ``env`` (a template, or with
    ``expression`` its ``undefined_to_none``, an expression); None where the code may depend on
    more than the key can say (then it is compiled as usual)."""
    if callable(env.autoescape) or getattr(env, "_debuggable_template_source", False):
        return None
    compiling = _jinja_bits._TemplateCompileContext.current(optional=True)  # pylint: disable=protected-access
    settings = (
        _name(type(env)), tuple(getattr(env, n) for n in _jinja_bits._TEMPLATE_OVERRIDE_FIELD_NAMES),
        env.optimized, env.is_async, env.autoescape, _name(env.finalize) if env.finalize else None,
        _name(env.code_generator_class), tuple(sorted(env.extensions)),
        bool(compiling and compiling.escape_backslashes), _jinja_bits._TemplateConfig.allow_embedded_templates,
        name, filename, defer_init, expression,
    )
    digest = hashlib.sha256(repr(settings).encode())
    digest.update(b"\0")
    digest.update(source.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


@dataclass
class CodeCache:
    """Compiled template code by :func:`code_key`, and how it was found."""

    memory: dict[str, Any] = field(default_factory=dict)
    hits: int = 0
    compiled: int = 0

    def code(self, key: str, compile_source: Callable[[], Any]) -> Any:
        """The code under ``key``, from memory or from ``compile_source()`` (which raises for
        a template that does not compile; then nothing is kept)."""
        code = self.memory.get(key)
        if code is not None:
            self.hits += 1
            return code
        code = compile_source()
        self.compiled += 1
        if len(self.memory) >= _MEMORY_LIMIT:
            self.memory.clear()
        self.memory[key] = code
        return code


_ORIGINAL_COMPILE = _jinja_bits.AnsibleEnvironment.compile
_ORIGINAL_COMPILE_EXPRESSION = _jinja_bits.AnsibleEnvironment.compile_expression
_active: CodeCache | None = None
# The key of the expression being compiled: Jinja parses an expression into a syntax tree and
# compiles that (one compile call), which is kept under the expression's key.
_expression_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("amlhpc_expression_key", default=None)


def _cached_compile(self, source, name=None, filename=None, raw=False, defer_init=False):
    cache = _active
    key = None
    if cache is not None and not raw:
        if isinstance(source, str):
            key = code_key(self, source, name, filename, defer_init)
        elif (key := _expression_key.get()) is not None:
            _expression_key.set(None)  # only the expression's own tree
    if key is None:
        return _ORIGINAL_COMPILE(self, source, name, filename, raw, defer_init)
    return cache.code(key, lambda: _ORIGINAL_COMPILE(self, source, name, filename, raw, defer_init))


def _cached_compile_expression(self, source, undefined_to_none=True):
    cache = _active
    key = None if cache is None or not isinstance(source, str) else code_key(
        self, source, None, None, False, expression=bool(undefined_to_none))
    if key is None:
        return _ORIGINAL_COMPILE_EXPRESSION(self, source, undefined_to_none)
    code = cache.memory.get(key)
    if code is None:  # parse it (a syntax error raises as before); the compile keeps its code
        token = _expression_key.set(key)
        try:
            return _ORIGINAL_COMPILE_EXPRESSION(self, source, undefined_to_none)
        finally:
            _expression_key.reset(token)
    cache.hits += 1
    # what Jinja's compile_expression returns, from the same code: Environment.from_string's steps
    template = self.template_class.from_code(self, code, self.make_globals(None), None)
    return jinja2.environment.TemplateExpression(template, undefined_to_none)


_ORIGINAL_PLUGIN_GETITEM = JinjaPluginIntercept.__getitem__
# Each filter and test name looked up in this process: its callable, as the first Jinja
# environment that looked it up made it (by plugin type and name as written).
_plugins: dict[tuple[str, str], Callable[..., Any]] = {}


def _cached_plugin_getitem(self, key: str) -> Callable[..., Any]:
    """``JinjaPluginIntercept.__getitem__`` that resolves a name once per process, not once per
    Jinja environment. Ansible looks a name that is not one of its own filters (``length``,
    ``first``: Jinja's) or a collection's up through the collection's plugin folder, about
    0.4 ms each time, and every worker's templar makes new environments. The callable is the
    one Ansible's lookup returns (its wrapper calls the plugin and uses nothing of the
    environment that made it); a name that fails to resolve is not kept, and fails again."""
    found = self._wrapped_funcs.get(key)  # pylint: disable=protected-access
    if found:
        return found
    cache_key = (self._plugin_loader.type, key)  # pylint: disable=protected-access
    found = _plugins.get(cache_key)
    if found is None:
        found = _ORIGINAL_PLUGIN_GETITEM(self, key)
        _plugins[cache_key] = found
    self._wrapped_funcs[key] = found  # pylint: disable=protected-access
    return found


def install() -> CodeCache:
    """Keep compiled templates, and the filters and tests they name, in this process and in the
    workers it forks from now on."""
    global _active  # pylint: disable=global-statement
    if _active is None:
        _active = CodeCache()
        _jinja_bits.AnsibleEnvironment.compile = _cached_compile  # type: ignore[method-assign]
        _jinja_bits.AnsibleEnvironment.compile_expression = _cached_compile_expression  # type: ignore[method-assign]
        JinjaPluginIntercept.__getitem__ = _cached_plugin_getitem  # type: ignore[method-assign]
    return _active


def uninstall() -> None:
    """Compile every template, and look every filter and test up, again (the tests' way back)."""
    global _active  # pylint: disable=global-statement
    _active = None
    _jinja_bits.AnsibleEnvironment.compile = _ORIGINAL_COMPILE  # type: ignore[method-assign]
    _jinja_bits.AnsibleEnvironment.compile_expression = _ORIGINAL_COMPILE_EXPRESSION  # type: ignore[method-assign]
    JinjaPluginIntercept.__getitem__ = _ORIGINAL_PLUGIN_GETITEM  # type: ignore[method-assign]
    _plugins.clear()


def active() -> CodeCache | None:
    """The cache in use, if any."""
    return _active


def load_builtin_jinja_plugins() -> None:
    """Load Ansible's own filter and test plugins (ansible.builtin's, and the legacy ones in
    the configured paths) in this process, for the workers to inherit. A worker's templar loads
    them all at the first filter or test it looks up that no compile in this process looked up
    (a test named by a string: ``selectattr('key', 'equalto', x)``, ``map('quote')``)."""
    for loader, name in ((filter_loader, "ansible.builtin.bool"), (test_loader, "ansible.builtin.equalto")):
        try:
            loader.get(name)
        except Exception:  # pylint: disable=broad-exception-caught  # the worker loads them, and says why
            continue


def templates_in(value: Any, found: set[str] | None = None, depth: int = 0) -> set[str]:
    """The trusted template strings in ``value``: a string, or plain (or YAML-tagged) dicts,
    lists and tuples of them; ``hostvars`` and other objects are not walked."""
    found = set() if found is None else found
    if isinstance(value, str):
        if "{" in value and value not in found and is_trusted_as_template(value):
            found.add(value)
    elif depth < _WALK_DEPTH and type(value).__module__ in _WALKED_MODULES:
        if isinstance(value, Mapping):
            for item in value.values():
                templates_in(item, found, depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value:
                templates_in(item, found, depth + 1)
    return found


def warm(templates: Iterable[str], loader: Any = None) -> int:
    """Compile ``templates`` into the cache, without rendering them; the number compiled now
    (those already there cost nothing). A template that does not compile is skipped: it
    fails where it is rendered, as before."""
    cache = _active
    if cache is None:
        return 0
    engine = TemplateEngine(loader=loader)
    options = TemplateOptions.DEFAULT
    before = cache.compiled
    for template in templates:
        # the engine's own compile step (its #jinja2: overlay and its backslash escaping), as
        # a render of a task's value takes it; Jinja's from_string compiles with these arguments
        try:
            source, env = engine._create_overlay(template, options.overrides)  # pylint: disable=protected-access
            with _jinja_bits._TemplateCompileContext(escape_backslashes=options.escape_backslashes):  # pylint: disable=protected-access
                env.compile(source)
        except Exception:  # pylint: disable=broad-exception-caught  # it fails where it is rendered, as before
            continue
        load_lookups(env, source)
    return cache.compiled - before


_LOOKUP_CALLS = frozenset(("lookup", "query", "q"))


def load_lookups(env: Any, source: str) -> int:
    """Load the lookup plugins ``source`` names as ``lookup('name', ...)`` (or ``query``, ``q``)
    in this process, without running them: the number loaded. A worker that renders the
    template then finds the plugin's code loaded (the amlhpc.azureml.blob_sas lookup that the
    inventory's ``stage_sas`` names was imported again in every node's worker). A name that does
    not load is left to the render, which fails as before."""
    if "(" not in source or not any(f"{name}(" in source for name in _LOOKUP_CALLS):
        return 0
    try:
        tree = env.parse(source)
    except Exception:  # pylint: disable=broad-exception-caught  # it fails where it is rendered
        return 0
    loaded = 0
    for call in tree.find_all(jinja2.nodes.Call):
        if isinstance(call.node, jinja2.nodes.Name) and call.node.name in _LOOKUP_CALLS and call.args \
                and isinstance(call.args[0], jinja2.nodes.Const) and isinstance(call.args[0].value, str):
            try:
                loaded += lookup_loader.get(call.args[0].value, class_only=True) is not None
            except Exception:  # pylint: disable=broad-exception-caught  # the render fails and says why
                continue
    return loaded


def warm_expressions(expressions: Iterable[Any], *, escape_backslashes: bool, loader: Any = None) -> int:
    """Compile ``expressions`` (trusted expression strings: a task's ``when``, ``changed_when``,
    ... , which Ansible compiles with ``escape_backslashes`` False, or its ``register``
    projection, compiled with it True) into the cache, without evaluating them; the number
    compiled now. A templated one (``{{ }}``), a boolean, or one that does not parse is left
    to Ansible."""
    cache = _active
    if cache is None:
        return 0
    env = TemplateEngine(loader=loader).environment
    before = cache.compiled
    for expression in expressions:
        if not isinstance(expression, str) or "{{" in expression or "{%" in expression \
                or not is_trusted_as_template(expression):
            continue
        try:
            # as TemplateEngine.evaluate_expression compiles it (a conditional: stripped first)
            with _jinja_bits._TemplateCompileContext(escape_backslashes=escape_backslashes):  # pylint: disable=protected-access
                env.compile_expression(expression.strip() if not escape_backslashes else expression, False)
        except Exception:  # pylint: disable=broad-exception-caught  # it fails where it is evaluated, as before
            continue
    return cache.compiled - before
