// Parse Mermaid diagrams with the real mermaid library and report what it understood.
//
// Each line on stdin is a JSON array of diagram texts; for each line, one line goes
// to stdout: a JSON array with, per text, either {ok: false, error} or
// {ok: true, type, ...}, where a state diagram reports its states and relations and a
// sequence diagram its actors and messages, as mermaid's own parser recorded them.
// Loading mermaid takes seconds, so one process serves a whole test session.
import { createInterface } from 'node:readline';
import { JSDOM } from 'jsdom';

// mermaid sanitises labels with DOMPurify, which needs a window to exist at import time.
const dom = new JSDOM('<!doctype html><html><body></body></html>');
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import('mermaid');
mermaid.initialize({ startOnLoad: false, securityLevel: 'strict' });

function stateReport(db) {
  const states = [...db.getStates().values()].map((s) => ({
    id: s.id,
    descriptions: s.descriptions ?? [],
    classes: s.classes ?? [],
    note: s.note ? s.note.text : null,
  }));
  const relations = db.getRelations().map((r) => ({ from: r.id1, to: r.id2, label: r.relationTitle ?? '' }));
  const classes = [...db.getClasses().keys()];
  return { states, relations, classes, composites: composites(db.getRootDocV2().doc ?? [], 'root') };
}

// Composite states as the parser nested them: each with its label, the composite it sits in,
// and the relations written inside it (which getRelations, reading the root only, leaves out).
function composites(doc, parent) {
  const found = [];
  for (const item of doc) {
    if (item.stmt !== 'state' || !Array.isArray(item.doc)) continue;
    const relations = item.doc
      .filter((s) => s.stmt === 'relation')
      .map((r) => ({ from: r.state1.id, to: r.state2.id, label: r.description ?? '' }));
    found.push({ id: item.id, description: item.description ?? '', parent, relations });
    found.push(...composites(item.doc, item.id));
  }
  return found;
}

function sequenceReport(db) {
  const actors = [...db.getActors().values()].map((a) => ({ name: a.name, description: a.description }));
  const messages = db.getMessages().map((m) => ({ from: m.from ?? null, to: m.to ?? null, text: m.message, type: m.type }));
  return { actors, messages };
}

async function parseAll(texts) {
  const reports = [];
  for (const text of texts) {
    try {
      const parsed = await mermaid.parse(text);
      const diagram = await mermaid.mermaidAPI.getDiagramFromText(text);
      const report = { ok: true, type: parsed.diagramType };
      if (parsed.diagramType.startsWith('stateDiagram')) Object.assign(report, stateReport(diagram.db));
      if (parsed.diagramType === 'sequence') Object.assign(report, sequenceReport(diagram.db));
      reports.push(report);
    } catch (error) {
      reports.push({ ok: false, error: String(error && error.message ? error.message : error) });
    }
  }
  return reports;
}

for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (line.trim() === '') continue;
  process.stdout.write(JSON.stringify(await parseAll(JSON.parse(line))) + '\n');
}
