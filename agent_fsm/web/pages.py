"""
The HTML pages, rendered by Jinja2 with autoescaping always on, and the one self-contained run page.

Model and tool text reaches a page only through ``{{ ... }}``, which
escapes it; the only markup passed through unescaped is what this package
made itself: the diagram Graphviz drew from the machine's declaration and
the stylesheet shipped beside the templates.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

from agent_fsm.diagrams.dot import GraphvizMissing, render
from agent_fsm.diagrams.labels import agent_title
from agent_fsm.diagrams.path import TraceError, path_of, path_on_agent
from agent_fsm.engine import RUN_MACHINE, Agent, RunState
from agent_fsm.store.records import Decision, Effect
from agent_fsm.web.budget import budget_chart
from agent_fsm.web.timeline import pretty_json, timeline_of

__all__ = ["VIEW_POLICY", "diagram_svg", "render_page", "render_view", "run_context"]

VIEW_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
"""The saved page's Content-Security-Policy: no script of any kind runs in it, and it loads nothing."""


@functools.cache
def _environment() -> Any:
    import jinja2

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("agent_fsm.web", "templates"),
        autoescape=True,  # every template, whatever its name: model text is never markup
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["pretty"] = pretty_json
    return environment


def _trusted(markup: str) -> Any:
    from markupsafe import Markup

    return Markup(markup)  # only markup this package produced itself comes here


def _stylesheet() -> str:
    return resources.files("agent_fsm.web").joinpath("static", "inbox.css").read_text(encoding="utf-8")


def diagram_svg(state: RunState, agent: Agent | None = None) -> tuple[str | None, str | None]:
    """
    The machine drawn by Graphviz with ``state``'s path highlighted, as inline SVG; or why it cannot be.

    With ``agent`` (the inbox knows the agent deciding its runs), its machine
    as configured, only the states it can enter; a run that took a step that
    machine lacks (saved by an agent configured otherwise) is drawn on the
    whole table instead. Without, the whole run machine.

    Returns ``(svg, None)``, or ``(None, problem)`` when ``dot`` is missing or the path does not fit the machine.
    """
    try:
        try:
            path = path_on_agent(state, agent)
        except TraceError:
            if agent is None:
                raise
            path = path_of(state)
        title = None if agent is None else agent_title(agent.name, path.machine, RUN_MACHINE)
        drawn = render(path.machine, "svg", path=path, title=title).decode("utf-8")
    except (GraphvizMissing, TraceError) as exc:
        return None, str(exc)
    return _fitted(drawn[drawn.find("<svg") :]), None


def _fitted(svg: str) -> str:
    """
    The SVG scaled to its box: Graphviz at 96 dpi scales the drawing by 96/72 inside a viewBox
    still in points, which crops it; the viewBox is set to the drawn size, the fixed size dropped.
    """
    head, sep, rest = svg.partition(">")
    found = re.search(r'width="([\d.]+)pt"\s+height="([\d.]+)pt"', head)
    if found is None:
        return svg
    width, height = found.groups()
    head = re.sub(r'\s(width|height|viewBox)="[^"]*"', "", head) + f' viewBox="0 0 {width} {height}"'
    return head + sep + rest


def run_context(
    state: RunState,
    *,
    run_id: str | None = None,
    effects: Sequence[Effect] = (),
    decisions: Sequence[Decision] = (),
    agent: Agent | None = None,
) -> dict[str, Any]:
    """What the run templates read: the timeline, the budget chart and the diagram (``agent``'s machine, if given)."""
    svg, problem = diagram_svg(state, agent)
    return {
        "run": timeline_of(state, run_id=run_id, effects=tuple(effects), decisions=tuple(decisions)),
        "budget": budget_chart(state),
        "diagram": _trusted(svg) if svg is not None else None,
        "diagram_problem": problem,
    }


def render_page(template: str, **context: Any) -> str:
    """One of the inbox's pages, rendered with ``context`` (every value escaped unless this package marked it)."""
    return str(_environment().get_template(template).render(**context))


def render_view(
    state: RunState,
    *,
    run_id: str | None = None,
    effects: Sequence[Effect] = (),
    decisions: Sequence[Decision] = (),
) -> str:
    """
    One run as a single self-contained HTML file: diagram, timeline, budgets, effects and ending.

    Everything is inline (the SVG, the stylesheet), nothing is fetched, and
    the page's own policy forbids every script, so it opens offline and a
    hostile string in the run cannot act even if it were not escaped.
    """
    context = run_context(state, run_id=run_id, effects=effects, decisions=decisions)
    return render_page("view.html", css=_trusted(_stylesheet()), policy=VIEW_POLICY, **context)
