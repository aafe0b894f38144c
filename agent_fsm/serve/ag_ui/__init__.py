"""AG-UI 1.0 over the one event stream: ``POST /ag-ui`` runs and resumes, its events translated, never re-driven."""

from agent_fsm.serve.ag_ui.events import SUCCESS_STOPS, Translator, interrupt_id, split_interrupt_id
from agent_fsm.serve.ag_ui.routes import ag_ui_routes

__all__ = ["SUCCESS_STOPS", "Translator", "ag_ui_routes", "interrupt_id", "split_interrupt_id"]
