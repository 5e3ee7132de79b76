/* Registry: loading each plugin kind, lookups, "auto" ranking, and every refusal. */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include "testutil.h"
#include "tp_files.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>
#include <limits.h>

static const char *const good[] = {"tp-block", "tp-backend", "tp-arch", NULL};

static rlx_registry *open_dir(const char *dir)
{
    rlx_registry *r = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_registry_open(dir, &r, &d), RLX_OK);
    ck_assert_ptr_nonnull(r);
    return r;
}

static const rlx_plugin_info *by_file(const rlx_registry *r, const char *file)
{
    for (size_t i = 0; i < rlx_registry_count(r); i++) {
        const rlx_plugin_info *p = rlx_registry_plugin(r, i);
        const char *b = strrchr(p->path, '/');
        if (strcmp(b ? b + 1 : p->path, file) == 0) return p;
    }
    ck_abort_msg("%s is not in the registry", file);
    return NULL;
}

static void assert_good_loaded(const rlx_registry *r)
{
    for (const char *const *g = good; *g; g++) {
        char f[64];
        snprintf(f, sizeof f, "%s.so", *g);
        const rlx_plugin_info *p = by_file(r, f);
        ck_assert_msg(p->loaded, "%s refused: %s", f, p->reason);
        ck_assert_str_eq(p->name, *g);
        ck_assert_ptr_null(p->reason);
    }
}

