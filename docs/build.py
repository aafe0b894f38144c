"""
Build the documentation site: the pages in docs/, the README, the changelog and an API reference.

    python docs/build.py [--output site] [--serve]

The site has four parts (getting started, concepts, how-to guides,
reference), then the benchmarks and the comparison; every page of docs/ must
be in one of them. The API reference is generated from the docstrings with
mkdocstrings, one page per area of the package. The site is assembled in a
temporary folder (the repository's top level stays as it is) and built with
MkDocs in strict mode: a broken link (to a page, an anchor, or a file of the
repository), a docstring that names a parameter the function does not have,
or any other warning fails the build. Needs the ``docs`` extra:
``pip install -e '.[docs]'``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# The site's parts, in reading order: (part, [(title, file in docs/)]). The home page is the
# README; the quickstart page is the README's quickstart section (see ``assemble``).
PARTS = [
    (
        "Getting started",
        [
            ("Install", "install.md"),
            ("Quickstart", "quickstart.md"),
            ("A tour of the engine", "tour.md"),
            ("A first real model", "first-model.md"),
        ],
    ),
    (
        "Concepts",
        [
            ("The run machine", "machine.md"),
            ("The seam: saved states, approvals, stores", "security.md"),
            ("Hostile input", "hostile-input.md"),
        ],
    ),
    (
        "How-to guides",
        [
            ("Real models", "providers.md"),
            ("Tools from MCP servers", "mcp.md"),
            ("Durable runs", "durability.md"),
            ("Runs on Temporal", "temporal.md"),
            ("The inbox and the run viewer", "inbox.md"),
            ("Serving runs over HTTP", "serving.md"),
            ("People in the loop: answers and whole replies", "people.md"),
            ("Testing your gates and models", "testing.md"),
            ("Evals: scoring an agent over a dataset", "evals.md"),
            ("Diagrams", "diagrams.md"),
            ("Typed output", "output.md"),
            ("Screens: guardrails on input and tool results", "screens.md"),
            ("Budgets: cost, tool caps, fallbacks", "budgets.md"),
            ("Context: compaction and tools per state", "context.md"),
            ("Async runs and events", "async.md"),
            ("Observability", "observability.md"),
            ("Workflow patterns", "patterns.md"),
            ("Nested agents: agents as tools, handoffs", "nesting.md"),
            ("Reference systems", "reference-systems.md"),
        ],
    ),
    (
        "Reference",
        [
            ("The command line", "cli.md"),
            ("The spec format", "specs.md"),
            ("The saved-state format", "saved-state.md"),
        ],
    ),
]

# Pages of their own after the parts: (title, file in docs/).
SINGLE_PAGES = [("Benchmarks", "benchmarks.md"), ("Comparison", "comparison.md")]

# Pages the build writes itself rather than copying from docs/.
GENERATED = {"quickstart.md"}

# API reference: (page title, file, modules documented on it).
REFERENCE = [
    ("agent_fsm (the facade)", "facade.md", ["agent_fsm"]),
    ("The kernel's layout", "engine.md", ["agent_fsm.engine"]),
    (
        "Running",
        "running.md",
        [
            "agent_fsm.engine._agent",
            "agent_fsm.engine._limits",
            "agent_fsm.engine._spending",
            "agent_fsm.engine._endings",
            "agent_fsm.engine._state",
            "agent_fsm.engine._codecs",
            "agent_fsm.engine._saved",
            "agent_fsm.engine._resting",
        ],
    ),
    ("Async runs and events", "async.md", ["agent_fsm.engine._async", "agent_fsm.engine._steps"]),
    (
        "Tools, proposals and gates",
        "tools.md",
        [
            "agent_fsm.engine._tools",
            "agent_fsm.engine._schema",
            "agent_fsm.engine._json",
            "agent_fsm.engine._boundary",
            "agent_fsm.engine._gates",
            "agent_fsm.engine._messages",
        ],
    ),
    ("Models and policies", "models.md", ["agent_fsm.engine._models", "agent_fsm.engine._policy"]),
    ("Context and tool offer", "context-api.md", ["agent_fsm.engine._context"]),
    (
        "Machines",
        "machines.md",
        [
            "agent_fsm.engine._machine",
            "agent_fsm.engine._run",
            "agent_fsm.engine._launch",
            "agent_fsm.engine._analysis",
        ],
    ),
    ("Verification", "verification.md", ["agent_fsm.engine._invariants"]),
    ("Errors", "errors.md", ["agent_fsm.engine._errors"]),
    ("Diagrams", "diagrams.md", ["agent_fsm.diagrams"]),
    ("Scenario specs", "scenarios.md", ["agent_fsm.scenarios"]),
    ("Workflow patterns", "patterns.md", ["agent_fsm.patterns"]),
    ("Providers", "providers.md", ["agent_fsm.providers"]),
    ("Durable runs", "store.md", ["agent_fsm.store"]),
    ("MCP servers", "mcp.md", ["agent_fsm.mcp"]),
    ("Observability", "observability.md", ["agent_fsm.engine._events", "agent_fsm.otel", "agent_fsm.cli.follow"]),
    ("Runs on Temporal", "temporal-api.md", ["agent_fsm.temporal"]),
    ("Screens", "screens-api.md", ["agent_fsm.screens"]),
    ("Testing kit", "testing.md", ["agent_fsm.testing"]),
    ("Evals", "evals-api.md", ["agent_fsm.evals"]),
    ("Inbox and viewer", "web.md", ["agent_fsm.web"]),
]

CONFIG = """\
site_name: agent_fsm
site_description: Run LLM tool-calling agents as an explicit, gated, budgeted finite-state machine.
docs_dir: pages
site_dir: {site}
strict: true
theme:
  name: material
  features: [navigation.sections, content.code.copy]
