// llama.cpp's sampling filters on given logits, for the sampler fixture (scripts/gen_sampler_cases.py builds and
// runs it against a llama.cpp build; never part of setup or CI). No model: each case is one line on stdin,
//
//   N TEMPERATURE TOP_K TOP_P MIN_P PENALTY N_PENALISED ID... LOGIT...   (N logits)
//
// and for each it prints one line of JSON: the ids each stage keeps, in two orders of the same llama.cpp samplers:
// "llama" (llama.cpp's default chain: penalties, top-k, top-p, min-p, then temperature) and "transformers"
// (transformers' order: penalty, temperature, then top-k, top-p, min-p), plus the penalised ids' logits.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

static void print_ids(const char *name, const llama_token_data_array *a) {
    printf("\"%s\": [", name);
    for (size_t i = 0; i < a->size; i++) printf("%s%d", i ? ", " : "", a->data[i].id);
    printf("]");
}

// Applies `s` to `a` and frees it.
static void apply(struct llama_sampler *s, llama_token_data_array *a) {
    llama_sampler_apply(s, a);
    llama_sampler_free(s);
}

int main(void) {
    int n, top_k, n_pen;
    float temp, top_p, min_p, penalty;
    while (scanf("%d %f %d %f %f %f %d", &n, &temp, &top_k, &top_p, &min_p, &penalty, &n_pen) == 7) {
        int *pen = malloc(sizeof(int) * (n_pen > 0 ? n_pen : 1));
        float *logits = malloc(sizeof(float) * n);
        llama_token_data *cur = malloc(sizeof(llama_token_data) * n);
        for (int i = 0; i < n_pen; i++) scanf("%d", &pen[i]);
        for (int i = 0; i < n; i++) scanf("%f", &logits[i]);
        printf("{");
        for (int order = 0; order < 2; order++) {
            for (int i = 0; i < n; i++) cur[i] = (llama_token_data){i, logits[i], 0.0f};
            llama_token_data_array a = {cur, (size_t)n, -1, false};
            // The penalty on each distinct id once, as a context of those ids.
            struct llama_sampler *p = llama_sampler_init_penalties(n, n_pen > 0 ? n_pen : 1, penalty, 0.0f, 0.0f);
            for (int i = 0; i < n_pen; i++) llama_sampler_accept(p, pen[i]);
            apply(p, &a);
            if (order == 0) {
                // The penalised ids' logits (the sampler changes them in place, in id order).
                printf("\"penalised\": [");
                for (int i = 0; i < n_pen; i++) printf("%s%.9g", i ? ", " : "", cur[pen[i]].logit);
                printf("], \"llama\": {");
            } else {
                printf(", \"transformers\": {");
                apply(llama_sampler_init_temp(temp), &a);
            }
            apply(llama_sampler_init_top_k(top_k), &a);
            print_ids("top_k", &a);
            printf(", ");
            apply(llama_sampler_init_top_p(top_p, 1), &a);
            print_ids("top_p", &a);
            printf(", ");
            apply(llama_sampler_init_min_p(min_p, 1), &a);
            print_ids("min_p", &a);
            printf("}");
        }
        printf("}\n");
        free(pen);
        free(logits);
        free(cur);
    }
    return 0;
}
