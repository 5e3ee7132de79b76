/* The bad-input corpus through the command line: every case makes rlx-run forward and
 * rlx-run generate exit 1 with one stderr line naming the problem; never a signal or
 * a hang. Error texts come from the loaders (tests/bad-inputs/<case>/expect.txt). */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include "testutil.h"
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char *tmp;

static char *value_of(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    if (!p) return NULL;
    p += strlen(key);
    return strndup(p, strcspn(p, "\n"));
}

static void expect_failure(const char *what, const char *cmd, const char *want)
{
    tu_result r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 1, "%s: exit status %d (want 1)\n$ %s\nstderr: %s", what, r.status, cmd,
                  r.err);
    ck_assert_msg(strstr(r.err, want) != NULL, "%s: stderr lacks '%s'\n$ %s\nstderr: %s", what, want,
                  cmd, r.err);
    tu_result_free(&r);
}

static const char *rlx_run(void)
{
    static char p[4096];
    snprintf(p, sizeof p, "%s", tu_tool("tools/rlx-run"));
    return p;
}

START_TEST(control_good_model_runs)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s/out.safetensors'",
             rlx_run(), tu_src("tests/bad-inputs/good-micro"),
             tu_src("tests/bad-inputs/inputs/good.safetensors"), tmp);
    tu_result r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 0, "good model: exit %d: %s", r.status, r.err);
    tu_result_free(&r);
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 2 --greedy", rlx_run(),
             tu_src("tests/bad-inputs/good-micro"));
    r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 0, "good model generate: exit %d: %s", r.status, r.err);
    /* no tokenizer.json: the generated ids stream instead of text, the --json ids */
    tu_result j = tu_run(strcat(cmd, " --json"), 60);
    ck_assert_msg(j.status == 0, "good model generate --json: exit %d: %s", j.status, j.err);
    const char *ids = strstr(j.out, "\"ids\":[");
    ck_assert_msg(ids != NULL, "%s", j.out);
    char want[64];
    int a = 0, b = 0;
    ck_assert_int_eq(sscanf(ids, "\"ids\":[%d,%d]", &a, &b), 2);
    snprintf(want, sizeof want, "%d %d\n", a, b);
    ck_assert_str_eq(r.out, want);
    tu_result_free(&j);
    tu_result_free(&r);
}
END_TEST

START_TEST(bad_models)
{
    char root[4096];
    snprintf(root, sizeof root, "%s", tu_src("tests/bad-inputs"));
    const char *good_in = tu_src("tests/bad-inputs/inputs/good.safetensors");
    char good_inputs[4096];
    snprintf(good_inputs, sizeof good_inputs, "%s", good_in);
    DIR *dir = opendir(root);
    ck_assert_ptr_nonnull(dir);
    struct dirent *de;
    int cases = 0;
    while ((de = readdir(dir)) != NULL) {
        char cdir[4400], ef[4500], cmd[16384];
        snprintf(cdir, sizeof cdir, "%s/%s", root, de->d_name);
        snprintf(ef, sizeof ef, "%s/expect.txt", cdir);
        size_t len;
        char *exp = tu_read_file(ef, &len);
        if (!exp) continue;
        char *stage = value_of(exp, "stage: "), *want = value_of(exp, "expect: ");
        if (strcmp(stage, "none") != 0) {
            snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s/out.safetensors'",
                     rlx_run(), cdir, good_inputs, tmp);
            expect_failure(de->d_name, cmd, want);
            snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 2", rlx_run(), cdir);
            expect_failure(de->d_name, cmd, want);
            cases++;
        }
        free(stage);
        free(want);
        free(exp);
    }
    closedir(dir);
    ck_assert_int_ge(cases, 32);
}
END_TEST

START_TEST(bad_inputs_files)
{
    static const char *const ins[] = {"garbage", "truncated", "f64-ids", "id-past-vocab"};
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
        char in[4200], ef[4200], model[4096], cmd[16384];
        snprintf(in, sizeof in, "%s/%s.safetensors", tu_src("tests/bad-inputs/inputs"), ins[i]);
        snprintf(ef, sizeof ef, "%s/%s.expect", tu_src("tests/bad-inputs/inputs"), ins[i]);
        snprintf(model, sizeof model, "%s", tu_src("tests/bad-inputs/good-micro"));
        size_t len;
        char *want = tu_read_file(ef, &len);
        ck_assert_ptr_nonnull(want);
        want[strcspn(want, "\n")] = 0;
        snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s/out.safetensors'",
                 rlx_run(), model, in, tmp);
        expect_failure(ins[i], cmd, want);
        free(want);
    }
}
END_TEST

