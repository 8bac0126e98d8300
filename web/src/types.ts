// Public data shapes. Field names of the wasm results stay snake_case, exactly as the Rust structs serialize.

/** What `inspect`/`open` accept: a file or bytes, or a URL to fetch (in Node also a file path or `file:` URL). */
export type Source = File | Blob | ArrayBuffer | Uint8Array | string | URL;

export interface Progress {
  phase: 'download' | 'read' | 'parse' | 'upload' | 'forward' | 'convert';
  loaded: number;
  total?: number;
}

export interface OpenOptions {
  onProgress?: (p: Progress) => void;
  signal?: AbortSignal;
  /** Keep fetched URLs in browser storage (OPFS, else the Cache API) and resume cut downloads. Default true. */
  cache?: boolean;
  /** Shown as `LoomModel.name`; defaults to the file name or the last URL segment. */
  name?: string;
  /**
   * How `open` loads the weights. `'full'` (default): the whole file into the worker's WebAssembly memory; every
   * call works. `'gpu'` (`.entity` files only): each blob is read from the source and goes straight to a WebGPU
   * buffer, so WebAssembly memory holds the header and one blob, never the model; `forward` runs on the GPU,
   * `tensorStats`/`tensorPreview` read that layer's blob again, and `convert`/`lossReport`/`diff` reject with
   * `unsupported`. Without WebGPU it rejects with `no_webgpu`; other formats reject with `unsupported`.
   */
  load?: 'full' | 'gpu';
}

export interface Grid {
  depth: number;
  rows: number;
  cols: number;
  layers_per_cell: number;
}

export interface LayerRow {
  path: string;
  nesting: number;
  z: number;
  y: number;
  x: number;
  l: number;
  type: string;
  activation: string;
  dtype: string;
  scale: number | null;
  params: number;
  bytes: number;
  disabled: boolean;
}

export interface TensorRow {
  name: string;
  dtype: string;
  shape: number[];
  bytes: number;
  offset: number;
}

export interface Inspection {
  format: 'entity' | 'json' | 'safetensors' | 'gguf' | 'checkpoint';
  file_bytes: number;
  header_bytes: number;
  weight_bytes: number;
  /** Bytes actually read from the source (a File, a URL) to produce this. */
  bytes_read: number;
  total_params: number;
  grid: Grid | null;
  layers: LayerRow[];
  tensors: TensorRow[];
  bytes_by_dtype: Record<string, number>;
  metadata: Record<string, string>;
  /** What a Loom network takes as input, when its first layer says (Dense or Embedding); null otherwise. */
  input: InputSpec | null;
}

/** A network's input: float values of a width, or token ids (integers below `vocab`). */
export interface InputSpec {
  kind: 'float' | 'token_ids';
  /** A shape that fits, batch 1. */
  shape: number[];
  vocab: number | null;
  /** The first layer's path. */
  layer: string;
}

export interface TensorStats {
  count: number;
  min: number;
  max: number;
  mean: number;
  std: number;
  sparsity: number;
  /** NaN and ±Inf values (left out of the other numbers): `nan + pos_inf + neg_inf`. */
  non_finite: number;
  nan: number;
  pos_inf: number;
  neg_inf: number;
  /** Over every finite value (numpy's `histogram`). */
  histogram: { min: number; max: number; counts: number[] };
  /**
   * Over the values between two percentiles (`below`/`above` count the rest), present when a few outliers stretch
   * the full range far beyond where most values lie.
   */
  clipped: {
    percentiles: [number, number];
    histogram: { min: number; max: number; counts: number[] };
    below: number;
    above: number;
  } | null;
}

export interface TensorPreview {
  name: string;
  dtype: string;
  scale: number | null;
  shape: number[];
  /** Dequantized values. */
  values: Float32Array;
  /** Raw stored codes, for packed dtypes. */
  codes?: Int32Array;
  /**
   * For GGUF block types (Q4_0 … Q6_K): the runs of codes sharing a block (or K-quant sub-block) scale, in order;
   * value = scale·(code − zero) + min.
   */
  groups?: { len: number; scale: number; min: number; zero: number }[];
}

export interface ForwardOptions {
  /** Default `'cpu'`; `'gpu'` (the only device) for a model opened with `load: 'gpu'`. */
  device?: 'cpu' | 'gpu';
  signal?: AbortSignal;
  onProgress?: (p: Progress) => void;
}

export interface ForwardResult {
  data: Float32Array;
  shape: number[];
  device: 'cpu' | 'gpu';
  /** Set when the GPU was asked for but the forward ran on the CPU, and why. */
  fallbackReason?: string;
  /** Layers the GPU run computed on the CPU (no kernel for them), with the reason. */
  cpu_layers?: Record<string, string>;
  ms: number;
}

export interface ConvertOptions {
  format: 'entity' | 'json' | 'safetensors' | 'safetensors-f16' | 'safetensors-bf16';
  dtype?: string;
  layerDtypes?: Record<string, string>;
}

export interface LossReport {
  layers: { path: string; from: string; to: string; changed: number; total: number; max_abs_error: number }[];
}

export interface ModelDiff {
  entries: {
    name: string;
    status: 'same' | 'changed' | 'added' | 'removed';
    dtype_before: string | null;
    dtype_after: string | null;
    max_abs: number | null;
    mean_abs: number | null;
  }[];
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export interface GpuInfo {
  available: boolean;
  reason?: string;
  adapter?: string;
  shader_f16?: boolean;
  /** True when the browser's adapter is a software rasterizer (SwiftShader, lavapipe): WebGPU runs on the CPU. */
  software?: boolean;
}

export interface CacheEntry {
  url: string;
  /** Bytes stored so far. */
  bytes: number;
  /** False for a download that was cut; the next `open`/`inspect` of the URL resumes it. */
  complete: boolean;
  /** When the download started (ms since the epoch). */
  storedAt: number;
}

export interface LoomModel {
  readonly name: string;
  readonly inspection: Inspection;
  tensorStats(name: string, opts?: { bins?: number }): Promise<TensorStats>;
  tensorPreview(name: string, n?: number): Promise<TensorPreview>;
  forward(input: Float32Array | number[], shape: number[], opts?: ForwardOptions): Promise<ForwardResult>;
  /** What `convert` would change, layer by layer (empty `layers` = lossless). */
  lossReport(opts: ConvertOptions): Promise<LossReport>;
  convert(
    opts: ConvertOptions & { allowLossy?: boolean; signal?: AbortSignal; onProgress?: (p: Progress) => void },
  ): Promise<{ blob: Blob; loss: LossReport }>;
  diff(other: LoomModel): Promise<ModelDiff>;
  /** Reserved for the LLM runtime: rejects with code `unsupported` for now. */
  chat(messages: ChatMessage[], opts?: { onToken?: (t: string) => void; signal?: AbortSignal }): Promise<string>;
  /** Frees the model's memory in the worker; later calls reject with code `invalid_input`. */
  dispose(): Promise<void>;
}
