// A conversation through one of llama.cpp's built-in chat templates (`llama_chat_apply_template`), for references
// (scripts/gen_builtin_template_cases.py builds it against a llama.cpp build; never part of setup or CI).
//
//   llama_chat_template TEMPLATE ADD_ASSISTANT ROLE CONTENT [ROLE CONTENT ...]
//
// Prints the formatted prompt, nothing else.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

int main(int argc, char **argv) {
    if (argc < 3 || (argc - 3) % 2 != 0) {
        fprintf(stderr, "usage: %s TEMPLATE ADD_ASSISTANT ROLE CONTENT [ROLE CONTENT ...]\n", argv[0]);
        return 2;
    }
    size_t n = (size_t)(argc - 3) / 2;
    llama_chat_message *chat = calloc(n, sizeof *chat);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        chat[i].role = argv[3 + 2 * i];
        chat[i].content = argv[4 + 2 * i];
        total += strlen(chat[i].content) + strlen(chat[i].role);
    }
    int32_t cap = (int32_t)(2 * total + 1024);
    char *buf = malloc((size_t)cap);
    int32_t len = llama_chat_apply_template(argv[1], chat, n, atoi(argv[2]) != 0, buf, cap);
    if (len < 0 || len > cap) {
        fprintf(stderr, "llama_chat_apply_template failed: %d\n", len);
        return 1;
    }
    fwrite(buf, 1, (size_t)len, stdout);
    return 0;
}