/* A model folder of links to the demo's files where one file is a FIFO, a folder, a
 * dangling link or a device: exit 1 naming the file and what it is, never a hang. */
START_TEST(special_files)
{
    static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json",
                                        "generation_config.json"};
    static const char *const kinds[][2] = {{"fifo", "a FIFO, not a regular file"},
                                           {"dir", "a directory, not a regular file"},
                                           {"dangling", "a dangling symbolic link"},
                                           {"zero", "a character device, not a regular file"}};
    static const char *const all[] = {"config.json", "model.safetensors", "tokenizer.json",
                                      "generation_config.json", "tokenizer_config.json"};
    char demo[4096];
    snprintf(demo, sizeof demo, "%s", tu_src("models/tiny-llama-py"));
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            char *m = tu_mkdtemp(), path[4400], cmd[16384], want[4600];
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
                if (strcmp(all[i], files[f]) == 0) continue;
                char src[4400];
                snprintf(src, sizeof src, "%s/%s", demo, all[i]);
                snprintf(path, sizeof path, "%s/%s", m, all[i]);
                ck_assert_int_eq(symlink(src, path), 0);
            }
            snprintf(path, sizeof path, "%s/%s", m, files[f]);
            if (k == 0) ck_assert_int_eq(mkfifo(path, 0600), 0);
            if (k == 1) ck_assert_int_eq(mkdir(path, 0700), 0);
            if (k == 2) ck_assert_int_eq(symlink("/nonexistent/x", path), 0);
            if (k == 3) ck_assert_int_eq(symlink("/dev/zero", path), 0);
            snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --prompt 'def' -n 2", rlx_run(), m);
            snprintf(want, sizeof want, "%s: %s\n", path, kinds[k][1]);
            tu_result r = tu_run(cmd, 30);
            ck_assert_msg(r.status == 1, "%s as %s: exit %d: %s", files[f], kinds[k][0], r.status,
                          r.err);
            const char *line = strstr(r.err, path);
            ck_assert_msg(line && strcmp(line, want) == 0, "%s as %s: stderr '%s', want '%s'",
                          files[f], kinds[k][0], r.err, want);
            tu_result_free(&r);
            tu_rmrf(m);
            free(m);
        }
    /* a flow file and a profile file that are FIFOs */
    char *m = tu_mkdtemp(), fifo[4400], cmd[16384], want[4600];
    snprintf(fifo, sizeof fifo, "%s/flow.json", m);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 2 --flow '%s'", rlx_run(), demo,
             fifo);
    snprintf(want, sizeof want, "%s: a FIFO, not a regular file\n", fifo);
    expect_failure("flow FIFO", cmd, want);
    snprintf(fifo, sizeof fifo, "%s/p.rlx.json", m);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 2 --profile '%s'", rlx_run(),
             demo, fifo);
    snprintf(want, sizeof want, "%s: a FIFO, not a regular file\n", fifo);
    expect_failure("profile FIFO", cmd, want);
    tu_rmrf(m);
    free(m);
}
END_TEST

/* Runs cmd, which must fail with status 1 and a stderr line containing want. */
static void expect_fail1(const char *what, const char *cmd, const char *want)
{
    tu_result r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 1, "%s: exit %d: %s", what, r.status, r.err);
    ck_assert_msg(strstr(r.err, want), "%s: stderr '%s' lacks '%s'", what, r.err, want);
    tu_result_free(&r);
}

/* No temp file of the writer is left in dir. */
static void assert_no_temp(const char *dir)
{
    DIR *dh = opendir(dir);
    ck_assert_ptr_nonnull(dh);
    struct dirent *e;
    while ((e = readdir(dh)))
        ck_assert_msg(!strstr(e->d_name, ".tmp-"), "temp file %s left in %s", e->d_name, dir);
    closedir(dh);
}

/* An output file is replaced whole or not at all; results that cannot be written to
 * stdout are exit 1. File size limit (ulimit -f, SIGXFSZ ignored) makes writes fail. */
