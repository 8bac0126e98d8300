// The sample networks offered on the landing page, copied from testdata/sample into public/ at build time.
import type { RunDefaults } from './run';

export interface Sample {
  url: string;
  name: string;
  /** A run input from outside truth; without one the Run panel fills one from the network's input spec. */
  run?: RunDefaults;
}

/** decoder.entity: a small decoder written by Loom (scripts/gen_decoder_sample.py): an embedding, 6 folded
 * attention + SwiGLU blocks with residuals, a final norm and an LM head, in mixed dtypes. */
export const DECODER: Sample = { url: 'decoder.entity', name: 'decoder.entity' };

/** sample.entity: the corpus case transformer_int8 (240 parameters); its run input is that case's input from the
 * corpus manifest (four token ids). */
export const SAMPLE: Sample = {
  url: 'sample.entity',
  name: 'sample.entity',
  run: { shape: [4], input: [1, 4, 2, 9] },
};
