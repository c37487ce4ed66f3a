# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Templates compiled once, in the main process, before the workers fork.

Ansible compiles every template string it renders (``Environment.from_string``, which Jinja
never caches), in the worker it forks for each host-task, and that worker keeps nothing for
the next one. On a 32-node rerun of ``site.yml`` the workers compiled 2,167 templates, 2.8 s
of controller CPU out of 19 (README, round 16): the same few dozen strings (the roles'
defaults, the tasks' arguments, the inventory's settings) once per node, each worker also
loading the filter and test plugins they name.

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

Not cached: expressions (``when``; Jinja compiles them from a syntax tree, not a string), a
template that does not compile (it fails as before, where it is rendered), an environment
whose ``autoescape`` is a function, and Ansible's template debugging mode. Only trusted
templates are warmed: a string from a module's result or a fact is never templated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ansible._internal._templating import _jinja_bits
from ansible._internal._templating._engine import TemplateEngine, TemplateOptions
from ansible.template import is_trusted_as_template

_MEMORY_LIMIT = 4096  # distinct templates kept; a run of site.yml has about 300
_WALK_DEPTH = 32
# Containers walked for templates: plain ones and the tagged ones Ansible's YAML loader makes.
# Anything else (hostvars, a lazy container) is left alone.
_WALKED_MODULES = ("builtins", "ansible.module_utils._internal._datatag")


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"


def code_key(env: Any, source: str, name: str | None, filename: str | None, defer_init: bool) -> str | None:
    """The cache key of the code Jinja generates for ``source`` in ``env``; None where the
    code may depend on more than the key can say (then the template is compiled as usual)."""
    if callable(env.autoescape) or getattr(env, "_debuggable_template_source", False):
        return None
    compiling = _jinja_bits._TemplateCompileContext.current(optional=True)  # pylint: disable=protected-access
    settings = (
        _name(type(env)), tuple(getattr(env, n) for n in _jinja_bits._TEMPLATE_OVERRIDE_FIELD_NAMES),
        env.optimized, env.is_async, env.autoescape, _name(env.finalize) if env.finalize else None,
        _name(env.code_generator_class), tuple(sorted(env.extensions)),
        bool(compiling and compiling.escape_backslashes), _jinja_bits._TemplateConfig.allow_embedded_templates,
        name, filename, defer_init,
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
_active: CodeCache | None = None


def _cached_compile(self, source, name=None, filename=None, raw=False, defer_init=False):
    cache = _active
    key = None if cache is None or raw or not isinstance(source, str) else code_key(self, source, name, filename, defer_init)
    if key is None:
        return _ORIGINAL_COMPILE(self, source, name, filename, raw, defer_init)
    return cache.code(key, lambda: _ORIGINAL_COMPILE(self, source, name, filename, raw, defer_init))


def install() -> CodeCache:
    """Keep compiled templates in this process and in the workers it forks from now on."""
    global _active  # pylint: disable=global-statement
    if _active is None:
        _active = CodeCache()
        _jinja_bits.AnsibleEnvironment.compile = _cached_compile  # type: ignore[method-assign]
    return _active


def uninstall() -> None:
    """Compile every template again (the tests' way back)."""
    global _active  # pylint: disable=global-statement
    _active = None
    _jinja_bits.AnsibleEnvironment.compile = _ORIGINAL_COMPILE  # type: ignore[method-assign]


def active() -> CodeCache | None:
    """The cache in use, if any."""
    return _active


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
    return cache.compiled - before
