// The inspector page: open a model (drop, pick, folder, URL, sample), paint from its header first, then load the
// weights in the package's worker and enable the tensor, run, convert and diff panels.
import './style.css';
import { inspect, open, openFiles } from 'loom-wasm';
import type { Inspection, LoomModel, Progress, Source } from 'loom-wasm';
import { byId } from './dom';
import { PHASES, bytes } from './format';
import { showErrorIn } from './errors';
import { renderSummary } from './summary';
import { renderTopology } from './topology';
import { LayerTable } from './table';
import { TensorPanel } from './tensor';
import { RunPanel } from './run';
import type { RunDefaults } from './run';
import { ConvertPanel } from './convert';
import { DiffPanel } from './diff';
import { DECODER, SAMPLE } from './sample';
import { dropOnChat, isChatShown, openModel as chatWith } from './chat';

const landing = byId('landing');
const inspector = byId('inspector');
const statusBar = byId('status');
const statusText = byId('status-text');
const statusProgress = byId<HTMLProgressElement>('status-progress');
const errorBox = byId('error');
const summary = byId('summary');
const topology = byId('topology');

const table = new LayerTable(byId<HTMLTableElement>('layer-table'), byId('bytes-chart'), byId('table-title'), pick);
const tensor = new TensorPanel(byId('tensor'));
const run = new RunPanel(byId('run'));
const convert = new ConvertPanel(byId('convert'));
const diff = new DiffPanel(byId('diff'));

interface Current {
  name: string;
  inspection: Inspection;
  model?: LoomModel;
  /** Where it came from, for "Chat with this model". */
  source: Source | File[];
}
let current: Current | undefined;
let loading: AbortController | undefined;

function progress(what: string): (p: Progress) => void {
  return (p) => {
    statusBar.hidden = false;
    const total = p.total ?? 0;
    statusText.textContent = `${PHASES[p.phase] ?? p.phase} ${what}: ${bytes(p.loaded)}${total ? ` of ${bytes(total)}` : ''}`;
    if (total > 0) statusProgress.value = p.loaded / total;
    else statusProgress.removeAttribute('value');
  };
}

function busy(text: string | null): void {
  statusBar.hidden = text === null;
  statusText.textContent = text ?? '';
  statusProgress.removeAttribute('value');
}

function showError(e: unknown | null): void {
  showErrorIn(errorBox, e);
}

function pick(path: string): void {
  if (!current) return;
  table.select(path);
  for (const el of topology.querySelectorAll<HTMLElement>('.node-head.selected')) el.classList.remove('selected');
  topology.querySelector(`.node-head[data-path="${CSS.escape(path)}"]`)?.classList.add('selected');
  const row = current.inspection.layers.find((l) => l.path === path);
  const params = row ? row.params : (current.inspection.tensors.find((t) => t.name === path)?.shape.reduce((a, b) => a * b, 1) ?? 0);
  void tensor.show(current.model, path, params, row?.parts ?? []);
}

/** Paints everything that needs only the inspection (header). */
function paint(name: string, ins: Inspection, loaded: boolean): void {
  renderSummary(summary, name, ins, loaded);
  renderTopology(topology, ins, pick);
  table.show(ins);
  landing.hidden = true;
  inspector.hidden = false;
  // A GGUF is an LLM the Chat page can run, unless its architecture (or a feature it uses) does not run: then the
  // button is off and says why.
  byId('chat-with-bar').hidden = ins.format !== 'gguf';
  const reason = byId('chat-with-reason');
  byId<HTMLButtonElement>('chat-with').disabled = ins.llm_unsupported !== undefined;
  reason.hidden = ins.llm_unsupported === undefined;
  reason.textContent = ins.llm_unsupported ?? '';
  document.title = `${name} · Loom inspector`;
}

async function disposeCurrent(): Promise<void> {
  const old = current;
  current = undefined;
  run.setModel(undefined);
  convert.setModel(undefined, undefined, '');
  diff.setModel(undefined);
  tensor.clear();
  await old?.model?.dispose().catch(() => undefined);
}

