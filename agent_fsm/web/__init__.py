"""
The run viewer and the approval inbox, in the browser.

    html = render_view(state)                      # one self-contained page: agent-fsm view TRACE.json -o run.html
    app = inbox_app(lambda: open_store(url), agent, reviewers=Reviewers.from_environment())
    serve(app)                                     # 127.0.0.1:8765: agent-fsm inbox --store URL --world MODULE:NAME

Needs the ``web`` extra (``pip install 'agent_fsm[web]'``: Starlette, Jinja2,
uvicorn). What a reviewer sees and what is defended against is in docs/inbox.md.
"""

from agent_fsm.web.app import APP_POLICY, inbox_app
from agent_fsm.web.auth import REVIEWERS_VARIABLE, Reviewers, ReviewersMissing, Session, Sessions
from agent_fsm.web.budget import BudgetChart, budget_chart
from agent_fsm.web.decisions import FormRefused
from agent_fsm.web.pages import VIEW_POLICY, render_view, run_context
from agent_fsm.web.serve import is_loopback, serve
from agent_fsm.web.timeline import CallView, Timeline, TurnView, timeline_of

__all__ = [
    # Pages
    "render_view",
    "run_context",
    "timeline_of",
    "budget_chart",
    "Timeline",
    "TurnView",
    "CallView",
    "BudgetChart",
    "VIEW_POLICY",
    # The inbox
    "inbox_app",
    "serve",
    "is_loopback",
    "APP_POLICY",
    "Reviewers",
    "ReviewersMissing",
    "REVIEWERS_VARIABLE",
    "Session",
    "Sessions",
    "FormRefused",
]
