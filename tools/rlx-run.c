/* rlx-run: run models from the command line. Subcommands: generate (the default),
 * forward, tokenize, detokenize, chat, diffuse. Exit status: 0 ok, 1 error (one line on stderr),
 * 2 bad usage. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "run_cmds.h"
#include "run_common.h"

static const char usage[] =
    "usage: rlx-run [generate|forward|tokenize|detokenize|chat|diffuse] [options] (rlx-run SUBCOMMAND --help)";

static const char help[] =
    "usage: rlx-run [SUBCOMMAND] [options]\n"
    "  generate    (default) generate text from a causal LM: rlx-run generate --help\n"
    "  forward     one forward pass, named inputs to named outputs: rlx-run forward --help\n"
    "  tokenize    text to token ids: rlx-run tokenize --help\n"
    "  detokenize  token ids to text: rlx-run detokenize --help\n"
    "  chat        interactive chat: rlx-run chat --help\n"
    "  diffuse     FLUX text-to-image denoising loop: rlx-run diffuse --help\n"
    "With no subcommand (or options first), generate runs; with no arguments at all it\n"
    "generates text from the bundled demo model.\n\n";

static int run_cmd(int argc, char **argv)
{
    if (argc < 2) return rlx_cmd_generate(0, argv + 1);
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(help, stdout);
        fflush(stdout);
        return rlx_cmd_generate(1, argv + 1); /* the generate options follow */
    }
    if (cmd[0] == '-') return rlx_cmd_generate(argc - 1, argv + 1);
    if (strcmp(cmd, "generate") == 0) return rlx_cmd_generate(argc - 2, argv + 2);
    if (strcmp(cmd, "forward") == 0) return rlx_cmd_forward(argc - 2, argv + 2);
    if (strcmp(cmd, "tokenize") == 0) return rlx_cmd_tokenize(argc - 2, argv + 2);
    if (strcmp(cmd, "detokenize") == 0) return rlx_cmd_detokenize(argc - 2, argv + 2);
    if (strcmp(cmd, "chat") == 0) return rlx_cmd_chat(argc - 2, argv + 2);
    if (strcmp(cmd, "diffuse") == 0) return rlx_cmd_diffuse(argc - 2, argv + 2);
    fprintf(stderr, "rlx-run: unknown subcommand '%s'\n%s\n", cmd, usage);
    return 2;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN); /* a reader gone is a failed write (exit 1), not a signal */
    int rc = run_cmd(argc, argv);
    /* every subcommand's results go to stdout: a write that failed is exit 1 */
    if (rc == 0 && run_stdout_check()) rc = 1;
    return rc;
}