START_TEST(loads_each_kind)
{
    char *dir = tp_dir(good);
    rlx_registry *r = open_dir(dir);
    ck_assert_uint_eq(rlx_registry_count(r), 3);
    assert_good_loaded(r);

    const rlx_plugin_info *p = by_file(r, "tp-block.so");
    ck_assert_str_eq(p->version, "1.2.3");
    ck_assert_uint_eq(p->abi_major, RLX_ABI_MAJOR);
    ck_assert_uint_eq(p->abi_minor, 0); /* built against the frozen 1.0 headers */
    ck_assert_ptr_nonnull(p->desc);
    ck_assert_uint_eq(p->desc->n_blocks, 2);

    const rlx_block *b = rlx_registry_block(r, "tp.block2");
    ck_assert_ptr_nonnull(b);
    ck_assert_str_eq(b->name, "tp.block2");
    ck_assert_str_eq(b->summary, "test block tp.block2");
    ck_assert_ptr_null(rlx_registry_block(r, "tp.nope"));

    const rlx_arch *a = rlx_registry_arch(r, "tp-arch");
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_eq(rlx_registry_arch_for(r, "tp_model2"), a);
    ck_assert_ptr_null(rlx_registry_arch_for(r, "llama_nope"));
    ck_assert_ptr_null(rlx_registry_arch(r, "tp_model"));

    const rlx_backend *be = rlx_registry_backend(r, "tp-low", NULL);
    ck_assert_ptr_nonnull(be);
    ck_assert_str_eq(be->name, "tp-low");

    const char *const *dirs;
    ck_assert_uint_eq(rlx_registry_search_dirs(r, &dirs), 1);
    ck_assert_str_eq(dirs[0], dir);
    rlx_registry_close(r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(auto_picks_best_available)
{
    char *dir = tp_dir(good);
    rlx_registry *r = open_dir(dir);
    rlx_diag d;
    rlx_diag_init(&d);
    /* tp-high (200) has no device, tp-avail (10) beats tp-low (0) */
    const rlx_backend *be = rlx_registry_backend(r, "auto", &d);
    ck_assert_ptr_nonnull(be);
    ck_assert_str_eq(be->name, "tp-avail");
    ck_assert_ptr_eq(rlx_registry_backend(r, NULL, &d), be);
    ck_assert_int_eq(d.code, 0);

    ck_assert_ptr_null(rlx_registry_backend(r, "tp-high", &d));
    ck_assert_int_eq(d.code, RLX_ERR_DEVICE);
    ck_assert_str_eq(d.msg, "backend 'tp-high' is not available: no tp device");

    rlx_diag_init(&d);
    ck_assert_ptr_null(rlx_registry_backend(r, "nope", &d));
    ck_assert_int_eq(d.code, RLX_ERR_NOT_FOUND);
    ck_assert_msg(strstr(d.msg, "no backend named 'nope'") &&
                      strstr(d.msg, "tp-low, tp-avail, tp-high"),
                  "%s", d.msg);

    const rlx_backend_probe *pr = rlx_registry_probe(r, be);
    ck_assert_ptr_nonnull(pr);
    ck_assert_ptr_eq(rlx_registry_probe(r, be), pr); /* cached */
    ck_assert_int_eq(pr->available, 1);
    ck_assert_uint_eq(pr->n_devices, 1);
    ck_assert_str_eq(pr->devices[0], "tp device 0");
    ck_assert_str_eq(pr->details, "tp details: nothing to see");
    rlx_registry_close(r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(auto_without_backends)
{
    static const char *const only[] = {"tp-block", NULL};
    char *dir = tp_dir(only);
    rlx_registry *r = open_dir(dir);
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_ptr_null(rlx_registry_backend(r, "auto", &d));
    ck_assert_int_eq(d.code, RLX_ERR_NOT_FOUND);
    ck_assert_str_eq(d.msg, "no available backend among 0 loaded (see rlx-plugins list)");
    rlx_registry_close(r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* One bad plugin next to the good ones: it is refused with this reason, they load. */
typedef struct refusal {
    const char *plugin; /* built test plugin, or NULL for a hand-made file */
    const char *file;
    const char *content; /* for hand-made files */
    size_t content_len;
    const char *reason; /* exact; "{dir}" stands for the temp folder */
    int prefix_only;    /* reason is a prefix (dlerror text follows) */
} refusal;

static const refusal refusals[] = {
    {"tp-bad-abi", "tp-bad-abi.so", NULL, 0, "ABI major mismatch: plugin 2.0, host 1.3", 0},
    {"tp-new-minor", "tp-new-minor.so", NULL, 0,
     "ABI minor too new: plugin 1.4 needs a host of that ABI, host is 1.3", 0},
    {"tp-no-entry", "tp-no-entry.so", NULL, 0, "no entry symbol rlx_plugin_init", 0},
    {"tp-small-desc", "tp-small-desc.so", NULL, 0,
     "struct too small: rlx_plugin_desc is {off_archs} bytes, ABI 1.3 needs {size_desc}", 0},
    {"tp-small-block", "tp-small-block.so", NULL, 0,
     "struct too small: rlx_block #0 is {off_emit} bytes, ABI 1.3 needs {size_block}", 0},
    {"tp-null", "tp-null.so", NULL, 0, "rlx_plugin_init returned NULL", 0},
    {"tp-no-fn", "tp-no-fn.so", NULL, 0, "backend 'tp-no-fn' has no execute function", 0},
    {"tp-dup-name", "tp-dup-name.so", NULL, 0,
     "duplicate plugin name 'tp-block' (already loaded from {dir}/tp-block.so)", 0},
    {"tp-dup-block", "tp-dup-block.so", NULL, 0,
     "duplicate block name 'tp.block' (already provided by {dir}/tp-block.so)", 0},
    {"tp-dup-backend", "tp-dup-backend.so", NULL, 0,
     "duplicate backend name 'tp-avail' (already provided by {dir}/tp-backend.so)", 0},
    {"tp-dup-arch", "tp-dup-arch.so", NULL, 0,
     "duplicate arch name 'tp-arch' (already provided by {dir}/tp-arch.so)", 0},
    {"tp-dup-type", "tp-dup-type.so", NULL, 0,
     "arch 'tp-unique-arch4': model_type \"tp_model2\" is already handled by arch 'tp-arch' "
     "({dir}/tp-arch.so)", 0},
    {NULL, "junk.so", "this is text, not a plugin\n", 27, "not an ELF file", 0},
    {NULL, "short.so", "\x7f" "EL", 3, "not an ELF file", 0},
    {NULL, "broken.so", "\x7f" "ELF\x02\x01\x01\0garbage", 16, "dlopen failed: {dir}/broken.so: ", 1},
};

/* Replaces {dir} and the struct-size placeholders of a reason template. */
static void expand(const char *tmpl, const char *dir, char *out, size_t len)
{
    char num[4][32];
    snprintf(num[0], 32, "%zu", offsetof(rlx_plugin_desc, archs));
    snprintf(num[1], 32, "%zu", RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs));
    snprintf(num[2], 32, "%zu", offsetof(rlx_block, emit));
    snprintf(num[3], 32, "%zu", RLX_STRUCT_SIZE(rlx_block, emit));
    const char *keys[5] = {"{dir}", "{off_archs}", "{size_desc}", "{off_emit}", "{size_block}"};
    const char *vals[5] = {dir, num[0], num[1], num[2], num[3]};
    size_t o = 0;
    while (*tmpl && o + 1 < len) {
        int hit = 0;
        for (int k = 0; k < 5 && !hit; k++) {
            size_t kl = strlen(keys[k]);
            if (strncmp(tmpl, keys[k], kl) == 0) {
                o += (size_t)snprintf(out + o, len - o, "%s", vals[k]);
                tmpl += kl;
                hit = 1;
            }
        }
        if (!hit) out[o++] = *tmpl++;
    }
    out[o < len ? o : len - 1] = 0;
}

START_TEST(each_refusal)
{
    const refusal *c = &refusals[_i];
    char *dir = tp_dir(good);
    if (c->plugin) tp_copy(c->plugin, dir, c->file);
    else tp_write(dir, c->file, c->content, c->content_len);
    rlx_registry *r = open_dir(dir);
    ck_assert_uint_eq(rlx_registry_count(r), 4);
    assert_good_loaded(r);
    const rlx_plugin_info *p = by_file(r, c->file);
    ck_assert_int_eq(p->loaded, 0);
    ck_assert_ptr_null(p->desc);
    ck_assert_str_eq(p->version, "");
    char stem[64];
    snprintf(stem, sizeof stem, "%.*s", (int)(strlen(c->file) - 3), c->file);
    ck_assert_str_eq(p->name, stem);
    ck_assert_ptr_nonnull(p->reason);
    ck_assert_ptr_null(strchr(p->reason, '\n'));
    char want[1024];
    expand(c->reason, dir, want, sizeof want);
    if (c->prefix_only)
        ck_assert_msg(strncmp(p->reason, want, strlen(want)) == 0 && strlen(p->reason) > strlen(want),
                      "reason '%s' does not start with '%s'", p->reason, want);
    else
        ck_assert_str_eq(p->reason, want);
    /* the refused plugin's names are not served */
    ck_assert_ptr_nonnull(rlx_registry_block(r, "tp.block"));
    ck_assert_ptr_null(rlx_registry_block(r, "tp.bad_abi"));
    ck_assert_ptr_null(rlx_registry_block(r, "tp.small"));
    rlx_registry_close(r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(all_bad_together)
{
    char *dir = tp_dir(good);
    size_t n = 3;
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++, n++) {
        const refusal *c = &refusals[i];
        if (c->plugin) tp_copy(c->plugin, dir, c->file);
        else tp_write(dir, c->file, c->content, c->content_len);
    }
    tp_write(dir, "README.txt", "not a candidate", 15); /* only *.so are candidates */
    rlx_registry *r = open_dir(dir);
    ck_assert_uint_eq(rlx_registry_count(r), n);
    assert_good_loaded(r);
    size_t loaded = 0;
    for (size_t i = 0; i < rlx_registry_count(r); i++) loaded += rlx_registry_plugin(r, i)->loaded;
    ck_assert_uint_eq(loaded, 3);
    rlx_registry_close(r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* The registry's reason for file (by name) in a fresh registry over dir. */
static void expect_reason(const char *dir, const char *file, const char *want)
{
    rlx_registry *r = open_dir(dir);
    const rlx_plugin_info *p = by_file(r, file);
    if (want) {
        ck_assert_int_eq(p->loaded, 0);
        ck_assert_str_eq(p->reason, want);
    } else {
        ck_assert_msg(p->loaded, "%s refused: %s", file, p->reason);
    }
    rlx_registry_close(r);
}

START_TEST(unsafe_locations)
{
    char *dir = tp_dir(good);
    char real[4096], want[9000], f[4200];
    ck_assert_ptr_nonnull(realpath(dir, real));
    /* world-writable folder without the sticky bit: everything in it is refused */
    ck_assert_int_eq(chmod(dir, 0777), 0);
    rlx_registry *r = open_dir(dir);
    ck_assert_uint_eq(rlx_registry_count(r), 3);
    snprintf(want, sizeof want,
             "unsafe location: folder %s is world-writable without the sticky bit (mode 0777)",
             real);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_int_eq(rlx_registry_plugin(r, i)->loaded, 0);
        ck_assert_str_eq(rlx_registry_plugin(r, i)->reason, want);
    }
    rlx_registry_close(r);
    /* RLX_PLUGIN_ALLOW_UNSAFE=1 overrides */
    ck_assert_int_eq(setenv("RLX_PLUGIN_ALLOW_UNSAFE", "1", 1), 0);
    expect_reason(dir, "tp-arch.so", NULL);
    ck_assert_int_eq(unsetenv("RLX_PLUGIN_ALLOW_UNSAFE"), 0);
    /* with the sticky bit (as /tmp) it is fine */
    ck_assert_int_eq(chmod(dir, 01777), 0);
    r = open_dir(dir);
    assert_good_loaded(r);
    rlx_registry_close(r);
    /* a group-writable folder */
    ck_assert_int_eq(chmod(dir, 0770), 0);
    snprintf(want, sizeof want,
             "unsafe location: folder %s is group-writable without the sticky bit (mode 0770)",
             real);
    expect_reason(dir, "tp-block.so", want);
    /* a world-writable file, a group-writable file */
    ck_assert_int_eq(chmod(dir, 0700), 0);
    snprintf(f, sizeof f, "%s/tp-arch.so", dir);
    ck_assert_int_eq(chmod(f, 0646), 0);
    snprintf(want, sizeof want, "unsafe location: file %s/tp-arch.so is world-writable (mode 0646)",
             real);
    expect_reason(dir, "tp-arch.so", want);
    ck_assert_int_eq(chmod(f, 0664), 0);
    snprintf(want, sizeof want, "unsafe location: file %s/tp-arch.so is group-writable (mode 0664)",
             real);
    expect_reason(dir, "tp-arch.so", want);
    expect_reason(dir, "tp-block.so", NULL);
    ck_assert_int_eq(chmod(f, 0644), 0);
    /* a symlink in the safe folder to a plugin in a world-writable one: the target counts */
    char *open_dir_ = tp_dir(good), oreal[4096];
    ck_assert_ptr_nonnull(realpath(open_dir_, oreal));
    ck_assert_int_eq(chmod(open_dir_, 0777), 0);
    char link[4200], target[4200];
    snprintf(link, sizeof link, "%s/tp-linked.so", dir);
    snprintf(target, sizeof target, "%s/tp-block.so", open_dir_);
    ck_assert_int_eq(symlink(target, link), 0);
    snprintf(want, sizeof want,
             "unsafe location: folder %s is world-writable without the sticky bit (mode 0777)",
             oreal);
    expect_reason(dir, "tp-linked.so", want);
    unlink(link);
    /* owned by another user that is not root */
    if (geteuid() == 0) {
        ck_assert_int_eq(chown(f, 12345, 12345), 0);
        snprintf(want, sizeof want,
                 "unsafe location: file %s/tp-arch.so is owned by uid 12345, not root or uid 0",
                 real);
        expect_reason(dir, "tp-arch.so", want);
        ck_assert_int_eq(chown(f, 0, 0), 0);
        ck_assert_int_eq(chown(dir, 12345, 12345), 0);
        snprintf(want, sizeof want,
                 "unsafe location: folder %s is owned by uid 12345, not root or uid 0", real);
        expect_reason(dir, "tp-arch.so", want);
        ck_assert_int_eq(chown(dir, 0, 0), 0);
    } else {
        fprintf(stderr, "unsafe_locations: owner case skipped: needs root to chown\n");
    }
    tu_rmrf(open_dir_);
    free(open_dir_);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Hostile plugins next to the good ones, checked in a child first: each is refused with
 * its reason, the good ones load, and the host survives. */
static const char *const hostile[][2] = {
    {"tp-abort", "isolation: killed by signal 6 (Aborted) in rlx_plugin_init"},
    {"tp-ctor", "rlx_plugin_init returned NULL"},
    {"tp-exit", "isolation: the process exited with status 0 in rlx_plugin_init"},
    {"tp-loop", "isolation: no answer within 5000 ms (hung in rlx_plugin_init)"},
    {"tp-lying", "descriptor 'tp-lying' claims 2 blocks but its blocks array is not readable"},
};

static int marker_exists(const char *m)
{
    struct stat st;
    return stat(m, &st) == 0;
}

START_TEST(isolation)
{
    char *dir = tp_dir(good);
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++)
        tp_copy(hostile[i][0], dir, NULL);
    char marker[4200], pid[32];
    snprintf(marker, sizeof marker, "%s/marker", dir);
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    ck_assert_int_eq(setenv("TP_MARKER", marker, 1), 0);
    ck_assert_int_eq(setenv("TP_HOST_PID", pid, 1), 0);
    ck_assert_int_eq(setenv("RLX_PLUGIN_ISOLATE", "1", 1), 0);
    ck_assert_int_eq(setenv("RLX_PLUGIN_TIMEOUT_MS", "5000", 1) /* ASan builds exit slowly */, 0);
    rlx_registry *r = open_dir(dir);
    ck_assert_uint_eq(rlx_registry_count(r), 8);
    assert_good_loaded(r);
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        char f[64];
        snprintf(f, sizeof f, "%s.so", hostile[i][0]);
        const rlx_plugin_info *p = by_file(r, f);
        ck_assert_int_eq(p->loaded, 0);
        ck_assert_str_eq(p->reason, hostile[i][1]);
    }
    /* a missing backend's error names the refused files and why (the time limit among them) */
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_ptr_null(rlx_registry_backend(r, "nope", &d));
    ck_assert_msg(strstr(d.msg, "; refused tp-abort.so: isolation: killed by signal 6 (Aborted) in rlx_plugin_init; ") &&
                      strstr(d.msg, "; tp-loop.so: isolation: no answer within 5000 ms (hung in rlx_plugin_init)") &&
                      strchr(d.msg, '\n') == NULL,
                  "%s", d.msg);
    rlx_registry_close(r);
    /* the refused plugin's constructor never ran in this process */
    ck_assert_msg(!marker_exists(marker), "tp-ctor's constructor ran in the host");
    ck_assert_int_eq(unsetenv("RLX_PLUGIN_ISOLATE"), 0);
    ck_assert_int_eq(unsetenv("RLX_PLUGIN_TIMEOUT_MS"), 0);

    /* without isolation: the lying count is still refused (not a crash), and the
     * constructor does run here (which is what isolation prevents) */
    char *plain = tp_dir(good);
    tp_copy("tp-lying", plain, NULL);
    tp_copy("tp-ctor", plain, NULL);
    expect_reason(plain, "tp-lying.so", hostile[4][1]);
    ck_assert(marker_exists(marker));
    unsetenv("TP_MARKER");
    unsetenv("TP_HOST_PID");
    tu_rmrf(plain);
    free(plain);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(env_search_path)
{
    static const char *const a_names[] = {"tp-block", NULL};
    static const char *const b_names[] = {"tp-block", "tp-arch", NULL};
    char *a = tp_dir(a_names), *b = tp_dir(b_names);
    char env[9000];
    /* empty elements and a missing folder are skipped; a folder listed twice is searched once */
    snprintf(env, sizeof env, "%s::%s/../%s:%s/missing:%s", a, a, strrchr(a, '/') + 1, a, b);
    /* the default folders: this build's plugin folders, as this test runs uninstalled */
    ck_assert_int_eq(unsetenv("RLX_PLUGIN_PATH"), 0);
    rlx_registry *r = open_dir(NULL);
    const char *const *dirs;
    size_t n_def = rlx_registry_search_dirs(r, &dirs);
    ck_assert_uint_ge(n_def, 1);
    char cpu_dir[4200];
    snprintf(cpu_dir, sizeof cpu_dir, "%s", tu_build("plugins/backends/cpu/.libs"));
    ck_assert_str_eq(dirs[0], cpu_dir);
    char **defaults = calloc(n_def, sizeof *defaults);
    for (size_t i = 0; i < n_def; i++) defaults[i] = strdup(dirs[i]);
    rlx_registry_close(r);
    ck_assert_str_eq(rlx_default_plugin_dir(), RLX_PLUGIN_DIR); /* the installed folder */

    ck_assert_int_eq(setenv("RLX_PLUGIN_PATH", env, 1), 0);
    r = open_dir(NULL);
    size_t nd = rlx_registry_search_dirs(r, &dirs);
    ck_assert_uint_eq(nd, 3 + n_def);
    ck_assert_str_eq(dirs[0], a);
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/missing", a);
    ck_assert_str_eq(dirs[1], missing);
    ck_assert_str_eq(dirs[2], b);
    for (size_t i = 0; i < n_def; i++) {
        ck_assert_str_eq(dirs[3 + i], defaults[i]);
        free(defaults[i]);
    }
    free(defaults);

    /* the first folder wins: b's copy of tp-block is a duplicate */
    size_t n_tp = 0;
    for (size_t i = 0; i < rlx_registry_count(r); i++) {
        const rlx_plugin_info *p = rlx_registry_plugin(r, i);
        if (strncmp(p->name, "tp-", 3) != 0) continue;
        n_tp++;
        char pa[4200], pb[4200];
        snprintf(pa, sizeof pa, "%s/tp-block.so", a);
        snprintf(pb, sizeof pb, "%s/tp-block.so", b);
        if (strcmp(p->path, pa) == 0) ck_assert_int_eq(p->loaded, 1);
        if (strcmp(p->path, pb) == 0) {
            char want[9000];
            snprintf(want, sizeof want, "duplicate plugin name 'tp-block' (already loaded from %s)",
                     pa);
            ck_assert_int_eq(p->loaded, 0);
            ck_assert_str_eq(p->reason, want);
        }
    }
    ck_assert_uint_eq(n_tp, 3);
    ck_assert_ptr_nonnull(rlx_registry_arch(r, "tp-arch"));
    rlx_registry_close(r);

    /* an entry may also name one file */
    snprintf(env, sizeof env, "%s/tp-arch.so", b);
    r = open_dir(env);
    ck_assert_uint_eq(rlx_registry_count(r), 1);
    ck_assert_int_eq(rlx_registry_plugin(r, 0)->loaded, 1);
    rlx_registry_close(r);
    rlx_registry_close(NULL);
    tu_rmrf(a);
    tu_rmrf(b);
    free(a);
    free(b);
}
END_TEST

START_TEST(host_table)
{
    const rlx_host_api *h = rlx_host_api_get();
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_eq(h->struct_size, RLX_STRUCT_SIZE(rlx_host_api, flow_input_fill));
    ck_assert_uint_eq(h->abi_major, RLX_ABI_MAJOR);
    ck_assert_uint_eq(h->abi_minor, RLX_ABI_MINOR);
    ck_assert_ptr_nonnull(h->log);
    ck_assert_ptr_nonnull(h->diag_set);
    ck_assert_ptr_nonnull(h->topology);
    ck_assert_ptr_nonnull(h->bind_thread);
    rlx_diag d;
    rlx_diag_init(&d);
    h->diag_set(&d, RLX_ERR_INVALID, "tensor %s: bad\nshape", "x");
    h->diag_set(&d, RLX_ERR_IO, "a later error");
    ck_assert_int_eq(d.code, RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "tensor x: bad shape");
    h->diag_set(NULL, RLX_ERR_IO, "ignored");
    h->log(RLX_LOG_DEBUG, "test", "not shown at the default level %d", 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("registry");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, loads_each_kind);
    tcase_add_test(tc, auto_picks_best_available);
    tcase_add_test(tc, auto_without_backends);
    tcase_add_loop_test(tc, each_refusal, 0, (int)(sizeof refusals / sizeof refusals[0]));
    tcase_add_test(tc, all_bad_together);
    tcase_add_test(tc, unsafe_locations);
    tcase_add_test(tc, isolation);
    tcase_add_test(tc, env_search_path);
    tcase_add_test(tc, host_table);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
