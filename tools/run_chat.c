/* Placeholder: the tokenizer area replaces this file with the real chat subcommand. */
#include <stdio.h>
#include "run_cmds.h"
int rlx_cmd_chat(int argc, char **argv) { (void)argc; (void)argv; fputs("rlx-run: chat: not implemented yet\n", stderr); return 1; }
