# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE)
"""The collection sweep: our modules, plugins, filters, lookups, inventory plugin and roles
by their fully qualified names (``amlhpc.azureml.<name>``), module utilities imported as
``ansible_collections.amlhpc.azureml.plugins.module_utils...``.

    python3 tests/sanity/fqcn_sweep.py            rewrite what still uses a short name (idempotent)
    python3 tests/sanity/fqcn_sweep.py --check    list it and exit 1 (tests/unit/test_collection_layout.py)

The names come from the tree itself (plugins/modules/*.py, the filters each
plugins/filter/*.py returns, plugins/lookup, plugins/inventory, roles/*), so a module or role
added on another branch is covered when that branch is merged and the sweep re-run.
What it cannot rewrite mechanically it reports: ``sys.path`` manipulation in plugins/.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NS = "amlhpc.azureml"
MU_OLD = "ansible.module_utils.amlhpc"
MU_NEW = "ansible_collections.amlhpc.azureml.plugins.module_utils.amlhpc"
AUTHOR = "amlhpc contributors (@amlhpc)"
HEADER = "# Copyright: (c) 2026, amlhpc contributors\n# MIT License (see LICENSE or https://opensource.org/licenses/MIT)\n"
# Renamed by convention: a module that returns no ansible_facts is an ..._info module.
RENAMES = {"nvme_raid_facts": "nvme_raid_info"}

# Where playbooks, roles and tests call our content by name.
SWEEP_DIRS = ("roles", "playbooks", "molecule", "inventory", "tests", "bench", ".ci", "workload", "plugins", "docs")
SWEEP_FILES = ("site.yml", "ansible.cfg", "README.md", "Makefile")
SKIP_PARTS = {".venv", ".venv-lint", ".venv-workload", ".tools", ".cache", "__pycache__", "output", ".git"}
# The sweep and its test hold short names on purpose.
SELF = {Path(__file__).resolve(), ROOT / "tests" / "unit" / "test_collection_layout.py"}


def names(kind: str) -> list[str]:
    """Our content of one kind, read from the tree."""
    if kind == "modules":
        return sorted(RENAMES.get(p.stem, p.stem) for p in (ROOT / "plugins" / "modules").glob("*.py")
                      if p.stem != "__init__")
    if kind == "lookup":
        return sorted(p.stem for p in (ROOT / "plugins" / "lookup").glob("*.py") if p.stem != "__init__")
    if kind == "inventory":
        return sorted(p.stem for p in (ROOT / "plugins" / "inventory").glob("*.py") if p.stem != "__init__")
    if kind == "roles":
        return sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
    if kind == "filter":
        found: set[str] = set()
        for p in (ROOT / "plugins" / "filter").glob("*.py"):
            found.update(re.findall(r"""["'](amlhpc_\w+)["']\s*:""", p.read_text(encoding="utf-8")))
        return sorted(found)
    raise ValueError(kind)


def _alt(words: list[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


def rewrite(path: Path, text: str) -> str:
    """The text of ``path`` with every short name of ours made fully qualified."""
    out = text
    for old, new in RENAMES.items():
        out = re.sub(rf"\b{old}\b", new, out)
    out = out.replace(MU_OLD, MU_NEW)
    suffix = path.suffix
    is_yaml = suffix in (".yml", ".yaml")
    in_plugins = ROOT / "plugins" in path.parents
    modules, filters = names("modules"), names("filter")
    lookups, inventories, roles = names("lookup"), names("inventory"), names("roles")

    if is_yaml and not in_plugins:
        # A task's module key: "  - aml_job:" or "    aml_job:" at the start of a line.
        out = re.sub(rf"(?m)^(\s*(?:-\s+)?)({_alt(modules)}):(?=\s|$)", rf"\g<1>{NS}.\g<2>:", out)
        # Roles: "- role: beeond", "roles: [beeond]" is not used; include_role / import_role name.
        out = re.sub(rf"(?m)^(\s*-?\s*role:\s*)({_alt(roles)})[ \t]*$", rf"\g<1>{NS}.\g<2>", out)
        out = re.sub(rf"(?m)^(\s*(?:ansible\.builtin\.)?(?:include|import)_role:\s*\n\s*name:\s*)({_alt(roles)})[ \t]*$",
                     rf"\g<1>{NS}.\g<2>", out)
    if path.name == "ansible.cfg" and inventories:
        # [inventory] enable_plugins: ours by FQCN.
        out = re.sub(r"(?m)^(enable_plugins\s*=\s*)(.*)$",
                     lambda m: m.group(1) + ", ".join(f"{NS}.{x}" if x in inventories else x
                                                      for x in (y.strip() for y in m.group(2).split(","))), out)
    if in_plugins and path.parent.name == "inventory" and suffix == ".py":
        # The plugin's NAME and the choices of its "plugin" option are the FQCN.
        out = re.sub(rf"""(?m)^(\s*NAME\s*=\s*)(["'])({_alt(inventories)})\2""", rf"\g<1>\g<2>{NS}.\g<3>\g<2>", out)
        out = re.sub(rf"(?m)^(\s*choices:\s*\[\s*)({_alt(inventories)})(\s*\])", rf"\g<1>{NS}.\g<2>\g<3>", out)
    if path.name == "molecule.yml":
        # Our content comes from the collection (ansible.cfg's collections_path), not from
        # plugin folders handed to Ansible one by one.
        out = re.sub(r"(?m)^[ \t]*ANSIBLE_(?:LIBRARY|FILTER_PLUGINS|MODULE_UTILS|ACTION_PLUGINS|LOOKUP_PLUGINS|"
                     r"INVENTORY_PLUGINS|ROLES_PATH):.*\n", "", out)
        if "ANSIBLE_COLLECTIONS_PATH:" not in out:
            out = re.sub(r"(?m)^([ \t]*)(ANSIBLE_CONFIG: \$\{MOLECULE_PROJECT_DIRECTORY\}/ansible\.cfg)[ \t]*\n",
                         "\\g<1>\\g<2>\n\\g<1>ANSIBLE_COLLECTIONS_PATH: ${MOLECULE_PROJECT_DIRECTORY}/.cache/collections\n", out)
    if suffix in (".yml", ".yaml", ".j2", ".py", ".md", ".cfg", ".txt") or path.name in ("Makefile",):
        # Filters inside Jinja: "| amlhpc_nccl_conf" (ours all start with amlhpc_).
        if filters:
            out = re.sub(rf"(\|\s*)({_alt(filters)})\b", rf"\g<1>{NS}.\g<2>", out)
        # Lookups: lookup('blob_sas', ...) / query("blob_sas", ...).
        if lookups:
            out = re.sub(rf"""\b(lookup|query|q)\((\s*)(['"])({_alt(lookups)})\3""", rf"\g<1>(\g<2>\g<3>{NS}.\g<4>\g<3>", out)
        # Inventory plugin configuration: plugin: azureml_compute, {"plugin": "azureml_compute"}.
        if inventories:
            out = re.sub(rf"""(?m)^(\s*plugin:\s*)({_alt(inventories)})[ \t]*$""", rf"\g<1>{NS}.\g<2>", out)
            out = re.sub(rf"""(["']plugin["']\s*:\s*)(["'])({_alt(inventories)})\2""", rf"\g<1>\g<2>{NS}.\g<3>\g<2>", out)
    if suffix == ".py":
        # Ansible's loaders in tests and benchmarks: inventory_loader.get("azureml_compute").
        ours = _alt(modules + lookups + inventories + filters)
        out = re.sub(rf"""(\b\w+_loader\.(?:get|find_plugin)\(\s*)(["'])({ours})\2""", rf"\g<1>\g<2>{NS}.\g<3>\g<2>", out)
    if in_plugins and suffix == ".py":
        # DOCUMENTATION: authors as validate-modules wants them, seealso by FQCN.
        out = re.sub(r"(?m)^author: amlhpc[ \t]*$|^author:\n  - amlhpc[ \t]*$", f"author:\n  - {AUTHOR}", out)
        out = re.sub(rf"(?m)^(\s*-\s*(?:module|plugin):\s*)({_alt(modules + lookups + inventories)})[ \t]*$",
                     rf"\g<1>{NS}.\g<2>", out)
        # The collection's license header (after a shebang).
        if "MIT License (see LICENSE" not in "\n".join(out.splitlines()[:5]):
            lines = out.splitlines(keepends=True)
            at = 1 if lines and lines[0].startswith("#!") else 0
            lines[at:at] = [HEADER]
            out = "".join(lines)
        if path.parent.name == "modules":
            out = _attributes(out)
        # The EXAMPLES of a plugin are playbook text too.
        out = re.sub(r'(?s)(EXAMPLES\s*=\s*r?(?:"""|\'\'\'))(.*?)((?:"""|\'\'\'))',
                     lambda m: m.group(1) + re.sub(rf"(?m)^(\s*(?:-\s+)?)({_alt(modules)}):(?=\s|$)",
                                                   rf"\g<1>{NS}.\g<2>:", m.group(2)) + m.group(3), out)
        # Controller plugins put plugins/module_utils on sys.path and imported "amlhpc".
        # Controller plugins imported the package as "amlhpc" from sys.path.
        out = re.sub(r"(?m)^(\s*)from amlhpc(\.[\w.]+)? import", rf"\g<1>from {MU_NEW}\g<2> import", out)
        out = re.sub(r"(?m)^(\s*)import amlhpc(\.[\w.]+) as ", rf"\g<1>import {MU_NEW}\g<2> as ", out)
        out = re.sub(r"(?m)^_MODULE_UTILS = os\.path\.join\(.*\n"
                     r"if _MODULE_UTILS not in sys\.path:\n"
                     r"    sys\.path\.insert\(0, _MODULE_UTILS\)\n\n?", "", out)
        out = re.sub(r"(from ansible_collections\.amlhpc\.azureml\.plugins\.module_utils\S* import .*?)  # noqa: E402",
                     r"\1", out)
        for mod in ("os", "sys"):
            if re.search(rf"(?m)^import {mod}\n", out) and not re.search(rf"\b{mod}\.", out.split(f"import {mod}\n", 1)[1]):
                out = re.sub(rf"(?m)^import {mod}\n", "", out, count=1)
    return out


def _attributes(text: str) -> str:
    """A module's DOCUMENTATION declares check_mode, diff_mode and platform (descriptions from
    ansible.builtin.action_common_attributes); support read from the code when not declared."""
    m = re.search(r'(?s)(DOCUMENTATION\s*=\s*r?""")(.*?)(""")', text)
    if not m:
        return text
    doc = m.group(2)
    code = text[m.end():]
    if not re.search(r"(?m)^extends_documentation_fragment:", doc) and re.search(r"(?m)^options:", doc):
        doc = re.sub(r"(?m)^options:", "extends_documentation_fragment:\n  - ansible.builtin.action_common_attributes\noptions:",
                     doc, count=1)
    elif re.search(r"(?m)^extends_documentation_fragment:", doc) and "action_common_attributes" not in doc:
        doc = re.sub(r"(?m)^extends_documentation_fragment:\n", "extends_documentation_fragment:\n"
                     "  - ansible.builtin.action_common_attributes\n", doc, count=1)
    if not re.search(r"(?m)^attributes:", doc):
        check = "full" if "supports_check_mode=True" in code else "none"
        diff = "full" if re.search(r"""\bdiff\s*=|["']diff["']\s*:""", code) else "none"
        block = (f"attributes:\n  check_mode:\n    support: {check}\n  diff_mode:\n    support: {diff}\n"
                 "  platform:\n    platforms: posix\n")
        doc = re.sub(r"(?m)^extends_documentation_fragment:", block + "extends_documentation_fragment:", doc, count=1)
    elif not re.search(r"(?m)^  platform:", doc):
        doc = re.sub(r"(?m)^attributes:\n", "attributes:\n  platform:\n    platforms: posix\n", doc, count=1)
    return text[:m.start(2)] + doc + text[m.end(2):]


def problems(path: Path, text: str) -> list[str]:
    """What the sweep cannot rewrite by itself."""
    found = []
    if ROOT / "plugins" in path.parents and path.suffix == ".py":
        doc = re.search(r'(?s)DOCUMENTATION\s*=\s*r?"""(.*?)"""', text)
        for key in ("attributes", "extends_documentation_fragment", "options", "author", "seealso"):
            if doc and len(re.findall(rf"(?m)^{key}:", doc.group(1))) > 1:
                found.append(f"{path.relative_to(ROOT)}: DOCUMENTATION has '{key}' twice (a merge kept both)")
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(r"\bsys\.path\b", line):
                found.append(f"{path.relative_to(ROOT)}:{n}: sys.path manipulation in plugins/ "
                             f"(import {MU_NEW}... instead)")
            if re.match(r"\s*(from|import) amlhpc\b", line):
                found.append(f"{path.relative_to(ROOT)}:{n}: bare 'amlhpc' import in plugins/")
    return found


IGNORE_FILE = ROOT / "tests" / "sanity" / "ignore-2.21.txt"
LICENSE_REASON = "the collection is MIT-licensed (LICENSE, galaxy.yml); this check wants a GPLv3 header"


# Checks that do not apply to one file, with the reason.
STATIC_IGNORES = [
    "tests/fixtures/nvidia-smi/fake-nvidia-smi shebang  # a stand-in nvidia-smi copied onto test nodes "
    "(Debian containers), where the interpreter is python3 and there is no 'python'",
    "plugins/module_utils/amlhpc/staging/blob_rest.py replace-urlopen  # the pure package is standard library only "
    "(the workload imports amlhpc without Ansible), so ansible.module_utils.urls is not there; "
    "one GET per page with the SAS as its query",
]


def ignores() -> str:
    """tests/sanity/ignore-2.21.txt: only checks that do not apply, each with its reason."""
    lines = list(STATIC_IGNORES)
    for kind in ("callback", "inventory", "lookup", "modules"):
        for name in sorted(p.name for p in (ROOT / "plugins" / kind).glob("*.py") if p.stem != "__init__"):
            lines.append(f"plugins/{kind}/{name} validate-modules:missing-gplv3-license  # {LICENSE_REASON}")
    return "\n".join(lines) + "\n"


def files() -> list[Path]:
    out = [ROOT / f for f in SWEEP_FILES if (ROOT / f).is_file()]
    for d in SWEEP_DIRS:
        base = ROOT / d
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*")):
            if p.is_symlink() or not p.is_file() or SKIP_PARTS & set(p.relative_to(ROOT).parts):
                continue
            if p.resolve() in SELF or p.suffix not in (".yml", ".yaml", ".j2", ".py", ".md", ".cfg", ".txt"):
                continue
            out.append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--check", action="store_true", help="report, change nothing, exit 1 on findings")
    args = ap.parse_args(argv)
    findings: list[str] = []
    # Files named after a renamed module.
    for old, new in RENAMES.items():
        for p in list(ROOT.glob(f"plugins/**/{old}.*")) + list(ROOT.glob(f"tests/**/*{old}*")):
            target = p.with_name(p.name.replace(old, new))
            if args.check:
                findings.append(f"{p.relative_to(ROOT)}: to be renamed {target.name}")
            else:
                p.rename(target)
                print(f"renamed {p.relative_to(ROOT)} -> {target.name}")
    for path in files():
        text = path.read_text(encoding="utf-8")
        new = rewrite(path, text)
        if new != text:
            if args.check:
                old_lines, new_lines = text.splitlines(), new.splitlines()
                for n, (a, b) in enumerate(zip(old_lines, new_lines), 1):
                    if a != b:
                        findings.append(f"{path.relative_to(ROOT)}:{n}: short name: {a.strip()!r} -> {b.strip()!r}")
            else:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {path.relative_to(ROOT)}")
        findings.extend(problems(path, new))
    want = ignores()
    have = IGNORE_FILE.read_text(encoding="utf-8") if IGNORE_FILE.exists() else ""
    if have != want:
        if args.check:
            findings.append(f"{IGNORE_FILE.relative_to(ROOT)}: not what the plugins need (run the sweep)")
        else:
            IGNORE_FILE.write_text(want, encoding="utf-8")
            print(f"rewrote {IGNORE_FILE.relative_to(ROOT)}")
    for f in findings:
        print(f)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
