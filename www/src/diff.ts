// The diff panel: open a second file and compare it with the current one, layer by layer (status, dtype changes,
// max and mean absolute weight deltas).
import { open } from 'loom-wasm';
import type { LoomModel, ModelDiff } from 'loom-wasm';
import { fill, h } from './dom';
import { num } from './format';
import { errorText } from './errors';

export class DiffPanel {
  private model: LoomModel | undefined;
  private other: LoomModel | undefined;
  private readonly picker = h('input', { type: 'file', hidden: true, 'data-testid': 'diff-input' });
  private readonly zone = h(
    'label',
    { class: 'mini-drop', 'data-testid': 'diff-dropzone' },
    this.picker,
    'Drop a second file here, or click to choose one: the two are compared layer by layer.',
  );
  private readonly onlyChanges = h('input', { type: 'checkbox', checked: true });
  private readonly out = h('div', { class: 'diff-out' });
  private last: { diff: ModelDiff; name: string } | undefined;

  constructor(target: HTMLElement) {
    this.picker.addEventListener('change', () => {
      const f = this.picker.files?.[0];
      if (f) void this.compare(f);
      this.picker.value = '';
    });
    this.zone.addEventListener('dragover', (e) => {
      e.preventDefault();
      e.stopPropagation();
      this.zone.classList.add('over');
    });
    this.zone.addEventListener('dragleave', () => this.zone.classList.remove('over'));
    this.zone.addEventListener('drop', (e) => {
      e.preventDefault();
      e.stopPropagation();
      this.zone.classList.remove('over');
      const f = e.dataTransfer?.files[0];
      if (f) void this.compare(f);
    });
    this.onlyChanges.addEventListener('change', () => this.last && this.render(this.last.diff, this.last.name));
    fill(target, h('h2', null, 'Diff'), this.zone, this.out);
  }

  setModel(model: LoomModel | undefined): void {
    this.model = model;
    this.last = undefined;
    void this.other?.dispose();
    this.other = undefined;
    fill(this.out);
  }

  private async compare(file: File): Promise<void> {
    const model = this.model;
    if (!model) {
      fill(this.out, h('p', { class: 'muted' }, 'Open a model first, then drop the one to compare it with.'));
      return;
    }
    fill(this.out, h('p', { class: 'muted' }, `Reading ${file.name}…`));
    try {
      void this.other?.dispose();
      this.other = await open(file, { name: file.name });
      const diff = await model.diff(this.other);
      if (model !== this.model) return;
      this.last = { diff, name: file.name };
      this.render(diff, file.name);
    } catch (e) {
      fill(this.out, h('p', { class: 'inline-error', 'data-testid': 'diff-error' }, errorText(e)));
    }
  }

  private render(diff: ModelDiff, name: string): void {
    const counts = { same: 0, changed: 0, added: 0, removed: 0 };
    for (const e of diff.entries) counts[e.status]++;
    const dtypeChanges = diff.entries.filter((e) => e.dtype_before && e.dtype_after && e.dtype_before !== e.dtype_after).length;
    const shown = this.onlyChanges.checked ? diff.entries.filter((e) => e.status !== 'same') : diff.entries;
    fill(this.out,
      h(
        'p',
        { class: 'diff-summary', 'data-testid': 'diff-summary', 'data-changed': counts.changed },
        `Against ${name}: `,
        h('b', null, `${counts.changed} changed`),
        `, ${counts.added} added, ${counts.removed} removed, ${counts.same} the same; ${dtypeChanges} dtype change(s).`,
      ),
      h('label', { class: 'accept' }, this.onlyChanges, ' only show differences'),
      shown.length
        ? h(
            'table',
            { class: 'diff-table' },
            h('thead', null, h('tr', null, ['Layer / tensor', 'Status', 'Dtype', 'Max |Δ|', 'Mean |Δ|'].map((t) => h('th', null, t)))),
            h(
              'tbody',
              null,
              shown.map((e) =>
                h(
                  'tr',
                  { 'data-testid': 'diff-row', 'data-status': e.status, 'data-name': e.name },
                  h('td', null, h('code', null, e.name)),
                  h('td', null, h('span', { class: `chip ${e.status}` }, e.status)),
                  h(
                    'td',
                    null,
                    e.dtype_before === e.dtype_after
                      ? (e.dtype_before ?? '')
                      : h('span', { class: 'dtype-change' }, `${e.dtype_before ?? '—'} → ${e.dtype_after ?? '—'}`),
                  ),
                  h('td', { class: 'num' }, e.max_abs === null || e.max_abs === undefined ? '' : num(e.max_abs)),
                  h('td', { class: 'num' }, e.mean_abs === null || e.mean_abs === undefined ? '' : num(e.mean_abs)),
                ),
              ),
            ),
          )
        : h('p', { class: 'note-ok' }, 'No differences: the weights are identical.'),
    );
  }
}
