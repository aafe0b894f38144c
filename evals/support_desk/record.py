"""
Record the support-desk eval's cassettes: each case's own model, run once, its replies written by RecordingModel.

Run from the repository root: ``python evals/support_desk/record.py``. The eval then replays
them offline (``agent-fsm eval evals/support_desk/desk.eval.toml``); a case whose agent asks for
anything the cassette does not hold fails, naming the first message that differs.
"""

from __future__ import annotations

from pathlib import Path

from agent_fsm.engine import Stop
from agent_fsm.evals import load_dataset
from agent_fsm.scenarios import build_agent, build_model, load_environment
from agent_fsm.testing import RecordingModel

HERE = Path(__file__).parent


def main() -> None:
    """Record one cassette per case of ``desk.eval.toml``."""
    dataset = load_dataset(HERE / "desk.eval.toml")
    for case in dataset.cases:
        assert case.scenario is not None and case.cassette is not None
        scenario = case.scenario
        environment = load_environment(scenario.environment)
        Path(case.cassette).unlink(missing_ok=True)
        model = RecordingModel(build_model(scenario, environment), case.cassette)
        agent = build_agent(scenario, environment, model=model)
        result = agent.run(scenario.task, history=scenario.history)
        for decision in scenario.resumes:
            if result.stop is not Stop.AWAITING_APPROVAL:
                break
            result = agent.resume(result.state, approve=decision.approve, reason=decision.reason)
        print(f"{case.name}: {len(model.interactions)} replies, ended {result.stop.value}")


if __name__ == "__main__":
    main()
