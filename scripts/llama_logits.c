// llama.cpp's logits for a prompt of token ids, for cross-checks (scripts/crosscheck-llamacpp.sh builds it against
// a llama.cpp build; never part of setup or CI). Prints one JSON object: the top-K (id, logit) of every prompt
// position, then the greedy continuation (argmax, one token at a time through llama.cpp's KV cache).
//
//   llama_logits MODEL.gguf ID,ID,... N_NEW [TOP_K] [THREADS]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void print_top(const float *logits, int n_vocab, int k) {
    int best[64];
    int m = k < 64 ? k : 64;
    for (int j = 0; j < m; j++) best[j] = -1;
    for (int i = 0; i < n_vocab; i++) {
        for (int j = 0; j < m; j++) {
            if (best[j] < 0 || logits[i] > logits[best[j]]) {
                for (int s = m - 1; s > j; s--) best[s] = best[s - 1];
                best[j] = i;
                break;
            }
        }
    }
    printf("[");
    for (int j = 0; j < m; j++) printf("%s[%d, %.7g]", j ? ", " : "", best[j], logits[best[j]]);
    printf("]");
}

static int argmax(const float *logits, int n_vocab) {
    int best = 0;
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf ID,ID,... N_NEW [TOP_K] [THREADS]\n", argv[0]);
        return 2;
    }
    int n_new = atoi(argv[3]);
    int top_k = argc > 4 ? atoi(argv[4]) : 5;
    int threads = argc > 5 ? atoi(argv[5]) : 2;
    int ids[8192];
    int n = 0;
    for (char *tok = strtok(argv[2], ","); tok && n < 8192; tok = strtok(NULL, ",")) ids[n++] = atoi(tok);

    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n + n_new + 16;
    cp.n_batch = n + 16;
    cp.n_ubatch = n + 16;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    // LLAMA_KV_F32=1: a float32 KV cache and no flash attention (whose CPU kernel rounds to float16), to tell
    // llama.cpp's rounding from a real difference.
    if (getenv("LLAMA_KV_F32")) {
        cp.type_k = GGML_TYPE_F32;
        cp.type_v = GGML_TYPE_F32;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    }
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    struct llama_batch batch = llama_batch_init(n + 1, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = ids[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch)) return 1;
    printf("{\"prompt\": [");
    for (int i = 0; i < n; i++) {
        printf("%s", i ? ", " : "");
        print_top(llama_get_logits_ith(ctx, i), n_vocab, top_k);
    }
    printf("],\n \"greedy\": [");
    int next = argmax(llama_get_logits_ith(ctx, n - 1), n_vocab);
    for (int s = 0; s < n_new; s++) {
        printf("%s%d", s ? ", " : "", next);
        batch.token[0] = next;
        batch.pos[0] = n + s;
        batch.n_seq_id[0] = 1;
        batch.seq_id[0][0] = 0;
        batch.logits[0] = 1;
        batch.n_tokens = 1;
        if (llama_decode(ctx, batch)) return 1;
        next = argmax(llama_get_logits_ith(ctx, 0), n_vocab);
    }
    printf("]}\n");
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
