/* rlx-run forward: one forward pass on named inputs (a safetensors file) to named
 * outputs with the Hugging Face names (logits, last_hidden_state, ...). */
#include <stdio.h>
#include <string.h>
#include "run_cmds.h"
#include "run_common.h"

static const char usage[] =
    "usage: rlx-run forward --model DIR --inputs IN.safetensors --out OUT.safetensors "
    "[--backend NAME] [--profile NAME|FILE] [--threads N] [--policy direct|fusable] [--precision f32|f16|bf16] [--mixed none|auto] [--flow FILE]";

static const char help[] =
    "usage: rlx-run forward --model DIR --inputs IN.safetensors --out OUT.safetensors [options]\n"
    "Runs one forward pass; inputs and outputs carry the Hugging Face names\n"
    "(causal LM: input_ids -> logits). Integer inputs may be I32 or I64.\n"
    "\n"
    "  --model DIR            model folder (config.json, *.safetensors)\n"
    "  --inputs FILE          safetensors file with the named inputs\n"
    "  --out FILE             safetensors file to write the outputs to\n"
    "  --backend NAME         cpu, cuda, rocm or auto (default auto)\n"
    "  --profile NAME|FILE    compile profile preset or .rlx.json file\n"
    "  --threads N            CPU worker threads (0: one per physical core)\n"
    "  --devices 0,1            validated here; several GPUs run through rlx-bench --devices (docs/multi-gpu.md)\n"
    "  --policy direct|fusable fusion policy, overriding the profile's\n"
    "  --precision f32|f16|bf16 compute dtype, overriding the profile's precision.compute\n"
    "  --mixed none|auto      precision.mixed (auto: only matmul weights in 16 bits)\n"
    "  --flow FILE.json       flow file replacing the architecture's recipe\n"
    "  -h, --help             this help\n";

int rlx_cmd_forward(int argc, char **argv)
{
    const char *model = NULL, *inputs = NULL, *out = NULL, *v;
    run_model_flags mf;
    memset(&mf, 0, sizeof mf);
    for (int i = 0; i < argc; i++) {
        int r;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(help, stdout);
            return 0;
        }
        if ((r = run_model_flag(argc, argv, &i, &mf, usage)) != 0) {
            if (r < 0) return fprintf(stderr, "%s\n", usage), 2;
            continue;
        }
        const char **slot = NULL;
        if ((r = run_opt(argc, argv, &i, "--model", &v)) != 0) slot = &model;
        else if ((r = run_opt(argc, argv, &i, "--inputs", &v)) != 0) slot = &inputs;
        else if ((r = run_opt(argc, argv, &i, "--out", &v)) != 0) slot = &out;
        else
            return run_usage(usage, "%s '%s'", argv[i][0] == '-' ? "unknown option" : "unexpected argument",
                             argv[i]);
        if (r < 0) return fprintf(stderr, "%s\n", usage), 2;
        *slot = v;
    }
    if (!model || !inputs || !out) return run_usage(usage, "forward needs --model, --inputs and --out");

    rlx_diag d;
    rlx_diag_init(&d);
    rlx_model_options mo;
    run_model_options(&mf, &mo);
    rlx_weights *in = NULL;
    rlx_model *m = NULL;
    rlx_st_writer *w = NULL;
    int rc = 0;
    if (rlx_weights_open(inputs, &in, &d) != 0 || rlx_model_open(model, &mo, &m, &d) != 0) {
        rc = run_fail(&d);
    } else if (!(w = rlx_st_writer_new())) {
        rc = run_error("out of memory");
    } else if (rlx_model_forward(m, in, w, &d) != 0 || rlx_st_writer_save(w, out, &d) != 0) {
        rc = run_fail(&d);
    }
    rlx_st_writer_free(w);
    rlx_model_close(m);
    rlx_weights_close(in);
    return rc;
}
