"""
The site's shape and its reference pages: four parts plus benchmarks and comparison, links checked, tables true.

The strict MkDocs build itself runs in CI (``python docs/build.py``); these
tests check what the build cannot: that each reference table matches the
code it describes, and that the figures quoted on the front door agree with
the benchmark tables they come from.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
import typer.main

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS))
import build  # noqa: E402  (docs/build.py: the site's nav and its link checks)


def _blocks(name: str, language: str = "python") -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (DOCS / name).read_text(), flags=re.DOTALL)


# --- the nav ---------------------------------------------------------------------


def test_the_nav_has_four_parts_then_benchmarks_and_comparison(tmp_path: Path) -> None:
    """The assembled config lists getting started, concepts, how-to guides, reference, benchmarks, comparison."""
    config = build.assemble(tmp_path).read_text()
    order = [
        "  - Getting started:",
        "  - Concepts:",
        "  - How-to guides:",
        "  - Reference:",
        '  - "Benchmarks": benchmarks.md',
        '  - "Comparison": comparison.md',
    ]
    positions = [config.index(line) for line in order]
    assert positions == sorted(positions)
    how_to = config.split("  - How-to guides:", 1)[1].split("  - Reference:", 1)[0]
    for page in ("output.md", "screens.md", "budgets.md", "context.md", "providers.md", "mcp.md", "temporal.md"):
        assert f": {page}" in how_to
    assert (tmp_path / "pages" / "quickstart.md").read_text().startswith("# Quickstart\n")


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    """docs/*.md and the nav's entries are the same set (the quickstart is made from the README)."""
    listed = {name for _, entries in build.PARTS for _, name in entries} | {n for _, n in build.SINGLE_PAGES}
    assert listed - build.GENERATED == {p.name for p in DOCS.glob("*.md")}


def test_a_link_to_a_missing_repository_file_is_caught() -> None:
    """A link that leaves the site (a file of the repository) is checked, since MkDocs cannot check it."""
    broken: list[str] = []
    text = "[bench](../bench/README.md) and [gone](../bench/no-such-file.md)"
    rewritten = build._rewrite_links(text, from_readme=False, broken=broken, page="x.md")
    assert broken == ["x.md: ../bench/no-such-file.md"]
    assert rewritten == "bench and gone"
    broken.clear()
    build._rewrite_links(
        "![chart](../diagrams/run.svg) ![missing](../diagrams/none.svg)", from_readme=False, broken=broken
    )
    assert broken == [": ../diagrams/none.svg"]


def test_a_page_missing_from_the_nav_fails_the_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A page of docs/ that no part lists is refused by name, before MkDocs runs."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for page in DOCS.glob("*.md"):
        (docs / page.name).write_text(page.read_text())
    (docs / "orphan.md").write_text("# Orphan\n")
    monkeypatch.setattr(build, "DOCS", docs)
    with pytest.raises(build.BrokenLinks, match="docs/orphan.md is in no part of the nav"):
        build.assemble(tmp_path / "site")


# --- install ---------------------------------------------------------------------


def test_install_lists_every_extra() -> None:
    """The extras table names exactly the extras pyproject.toml declares."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    listed = set(re.findall(r"^\| `([a-z]+)` \|", (DOCS / "install.md").read_text(), flags=re.MULTILINE))
    assert listed == set(extras)


def test_install_keeps_the_readme_set_up_commands() -> None:
    """The install page shows the README's two set-up commands, verbatim."""
    readme = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.DOTALL)[:2]
    assert _blocks("install.md", "sh")[:2] == readme


# --- the command line ------------------------------------------------------------


def _commands() -> set[str]:
    from agent_fsm.cli import app

    commands = getattr(typer.main.get_command(app), "commands", None)
    assert isinstance(commands, dict) and commands
    return set(commands)


def test_cli_page_lists_every_command() -> None:
    """The command table names exactly the commands `agent-fsm` has."""
    listed = set(re.findall(r"^\| `agent-fsm ([a-z]+)` \|", (DOCS / "cli.md").read_text(), flags=re.MULTILINE))
    assert listed == _commands()


def test_cli_page_lists_every_runs_subcommand() -> None:
    """The `runs` line names each of its subcommands."""
    from agent_fsm.cli import app

    [runs] = [g for g in app.registered_groups if g.name == "runs"]
    line = next(x for x in (DOCS / "cli.md").read_text().splitlines() if x.startswith("| `agent-fsm runs`"))
    names = {c.name for c in runs.typer_instance.registered_commands}
    assert names and all(f"`{name}`" in line for name in names)


# --- the saved-state format ------------------------------------------------------


def test_saved_state_page_runs_and_lists_every_field() -> None:
    """The page's example runs, and its field table is exactly the saved fields, in the order they are written."""
    from agent_fsm.engine._state import SAVED

    namespace: dict[str, object] = {"__name__": "docs_saved_state"}
    for block in _blocks("saved-state.md"):
        exec(compile(block, str(DOCS / "saved-state.md"), "exec"), namespace)
    text = (DOCS / "saved-state.md").read_text()
    listed = re.findall(r"^\| `([a-z_]+)` \|", text, flags=re.MULTILINE)
    assert tuple(listed) == SAVED.fields
    written = json.loads(namespace["text"])  # type: ignore[arg-type]
    assert [f for f in SAVED.fields if f not in written] == ["repeats"]  # left out while empty
    assert list(written) == ["format", *(f for f in SAVED.fields if f in written)]
    added = re.search(r"^((?:`[a-z_]+`(?:, | and )?)+) were added to format", text, flags=re.MULTILINE)
    assert added is not None and set(re.findall(r"`([a-z_]+)`", added.group(1))) == set(SAVED.added)


# --- the figures on the front door -----------------------------------------------


def _peer_ratios() -> dict[str, list[float]]:
    """Each peer's time per run over agent_fsm's, as the one-run table of the benchmarks page gives them."""
    table = (DOCS / "benchmarks.md").read_text().split("## Every figure in one run", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for name in ("LangGraph", "Burr", "pydantic-graph"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {name}'s time per run"))
        rows[name] = [float(x) for x in re.findall(r"\d+\.\d+", row.split("|")[2])]
    return rows


@pytest.mark.parametrize("page", ["README.md", "docs/comparison.md"])
def test_quoted_speed_ratios_come_from_the_benchmark_table(page: str) -> None:
    """The ratios to agent_fsm quoted for LangGraph, Burr and pydantic-graph agree with the measured table."""
    ratios = _peer_ratios()
    text = (ROOT / page).read_text()
    for peer, name in (("LangGraph", "LangGraph"), ("Burr", "Burr"), ("pydantic-graph", "pydantic-graph")):
        expected = ratios[name]
        quoted = _quoted(text, peer)
        assert len(quoted) == 3, (page, peer, quoted)
        for got, want in zip(quoted, expected, strict=True):
            assert abs(got - want) <= 0.15, (page, peer, got, want)


def _quoted(text: str, peer: str) -> list[float]:
    """The three ratios quoted for ``peer``: in the README's last table row, or the comparison's speed table."""
    if "| time per run" in text:
        row = next(line for line in text.splitlines() if line.startswith("| time per run"))
        headers = next(line for line in text.splitlines() if line.startswith("| | agent_fsm"))
        columns = [c.strip() for c in headers.strip("|").split("|")]
        cells = [c.strip() for c in row.strip("|").split("|")]
        cell = cells[columns.index(peer if peer != "pydantic-graph" else "pydantic-ai")]
        if peer == "pydantic-graph":
            cell = cell.split("pydantic-graph:", 1)[1]
        return [float(x) for x in re.findall(r"\d+\.\d+", cell)]
    row = next(line for line in text.splitlines() if line.startswith(f"| {peer}"))
    return [float(x) for x in re.findall(r"\d+\.\d+", row)]


def test_the_comparison_is_dated_and_says_what_was_not_measured() -> None:
    """Both the README table and the page give the measuring date and name the peers not measured."""
    printed = re.search(r"Printed on (\d{4}-\d{2}-\d{2})", (DOCS / "benchmarks.md").read_text())
    assert printed is not None
    for text in ((ROOT / "README.md").read_text(), (DOCS / "comparison.md").read_text()):
        assert printed.group(1) in text and "not measured" in text
    assert "docs/comparison.md" in (ROOT / "README.md").read_text()


def test_benchmark_commands_name_scripts_that_exist() -> None:
    """Every `bench/<script>.py` the benchmarks page runs is in bench/, and every table section gives a date."""
    text = (DOCS / "benchmarks.md").read_text()
    scripts = set(re.findall(r"bench/([a-z_]+\.py)", text))
    assert scripts and all((ROOT / "bench" / s).exists() for s in scripts)
    assert text.count("Measured on") + text.count("Measured earlier on") >= 3