markdown_extensions:
  - admonition
  - attr_list
  - toc:
      permalink: true
  - pymdownx.highlight
  - pymdownx.superfences
plugins:
  - search
  - mkdocstrings:
      handlers:
        python:
          paths: [{root}]
          options:
            docstring_style: google
            show_source: false
            show_root_heading: true
            show_root_full_path: true
            show_symbol_type_heading: true
            members_order: source
            filters: ["!^_"]
            show_if_no_docstring: false
            separate_signature: true
            show_signature_annotations: true
            merge_init_into_class: true
            docstring_section_style: list
validation:
  links:
    not_found: warn
    anchors: warn
    unrecognized_links: warn
nav:
  - Home: index.md
{parts}
  - Changelog: changelog.md
"""

README_SECTION = "Quickstart"
"""The README section the site's quickstart page is made of."""


class BrokenLinks(Exception):
    """A page links to a file that is not there, or a page is missing from the nav (or the nav names a missing page)."""


def _rewrite_links(text: str, *, from_readme: bool, broken: list[str] | None = None, page: str = "") -> str:
    """
    Point README/guide links at the site's pages; files outside docs/ become repository paths.

    MkDocs checks links between pages and their anchors; a link to a file of the
    repository (``bench/README.md``, ``specs/``) leaves the site as plain text,
    so it is checked here instead: a target that does not exist is added to ``broken``.
    """
    base = ROOT if from_readme else DOCS

    def checked(path: str) -> None:
        if broken is not None and path and not (base / path).exists():
            broken.append(f"{page}: {path}")

    def link(match: re.Match[str]) -> str:
        label, target = match.group(1), match.group(2)
        if re.match(r"^[a-z]+://", target) or target.startswith("#") or target.startswith("mailto:"):
            return match.group(0)
        path, _, anchor = target.partition("#")
        if from_readme and path.startswith("docs/"):
            checked(path)
            path = path.removeprefix("docs/")
        elif path == "CHANGELOG.md" or path.endswith("/CHANGELOG.md"):
            checked(path)
            path = "changelog.md"
        elif path.endswith(".md") and "/" not in path:
            pass  # a page of the site: MkDocs checks it and its anchor
        elif path.startswith("diagrams/") or path.startswith("../diagrams/"):
            checked(path)
            path = "diagrams/" + path.split("diagrams/", 1)[1]
        else:
            checked(path)
            return f"{label}" if label.startswith("`") else label
        return f"[{label}]({path}{'#' + anchor if anchor else ''})"

    def image(match: re.Match[str]) -> str:
        label, target = match.group(1), match.group(2)
        if re.match(r"^[a-z]+://", target):
            return match.group(0)
        checked(target)
        if "diagrams/" in target:
            target = "diagrams/" + target.split("diagrams/", 1)[1]
        return f"![{label}]({target})"

    text = re.sub(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)", link, text)
    return re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", image, text)


