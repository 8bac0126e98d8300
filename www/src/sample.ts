// The sample network offered on the landing page: testdata/sample/sample.entity, copied into public/ at build time.
// It is the corpus case transformer_int8 (embedding, attention and SwiGLU blocks with residuals, int8 weights);
// its run input is that case's input from the corpus manifest (four token ids).
import type { RunDefaults } from './run';

export const SAMPLE: { url: string; name: string; run: RunDefaults } = {
  url: 'sample.entity',
  name: 'sample.entity',
  run: { shape: [4], input: [1, 4, 2, 9] },
};
