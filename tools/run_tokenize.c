/* Placeholder: the tokenizer area replaces this file with the real subcommands. */
#include <stdio.h>
#include "run_cmds.h"
int rlx_cmd_tokenize(int argc, char **argv) { (void)argc; (void)argv; fputs("rlx-run: tokenize: not implemented yet\n", stderr); return 1; }
int rlx_cmd_detokenize(int argc, char **argv) { (void)argc; (void)argv; fputs("rlx-run: detokenize: not implemented yet\n", stderr); return 1; }