/** Opens a single source (File, URL) or a checkpoint folder (several Files). */
async function openSource(source: Source | File[], name: string, runDefaults?: RunDefaults): Promise<void> {
  loading?.abort();
  const abort = (loading = new AbortController());
  const signal = abort.signal;
  showError(null);
  await disposeCurrent();
  document.body.dataset.state = 'loading';
  try {
    let model: LoomModel;
    if (Array.isArray(source)) {
      busy(`Reading the checkpoint folder ${name}…`);
      model = await openFiles(source, { onProgress: progress(name), signal, name });
    } else {
      busy(`Reading the header of ${name}…`);
      const ins = await inspect(source, { onProgress: progress(name), signal, name });
      if (signal.aborted) return;
      current = { name, inspection: ins, source };
      paint(name, ins, false);
      document.body.dataset.state = 'inspected';
      busy(`Loading the weights of ${name}…`);
      model = await open(source, { onProgress: progress(name), signal, name });
    }
    if (signal.aborted) {
      void model.dispose();
      return;
    }
    current = { name, inspection: model.inspection, model, source };
    paint(name, model.inspection, true);
    run.setModel(model, runDefaults);
    convert.setModel(model, model.inspection, name);
    diff.setModel(model);
    busy(null);
    document.body.dataset.state = 'ready';
  } catch (e) {
    if (signal.aborted) return;
    busy(null);
    showError(e);
    // A file refused at the header stays on the landing page; one refused while loading keeps its header view.
    document.body.dataset.state = current ? 'inspected' : 'error';
    if (!current) {
      landing.hidden = false;
      inspector.hidden = true;
    }
  } finally {
    if (loading === abort) loading = undefined;
  }
}

function openFileList(files: File[], folderName?: string): void {
  if (files.length === 0) return;
  if (isChatShown()) return dropOnChat(files, folderName);
  if (files.length === 1 && !folderName) void openSource(files[0], files[0].name);
  else void openSource(files, folderName ?? files[0].webkitRelativePath.split('/')[0] ?? 'checkpoint');
}

/** The files directly in a dropped folder (a checkpoint folder is flat), read through the entries API:
 * DataTransfer.files lists a folder as one empty file. */
async function folderFiles(dir: FileSystemDirectoryEntry): Promise<File[]> {
  const reader = dir.createReader();
  const entries: FileSystemEntry[] = [];
  for (;;) {
    const batch = await new Promise<FileSystemEntry[]>((res, rej) => reader.readEntries(res, rej));
    if (batch.length === 0) break;
    entries.push(...batch);
  }
  return Promise.all(
    entries.filter((e) => e.isFile).map((e) => new Promise<File>((res, rej) => (e as FileSystemFileEntry).file(res, rej))),
  );
}

async function onDrop(dt: DataTransfer): Promise<void> {
  const entries = [...dt.items].map((i) => i.webkitGetAsEntry?.()).filter((e): e is FileSystemEntry => !!e);
  const dir = entries.find((e) => e.isDirectory);
  if (dir) {
    try {
      openFileList(await folderFiles(dir as FileSystemDirectoryEntry), dir.name);
    } catch (e) {
      showError(e);
    }
    return;
  }
  openFileList([...dt.files]);
}

// Drag and drop anywhere on the page.
const overlay = byId('drop-overlay');
let dragDepth = 0;
window.addEventListener('dragenter', (e) => {
  if (!e.dataTransfer?.types.includes('Files')) return;
  dragDepth++;
  overlay.hidden = false;
});
window.addEventListener('dragleave', () => {
  dragDepth = Math.max(0, dragDepth - 1);
  if (dragDepth === 0) overlay.hidden = true;
});
window.addEventListener('dragover', (e) => e.preventDefault());
window.addEventListener('drop', (e) => {
  e.preventDefault();
  dragDepth = 0;
  overlay.hidden = true;
  if (e.dataTransfer) void onDrop(e.dataTransfer);
});

for (const id of ['file-input', 'landing-file-input', 'folder-input']) {
  const input = byId<HTMLInputElement>(id);
  input.addEventListener('change', () => {
    const files = [...(input.files ?? [])];
    input.value = '';
    if (id === 'folder-input') openFileList(files, files[0]?.webkitRelativePath.split('/')[0]);
    else openFileList(files);
  });
}

byId<HTMLFormElement>('url-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const url = byId<HTMLInputElement>('url-input').value.trim();
  if (url) void openSource(url, decodeURIComponent(new URL(url, location.href).pathname.split('/').pop() || url));
});

for (const [id, sample] of [['open-decoder', DECODER], ['open-sample', SAMPLE]] as const) {
  byId(id).addEventListener('click', () => void openSource(new URL(sample.url, location.href).href, sample.name, sample.run));
}

byId('chat-with').addEventListener('click', () => {
  if (current) void chatWith(current.source as Source | File[], current.name);
});

byId('status-cancel').addEventListener('click', () => {
  loading?.abort();
  busy(null);
  document.body.dataset.state = current ? 'inspected' : 'idle';
});

// ?open=URL opens a model on load (handy for links and screenshots).
const initial = new URLSearchParams(location.search).get('open');
if (initial) void openSource(new URL(initial, location.href).href, initial.split('/').pop() ?? initial);

document.body.dataset.state = 'idle';
document.body.dataset.app = 'ready';
