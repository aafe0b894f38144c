"""
Build the documentation site: the guides in docs/, the README, the changelog and an API reference.

    python docs/build.py [--output site] [--serve]

The API reference is generated from the docstrings with mkdocstrings, one
page per area of the package. The site is assembled in a temporary folder
(the repository's top level stays as it is) and built with MkDocs in strict
mode: a broken link, a docstring that names a parameter the function does not
have, or any other warning fails the build. Needs the ``docs`` extra:
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

# Guides, in reading order; each is a file in docs/.
GUIDES = [
    ("Security", "security.md"),
    ("Hostile input", "hostile-input.md"),
    ("Budgets, fallback and approval from a tool", "budgets.md"),
    ("Diagrams", "diagrams.md"),
    ("Specs", "specs.md"),
    ("Async runs and events", "async.md"),
    ("Durable runs", "durability.md"),
    ("The inbox and the run viewer", "inbox.md"),
    ("Observability", "observability.md"),
    ("Runs on Temporal", "temporal.md"),
    ("Tools from MCP servers", "mcp.md"),
    ("Testing your gates and models", "testing.md"),
    ("Workflow patterns", "patterns.md"),
    ("Providers", "providers.md"),
    ("Reference systems", "reference-systems.md"),
]

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
    ("Machines", "machines.md", ["agent_fsm.engine._machine", "agent_fsm.engine._run", "agent_fsm.engine._analysis"]),
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
    ("Testing kit", "testing.md", ["agent_fsm.testing"]),
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
  - Guides:
{guides}
  - API reference:
{reference}
  - Changelog: changelog.md
"""


def _rewrite_links(text: str, *, from_readme: bool) -> str:
    """Point README/guide links at the site's pages; files outside docs/ become repository paths."""

    def link(match: re.Match[str]) -> str:
        label, target = match.group(1), match.group(2)
        if re.match(r"^[a-z]+://", target) or target.startswith("#"):
            return match.group(0)
        path, _, anchor = target.partition("#")
        if from_readme and path.startswith("docs/"):
            path = path.removeprefix("docs/")
        elif path == "CHANGELOG.md" or path.endswith("/CHANGELOG.md"):
            path = "changelog.md"
        elif path.endswith(".md") and "/" not in path:
            pass
        elif path.startswith("diagrams/") or path.startswith("../diagrams/"):
            path = "diagrams/" + path.split("diagrams/", 1)[1]
        else:
            return f"{label}" if label.startswith("`") else label
        return f"[{label}]({path}{'#' + anchor if anchor else ''})"

    return re.sub(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)", link, text)


def assemble(folder: Path) -> Path:
    """Write the site's sources and config into ``folder``; returns the config file."""
    pages = folder / "pages"
    (pages / "reference").mkdir(parents=True)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (pages / "index.md").write_text(_rewrite_links(readme, from_readme=True), encoding="utf-8")
    (pages / "changelog.md").write_text((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), encoding="utf-8")
    guides = []
    for title, name in GUIDES:
        source = DOCS / name
        if source.exists():
            text = _rewrite_links(source.read_text(encoding="utf-8"), from_readme=False)
            (pages / name).write_text(text, encoding="utf-8")
            guides.append(f"      - {title}: {name}")
    shutil.copytree(ROOT / "diagrams", pages / "diagrams")
    if (DOCS / "images").is_dir():  # the screenshots the browser tests take (docs/inbox.md)
        shutil.copytree(DOCS / "images", pages / "images")
    reference = []
    for title, name, modules in REFERENCE:
        body = [f"# {title}\n"]
        for module in modules:
            body.append(f"::: {module}\n")
        (pages / "reference" / name).write_text("\n".join(body), encoding="utf-8")
        reference.append(f"      - {title}: reference/{name}")
    config = folder / "mkdocs.yml"
    config.write_text(
        CONFIG.format(site="site", root=ROOT, guides="\n".join(guides), reference="\n".join(reference)),
        encoding="utf-8",
    )
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("--output", type=Path, default=ROOT / "site", help="folder for the built site")
    parser.add_argument("--serve", action="store_true", help="serve the site on 127.0.0.1:8000 instead")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agent-fsm-docs-") as tmp:
        config = assemble(Path(tmp))
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
