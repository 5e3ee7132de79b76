/* rlx-run subcommands: each takes argv after the subcommand name and returns the exit
 * status (0 ok, 1 clear error printed as one line on stderr, 2 bad usage). */
#ifndef RLX_RUN_CMDS_H
#define RLX_RUN_CMDS_H
int rlx_cmd_generate(int argc, char **argv);   /* run_generate.c */
int rlx_cmd_forward(int argc, char **argv);    /* run_forward.c */
int rlx_cmd_tokenize(int argc, char **argv);   /* run_tokenize.c */
int rlx_cmd_detokenize(int argc, char **argv); /* run_tokenize.c */
int rlx_cmd_chat(int argc, char **argv);       /* run_chat.c */
int rlx_cmd_diffuse(int argc, char **argv);    /* run_diffuse.c */
#endif