START_TEST(outputs_complete_or_untouched)
{
    char *o = tu_mkdtemp(), out[4400], cmd[16384], want[4600], demo[4096];
    snprintf(demo, sizeof demo, "%s", tu_src("models/tiny-llama-py"));
    snprintf(out, sizeof out, "%s/prev.safetensors", o);
    static const char prev[] = "the previous file";
    FILE *f = fopen(out, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(prev, f);
    fclose(f);
    snprintf(want, sizeof want, "rlx-run: %s: write failed: File too large\n", out);
    snprintf(cmd, sizeof cmd, "trap '' XFSZ; ulimit -f 1; '%s' generate --model '%s' --ids 1,2 -n 3 --logits-out '%s'",
             rlx_run(), demo, out);
    expect_fail1("--logits-out over the size limit", cmd, want);
    snprintf(cmd, sizeof cmd, "trap '' XFSZ; ulimit -f 0; '%s' forward --model '%s' --inputs '%s' --out '%s'",
             rlx_run(), tu_src("tests/bad-inputs/good-micro"),
             tu_src("tests/bad-inputs/inputs/good.safetensors"), out);
    expect_fail1("forward --out over the size limit", cmd, want);
    size_t len = 0;
    char *got = tu_read_file(out, &len);
    ck_assert_ptr_nonnull(got);
    ck_assert_uint_eq(len, strlen(prev));
    ck_assert(memcmp(got, prev, len) == 0);
    free(got);
    assert_no_temp(o);
    /* and with room, the file is replaced by a whole safetensors file */
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 3 --logits-out '%s'", rlx_run(),
             demo, out);
    tu_result r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 0, "%s", r.err);
    tu_result_free(&r);
    rlx_weights *w = NULL;
    ck_assert_int_eq(rlx_weights_open(out, &w, NULL), 0);
    ck_assert_ptr_nonnull(rlx_weights_find(w, "decode_logits"));
    rlx_weights_close(w);
    assert_no_temp(o);
    /* one token is the prefill's: no decode rows, and the file still says so */
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 1 --logits-out '%s'", rlx_run(), demo, out);
    r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 0, "%s", r.err);
    tu_result_free(&r);
    ck_assert_int_eq(rlx_weights_open(out, &w, NULL), 0);
    const rlx_tensor_info *ti = rlx_weights_find(w, "decode_logits"), *tl = rlx_weights_find(w, "logits");
    ck_assert_ptr_nonnull(ti);
    ck_assert_ptr_nonnull(tl);
    ck_assert_int_eq(ti->dtype, RLX_F32);
    ck_assert_uint_eq(ti->shape.ndim, 2);
    ck_assert_int_eq(ti->shape.dims[0], 0);
    ck_assert_int_eq(ti->shape.dims[1], tl->shape.dims[1]);
    ck_assert_uint_eq(ti->nbytes, 0);
    rlx_weights_close(w);
    assert_no_temp(o);

    /* stdout on a full device */
    static const char *const full[] = {
        "generate --model '%s' --ids 1,2 -n 3",
        "generate --model '%s' --ids 1,2 -n 3 --json",
        "tokenize --model '%s' --text hello",
    };
    for (size_t i = 0; i < sizeof full / sizeof full[0]; i++) {
        char args[4600];
        snprintf(args, sizeof args, full[i], demo);
        snprintf(cmd, sizeof cmd, "'%s' %s > /dev/full", rlx_run(), args);
        expect_fail1(args, cmd, "rlx-run: standard output: write failed: No space left on device\n");
    }
    /* chat: the demo's files and a ChatML template */
    static const char *const files[] = {"config.json", "generation_config.json", "model.safetensors",
                                        "tokenizer.json"};
    for (size_t i = 0; i < 4; i++) {
        char src[4400], dst[4400];
        snprintf(src, sizeof src, "%s/%s", demo, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", o, files[i]);
        ck_assert_int_eq(symlink(src, dst), 0);
    }
    snprintf(out, sizeof out, "%s/tokenizer_config.json", o);
    f = fopen(out, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"chat_template\":\"{% for message in messages %}{{'<|im_start|>' + message['role'] + "
          "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
          "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}\"}",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "echo hello | '%s' chat --model '%s' --greedy -n 3 > /dev/full", rlx_run(), o);
    expect_fail1("chat", cmd, "rlx-run: standard output: write failed: No space left on device\n");
    tu_rmrf(o);
    free(o);
}
END_TEST

/* "ids":[...] of a --json result */
static char *ids_of(const char *json)
{
    const char *p = strstr(json, "\"ids\":");
    ck_assert_ptr_nonnull(p);
    return strndup(p, strcspn(p, "]") + 1);
}

