// weightgraft explore: a session kept in a file and opened again (beside app.js, whose globals it
// reads: info, state, undoStack, redoStack, setState, el, showError). The file holds the models'
// names (opening it under other models says so and refuses), the prompt, target, donor, cells (head
// cells too), pins, competing answer, the layers split into heads and the undo history.
"use strict";

const SESSION_KIND = "weightgraft-explore-session";
const SESSION_VERSION = 1;

function sessionFile() {
  return {
    kind: SESSION_KIND, version: SESSION_VERSION, saved: new Date().toISOString(),
    models: info.models, state, history: { undo: undoStack, redo: redoStack },
  };
}

function modelNames(models) {
  return JSON.stringify([models.recipient.name, ...models.donors.map((d) => d.name)]);
}

function checkedSession(data) {
  if (!data || data.kind !== SESSION_KIND) throw new Error("this file is not a weightgraft explore session");
  if (data.version !== SESSION_VERSION) throw new Error(`session version ${data.version}; this explorer reads version ${SESSION_VERSION}`);
  if (modelNames(data.models) !== modelNames(info.models))
    throw new Error(`the session was saved with the models ${modelNames(data.models)}; this explorer has ${modelNames(info.models)}: start it with those`);
  const s = data.state;
  if (!s || typeof s.text !== "string" || typeof s.cells !== "object" || !Array.isArray(s.pins))
    throw new Error("the session's state is damaged (text, cells or pins missing)");
  if (s.heads !== undefined && !(Array.isArray(s.heads) && s.heads.every((l) => Number.isInteger(l) && l >= 0 && l < info.num_layers)))
    throw new Error("the session's layers split into heads are damaged");
  if (s.experts !== undefined && !(Array.isArray(s.experts) && s.experts.every((l) => Number.isInteger(l) && l >= 0 && l < info.num_layers)))
    throw new Error("the session's layers split into experts are damaged");
  return data;
}

async function openSession(file) {
  try {
    const data = checkedSession(JSON.parse(await file.text()));
    undoStack.length = 0; redoStack.length = 0;
    undoStack.push(...(data.history.undo || [])); redoStack.push(...(data.history.redo || []));
    setState(data.state);
    showError(null);
  } catch (err) { showError(`cannot open the session: ${err.message}`); }
}

(function startKeeping() {
  if (typeof info === "undefined" || !info || !state) { setTimeout(startKeeping, 20); return; }
  $("save-session").onclick = () => download("explore-session.json", "application/json", JSON.stringify(sessionFile(), null, 2));
  $("open-session").onchange = (e) => { if (e.target.files[0]) openSession(e.target.files[0]); e.target.value = ""; };
})();
