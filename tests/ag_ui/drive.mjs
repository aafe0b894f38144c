// Drives a served agent through the official AG-UI client: one run, and a resume of its interrupt if asked.
// Usage: node drive.mjs BASE_URL TOKEN TASK [DECISION_JSON|cancel]
// Prints one JSON object: every event the client received, its interrupts, results, messages and state.
import { HttpAgent } from "@ag-ui/client";

const [base, token, task, decision] = process.argv.slice(2);
const agent = new HttpAgent({
  url: `${base}/ag-ui`,
  headers: { Authorization: `Bearer ${token}` },
  threadId: "thread-1",
});
agent.addMessage({ id: "user-1", role: "user", content: task });
const events = [];
const subscriber = { onEvent: ({ event }) => { events.push(event); } };
const report = { events, runs: [] };
try {
  const first = await agent.runAgent({ runId: "run-1" }, subscriber);
  report.runs.push({ result: first.result ?? null, interrupts: [...agent.pendingInterrupts] });
  if (agent.pendingInterrupts.length > 0 && decision) {
    const [open] = agent.pendingInterrupts;
    const entry = decision === "cancel"
      ? { interruptId: open.id, status: "cancelled" }
      : { interruptId: open.id, status: "resolved", payload: JSON.parse(decision) };
    const second = await agent.runAgent({ runId: "run-2", resume: [entry] }, subscriber);
    report.runs.push({ result: second.result ?? null, interrupts: [...agent.pendingInterrupts] });
  }
} catch (error) {
  report.error = { message: String(error?.message ?? error), status: error?.status ?? null };
}
report.messages = agent.messages;
report.state = agent.state;
console.log(JSON.stringify(report));