/* A temp model folder: src's config.json (linked) and its weights with tensor name's bytes
 * copied, checked to be dtype, and changed by edit(t, copy, arg). The folder's path (the
 * caller removes it with tu_rmrf and frees it). */
static char *model_edited(const char *src, const char *name, int dtype,
                          void (*edit)(const rlx_tensor_info *t, void *copy, const void *arg), const void *arg)
{
    char *m = tu_mkdtemp(), from[4400], to[4400];
    snprintf(from, sizeof from, "%s/config.json", src);
    snprintf(to, sizeof to, "%s/config.json", m);
    ck_assert_int_eq(symlink(from, to), 0);
    rlx_weights *w = NULL;
    ck_assert_int_eq(rlx_weights_open(src, &w, NULL), 0);
    rlx_st_writer *sw = rlx_st_writer_new();
    void *copy = NULL;
    for (size_t i = 0; i < rlx_weights_count(w); i++) {
        const rlx_tensor_info *t = rlx_weights_at(w, i);
        const void *data = t->data;
        if (strcmp(t->name, name) == 0) {
            ck_assert_int_eq(t->dtype, dtype);
            copy = malloc(t->nbytes);
            ck_assert_ptr_nonnull(copy);
            memcpy(copy, t->data, t->nbytes);
            edit(t, copy, arg);
            data = copy;
        }
        ck_assert_int_eq(rlx_st_writer_add(sw, t->name, t->dtype, &t->shape, data, NULL), 0);
    }
    ck_assert_msg(copy != NULL, "%s: no tensor %s", src, name);
    snprintf(to, sizeof to, "%s/model.safetensors", m);
    ck_assert_int_eq(rlx_st_writer_save(sw, to, NULL), 0);
    rlx_st_writer_free(sw);
    rlx_weights_close(w);
    free(copy);
    return m;
}

/* every f32 of the tensor NaN */
static void all_nan_f32(const rlx_tensor_info *t, void *copy, const void *arg)
{
    (void)arg;
    for (size_t k = 0; k < t->nbytes / 4; k++) ((float *)copy)[k] = NAN;
}

/* row *(const long *)arg of a bf16 matrix NaN */
static void row_nan_bf16(const rlx_tensor_info *t, void *copy, const void *arg)
{
    const long row = *(const long *)arg;
    for (int64_t c = 0; c < t->shape.dims[1]; c++) ((uint16_t *)copy)[row * t->shape.dims[1] + c] = 0x7fc0;
}

/* --temperature 0 is greedy; NaN weights stop generation naming the step; memory that is
 * not there is refused before it is taken. */
START_TEST(sampling_edges)
{
    char demo[4096], cmd[16384];
    snprintf(demo, sizeof demo, "%s", tu_src("models/tiny-llama-py"));
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2,3 -n 12 --json --greedy", rlx_run(), demo);
    tu_result g = tu_run(cmd, 60);
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2,3 -n 12 --json --temperature 0 --seed 7",
             rlx_run(), demo);
    tu_result t0 = tu_run(cmd, 60);
    ck_assert_int_eq(g.status, 0);
    ck_assert_int_eq(t0.status, 0);
    char *a = ids_of(g.out), *b = ids_of(t0.out);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    tu_result_free(&g);
    tu_result_free(&t0);

    /* the micro model with a NaN final norm */
    char *m = model_edited(tu_src("tests/bad-inputs/good-micro"), "model.norm.weight", RLX_F32, all_nan_f32, NULL);
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 4", rlx_run(), m);
    expect_fail1("NaN weights", cmd,
                 "rlx-run: step 0 (prefill): logits contain NaN at token id 0; generation stopped\n");
    tu_rmrf(m);
    free(m);

    /* memory: the KV cache for a million positions is refused before it is allocated */
    snprintf(cmd, sizeof cmd, "RLX_MEM_LIMIT=64M '%s' generate --model '%s' --ids 1,2 -n 2 --ctx 1000000",
             rlx_run(), demo);
    tu_result r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strncmp(r.err, "rlx-run: cpu (host memory): needs 3.83 GiB (weights 13.3 MiB + KV cache 3.81 GiB + arena ",
                          89) == 0 && strstr(r.err, "), 64.0 MiB available\n"),
                  "%s", r.err);
    tu_result_free(&r);
    /* --verbose: what the model holds and what the device has left, after the summary;
     * 4 layers x (k, v) x 2 kv heads x 64 dims x f32 x 6 rows = 24 KiB of cache */
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 4 --ctx 6 --verbose", rlx_run(), demo);
    r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    const char *mem = strstr(r.err, "\nrlx-run: memory on cpu (host memory): weights 13.3 MiB, KV cache 24.0 KiB, arena ");
    ck_assert_msg(mem && strstr(mem, " GiB free of ") && !strchr(strchr(mem + 1, '\n') + 1, '\n'), "%s", r.err);
    tu_result_free(&r);
    /* and the weights converted from the checkpoint's bf16, before the first is converted */
    snprintf(cmd, sizeof cmd, "RLX_MEM_LIMIT=1M '%s' generate --model '%s' --ids 1,2 -n 2", rlx_run(), demo);
    r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strncmp(r.err, "rlx-run: cpu (host memory): needs 13.3 MiB (weights 13.3 MiB + KV cache 16.0 KiB + arena ",
                          89) == 0 && strstr(r.err, "), 1.0 MiB available\n"),
                  "%s", r.err);
    tu_result_free(&r);
}
END_TEST

