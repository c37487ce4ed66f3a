"""The azureml_compute inventory plugin's DOCUMENTATION is for the person writing a
``*.azureml_compute.yml``: each option says what it does for them in a few short sentences, and
the engineering story (why it is built so, SDK quirks, timings) lives in docs/, at the heading a
``See docs/<page>.md, <heading>.`` names (issue 47 item 2)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]
PLUGIN = ROOT / "plugins" / "inventory" / "azureml_compute.py"
POINTER = re.compile(r"See (docs/[\w.-]+\.md), ([^.]+)\.")
SENTENCES = 4     # at most, besides the pointer
CHARACTERS = 400  # at most, besides the pointer: four short sentences


def documentation() -> dict:
    tree = ast.parse(PLUGIN.read_text(encoding="utf-8"))
    [text] = [n.value.value for n in tree.body if isinstance(n, ast.Assign)
              and any(getattr(t, "id", "") == "DOCUMENTATION" for t in n.targets)]
    return yaml.safe_load(text)


def descriptions(options: dict, prefix: str = "") -> dict[str, str]:
    """Every option's (and suboption's) description as one text, by its dotted name."""
    out = {}
    for name, spec in options.items():
        text = spec.get("description") or ""
        out[prefix + name] = " ".join(text) if isinstance(text, list) else str(text)
        out.update(descriptions(spec.get("suboptions") or {}, f"{prefix}{name}."))
    return out


def headings(page: str) -> set[str]:
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    return {line.lstrip("#").strip() for line in lines if re.match(r"#{1,4} ", line)}


def test_each_option_says_what_it_does_in_a_few_short_sentences():
    too_long = {}
    for name, text in descriptions(documentation()["options"]).items():
        said = POINTER.sub("", text).strip()
        sentences = len(re.findall(r"[.!?](?:\s|$)", said))
        if sentences > SENTENCES or len(said) > CHARACTERS:
            too_long[name] = (sentences, len(said))
    assert too_long == {}, ("say what these options do in at most four short sentences and move the story to "
                            "docs/ with a 'See docs/<page>.md, <heading>.' (sentences, characters): "
                            f"{too_long}")


def test_every_pointer_names_a_heading_that_exists():
    doc = documentation()
    texts = [*descriptions(doc["options"]).values(), " ".join(doc["description"])]
    pointers = {m.groups() for text in texts for m in POINTER.finditer(text)}
    assert pointers, "the options point to the story in docs/"
    missing = sorted(f"{page}: {heading}" for page, heading in pointers if heading not in headings(page))
    assert missing == []