def readme_section(readme: str, heading: str) -> str:
    """The body of the README's ``## heading`` section, up to the next ``## ``."""
    return readme.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def assemble(folder: Path) -> Path:
    """
    Write the site's sources and config into ``folder``; returns the config file.

    Raises:
        BrokenLinks: a link to a repository file that does not exist, a page of
            docs/ that no part of the nav lists, or a nav entry with no page.
    """
    pages = folder / "pages"
    (pages / "reference").mkdir(parents=True)
    broken: list[str] = []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (pages / "index.md").write_text(
        _rewrite_links(readme, from_readme=True, broken=broken, page="README.md"), encoding="utf-8"
    )
    quickstart = "# Quickstart\n" + readme_section(readme, README_SECTION)
    (pages / "quickstart.md").write_text(
        _rewrite_links(quickstart, from_readme=True, broken=broken, page="README.md"), encoding="utf-8"
    )
    (pages / "changelog.md").write_text((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), encoding="utf-8")
    listed = set(GENERATED)
    nav: list[str] = []
    for part, entries in PARTS:
        nav.append(f"  - {part}:")
        for title, name in entries:
            nav.append(f"      - {_quoted(title)}: {name}")
            listed.add(name)
        if part == "Reference":
            nav.append("      - API:")
            nav.extend(f"          - {_quoted(title)}: reference/{name}" for title, name, _ in REFERENCE)
    for title, name in SINGLE_PAGES:
        nav.append(f"  - {_quoted(title)}: {name}")
        listed.add(name)
    for name in sorted(listed - GENERATED):
        source = DOCS / name
        if not source.exists():
            broken.append(f"the nav lists {name}, which docs/ does not hold")
            continue
        text = _rewrite_links(source.read_text(encoding="utf-8"), from_readme=False, broken=broken, page=name)
        (pages / name).write_text(text, encoding="utf-8")
    broken.extend(f"docs/{p.name} is in no part of the nav" for p in sorted(DOCS.glob("*.md")) if p.name not in listed)
    if broken:
        raise BrokenLinks("\n".join(broken))
    shutil.copytree(ROOT / "diagrams", pages / "diagrams")
    if (DOCS / "images").is_dir():  # the screenshots the browser tests take (docs/inbox.md)
        shutil.copytree(DOCS / "images", pages / "images")
    for title, name, modules in REFERENCE:
        body = [f"# {title}\n"]
        for module in modules:
            body.append(f"::: {module}\n")
        (pages / "reference" / name).write_text("\n".join(body), encoding="utf-8")
    config = folder / "mkdocs.yml"
    config.write_text(CONFIG.format(site="site", root=ROOT, parts="\n".join(nav)), encoding="utf-8")
    return config


def _quoted(title: str) -> str:
    """A nav title as YAML reads it whole (titles hold colons and parentheses)."""
    return '"' + title.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--output", type=Path, default=ROOT / "site", help="folder for the built site")
    parser.add_argument("--serve", action="store_true", help="serve the site on 127.0.0.1:8000 instead")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agent-fsm-docs-") as tmp:
        try:
            config = assemble(Path(tmp))
        except BrokenLinks as problem:
            print(f"docs build failed:\n{problem}", file=sys.stderr)
            return 1
        command = [sys.executable, "-m", "mkdocs", "serve" if args.serve else "build", "-f", str(config)]
        if args.serve:
            command += ["--dev-addr", "127.0.0.1:8000"]
        # Material's banner about its successor is not a warning about these docs.
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        status = subprocess.run(command, check=False, env=env).returncode
        if status == 0 and not args.serve:
            if args.output.exists():
                shutil.rmtree(args.output)
            shutil.copytree(Path(tmp) / "site", args.output)
            print(f"site written to {args.output}")
        return status


if __name__ == "__main__":
    raise SystemExit(main())