/* A million-position KV cache (3.8 GiB) costs neither time nor resident memory until
 * rows are written: it is not cleared eagerly. */
/* A NaN that first shows in the middle of generation: llama-untied-bf16 (its output head
 * apart from the embedding) with the embedding row of its (k+1)-th greedy id made NaN, so
 * the prefill's logits are finite and the step that feeds that id is the first bad one.
 * Chained greedy steps see it in a chunk's last logits, step that chunk again through the
 * host, and stop naming the same step, after the same text, as a step at a time does. */
START_TEST(nan_mid_generation_named_alike)
{
    const char *src = tu_fixture("llama-untied-bf16"), *prompt = "1,5,9,13";
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids %s -n 10 --json", rlx_run(), src, prompt);
    tu_result g = tu_run(cmd, 60);
    ck_assert_msg(g.status == 0, "%s", g.err);
    char *ids = ids_of(g.out);
    long id[10];
    int n = 0;
    for (const char *p = strchr(ids, '[') + 1; n < 10 && *p && *p != ']'; n++) {
        char *e;
        id[n] = strtol(p, &e, 10);
        p = *e == ',' ? e + 1 : e;
    }
    ck_assert_int_eq(n, 10);
    int k = 3; /* the first id from the 4th on that the prompt and the ids before it lack */
    for (int fresh = 0; k < 9 && !fresh; k += !fresh) {
        fresh = id[k] != 1 && id[k] != 5 && id[k] != 9 && id[k] != 13;
        for (int j = 0; j < k && fresh; j++)
            fresh = id[j] != id[k];
    }
    ck_assert_msg(k < 9, "no fresh id among %s", ids);
    char *m = model_edited(src, "model.embed_tokens.weight", RLX_BF16, row_nan_bf16, &id[k]);
    char want[160], first_out[4096] = "";
    snprintf(want, sizeof want, "rlx-run: step %d (decode): logits contain NaN at token id 0; generation stopped\n", k + 1);
    static const char *const how[] = {"RLX_RUN_HOST_STEPS=1 ", ""};
    for (int h = 0; h < 2; h++) {
        snprintf(cmd, sizeof cmd, "%s'%s' generate --model '%s' --ids %s -n 10", how[h], rlx_run(), m, prompt);
        tu_result r = tu_run(cmd, 60);
        ck_assert_msg(r.status == 1 && strstr(r.err, want), "`%s`: exit %d, stderr '%s' lacks '%s'", cmd, r.status,
                      r.err, want);
        if (h == 0)
            snprintf(first_out, sizeof first_out, "%s", r.out);
        else /* the ids up to the bad step, streamed alike */
            ck_assert_str_eq(r.out, first_out);
        tu_result_free(&r);
    }
    ck_assert_msg(strlen(first_out) > 0, "nothing streamed before the bad step");
    tu_rmrf(m);
    free(m);
    free(ids);
    tu_result_free(&g);
}
END_TEST

START_TEST(kv_cache_lazy)
{
    FILE *mi = fopen("/proc/meminfo", "r");
    char line[256];
    long long avail_kb = 0;
    while (mi && fgets(line, sizeof line, mi))
        if (sscanf(line, "MemAvailable: %lld kB", &avail_kb) == 1) break;
    if (mi) fclose(mi);
    if (avail_kb < 5LL << 20) {
        fprintf(stderr, "kv_cache_lazy: skipped: %lld kB available, the check needs 5 GiB\n", avail_kb);
        return;
    }
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 4 --ctx 1000000", rlx_run(),
             tu_src("models/tiny-llama-py"));
    tu_result r = tu_run(cmd, 120);
    ck_assert_msg(r.status == 0, "%s", r.err);
    tu_result_free(&r);
    struct rusage ru;
    ck_assert_int_eq(getrusage(RUSAGE_CHILDREN, &ru), 0);
    ck_assert_msg(ru.ru_maxrss < 1024L * 1024L, "peak RSS %ld kB for a 3.8 GiB cache", ru.ru_maxrss);
}
END_TEST

/* a reader that has gone (`| head -c1` done) is a failed write: exit 1 with one line, not
 * death by SIGPIPE (status 141) */
START_TEST(closed_stdout_is_exit_1)
{
    char cmd[3][16384];
    snprintf(cmd[0], sizeof cmd[0], "'%s' generate --model '%s' --ids 1,2 -n 2 --json", rlx_run(),
             tu_src("tests/bad-inputs/good-micro"));
    snprintf(cmd[1], sizeof cmd[1], "'%s' list --json", tu_tool("tools/rlx-plugins"));
    snprintf(cmd[2], sizeof cmd[2], "'%s' --config '%s' --prefill 4 --decode 2 --threads 1 --dump-graph",
             tu_tool("tools/rlx-bench"), tu_fixture("llama32-tiny/config.json"));
    static const char *want[3] = {"rlx-run: standard output: write failed: Broken pipe\n",
                                  "rlx-plugins: writing standard output failed\n",
                                  "rlx-bench: standard output: write failed: Broken pipe\n"};
    for (int i = 0; i < 3; i++) {
        tu_result r = tu_run_closed_stdout(cmd[i], 120);
        ck_assert_msg(r.status == 1, "exit status %d (want 1)\n$ %s\nstderr: %s", r.status, cmd[i], r.err);
        ck_assert_msg(strstr(r.err, want[i]) != NULL, "stderr lacks '%s'\n$ %s\nstderr: %s", want[i], cmd[i],
                      r.err);
        tu_result_free(&r);
    }
}
END_TEST

/* rlx-bench --config stopped by a signal leaves no temporary checkpoint behind, and dies
 * by that signal (143 through the shell) */
START_TEST(bench_config_signal_cleans_up)
{
    char *dir = tu_mkdtemp();
    char cmd[16384];
    /* it has started once its folder holds the config copy; then TERM */
    snprintf(cmd, sizeof cmd,
             "TMPDIR='%s' '%s' --config '%s' --prefill 64 --decode 64 --reps 10000 --threads 1 --no-reference "
             ">/dev/null 2>&1 & p=$!; i=0; until ls '%s'/rlx-bench-*/config.json >/dev/null 2>&1 || [ $i -ge 600 ]; "
             "do sleep 0.1; i=$((i+1)); done; sleep 0.5; kill -TERM $p; wait $p; echo \"status $?\"; ls -A '%s'",
             dir, tu_tool("tools/rlx-bench"), tu_fixture("llama32-tiny/config.json"), dir, dir);
    tu_result r = tu_run(cmd, 120);
    ck_assert_msg(r.status == 0, "%s\n%s", r.out, r.err);
    ck_assert_msg(strcmp(r.out, "status 143\n") == 0, "want 'status 143' and an empty TMPDIR, got:\n%s", r.out);
    tu_result_free(&r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

int main(void)
{
    tmp = tu_mkdtemp();
    Suite *s = suite_create("bad_inputs_cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, control_good_model_runs);
    tcase_add_test(tc, bad_models);
    tcase_add_test(tc, bad_inputs_files);
    tcase_add_test(tc, special_files);
    tcase_add_test(tc, outputs_complete_or_untouched);
    tcase_add_test(tc, sampling_edges);
    tcase_add_test(tc, kv_cache_lazy);
    tcase_add_test(tc, nan_mid_generation_named_alike);
    tcase_add_test(tc, closed_stdout_is_exit_1);
    tcase_add_test(tc, bench_config_signal_cleans_up);
    suite_add_tcase(s, tc);
    int failed = tu_run_suite(s) != 0;
    tu_rmrf(tmp);
    free(tmp);
    return failed ? 1 : 0;
}
