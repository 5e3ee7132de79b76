/* rlx-plugins: what is installed, what loaded, what was refused and why.
 *   rlx-plugins list [--json] [--isolate]
 *   rlx-plugins info NAME [--json] [--isolate]
 * Exit: 0 ok, 1 unknown NAME (or no registry), 2 bad usage. The JSON form is the
 * contract of CLI.md; the tables are for people. */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fputs("usage: rlx-plugins list [--json] [--isolate]\n"
          "       rlx-plugins info NAME [--json] [--isolate]\n"
          "NAME: a plugin, or a block, backend or arch it provides.\n"
          "--isolate: check each plugin in a child process first (as RLX_PLUGIN_ISOLATE=1).\n"
          "Search path: $RLX_PLUGIN_PATH (colon-separated), then the installed folder.\n",
          f);
}

static void abi_str(const rlx_plugin_info *p, char *buf, size_t len)
{
    if (p->abi_major == 0 && p->abi_minor == 0) buf[0] = 0;
    else snprintf(buf, len, "%u.%u", p->abi_major, p->abi_minor);
}

static json_t *str_array(const char *const *list)
{
    json_t *a = json_array();
    for (; list && *list; list++) json_array_append_new(a, json_string(*list));
    return a;
}

/* One element of list's "plugins"; with_details adds each backend's probe details. */
static json_t *plugin_json(const rlx_registry *r, const rlx_plugin_info *p, int with_details)
{
    char abi[32];
    abi_str(p, abi, sizeof abi);
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(p->name));
    json_object_set_new(o, "path", json_string(p->path));
    json_object_set_new(o, "version", json_string(p->version));
    json_object_set_new(o, "abi", json_string(abi));
    json_object_set_new(o, "status", json_string(p->loaded ? "loaded" : "refused"));
    if (!p->loaded) json_object_set_new(o, "reason", json_string(p->reason ? p->reason : ""));
    json_t *blocks = json_array(), *backends = json_array(), *archs = json_array();
    const rlx_plugin_desc *d = p->loaded ? p->desc : NULL;
    for (uint32_t i = 0; d && i < d->n_blocks; i++) {
        const rlx_block *b = d->blocks[i];
        json_array_append_new(blocks, json_pack("{s:s, s:s}", "name", b->name, "summary",
                                                b->summary ? b->summary : ""));
    }
    for (uint32_t i = 0; d && i < d->n_backends; i++) {
        const rlx_backend *b = d->backends[i];
        const rlx_backend_probe *pr = rlx_registry_probe(r, b);
        json_t *devs = json_array();
        for (uint32_t k = 0; pr && k < pr->n_devices; k++)
            json_array_append_new(devs, json_string(pr->devices[k]));
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(b->name));
        json_object_set_new(e, "available", json_boolean(pr && pr->available));
        json_object_set_new(e, "reason", json_string(pr && !pr->available ? pr->reason : ""));
        json_object_set_new(e, "devices", devs);
        json_object_set_new(e, "ops", str_array(b->ops));
        json_object_set_new(e, "dtypes", str_array(b->dtypes));
        if (with_details) json_object_set_new(e, "details", json_string(pr ? pr->details : ""));
        json_array_append_new(backends, e);
    }
    for (uint32_t i = 0; d && i < d->n_archs; i++) {
        const rlx_arch *a = d->archs[i];
        json_array_append_new(archs, json_pack("{s:s, s:o}", "name", a->name, "model_types",
                                               str_array(a->model_types)));
    }
    json_object_set_new(o, "blocks", blocks);
    json_object_set_new(o, "backends", backends);
    json_object_set_new(o, "archs", archs);
    return o;
}

static int print_json(json_t *o)
{
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(o);
    if (!s) {
        fputs("rlx-plugins: out of memory\n", stderr);
        return 1;
    }
    puts(s);
    free(s);
    return 0;
}

/* Output that carries results: a failed write (a full disk, a closed pipe) is exit 1. */
static int flush_out(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "rlx-plugins: writing standard output failed\n");
        return 1;
    }
    return rc;
}

static int list_json(const rlx_registry *r)
{
    json_t *o = json_object(), *sp = json_array(), *pl = json_array();
    char abi[32];
    snprintf(abi, sizeof abi, "%d.%d", RLX_ABI_MAJOR, RLX_ABI_MINOR);
    const char *const *dirs;
    size_t nd = rlx_registry_search_dirs(r, &dirs);
    for (size_t i = 0; i < nd; i++) json_array_append_new(sp, json_string(dirs[i]));
    for (size_t i = 0; i < rlx_registry_count(r); i++)
        json_array_append_new(pl, plugin_json(r, rlx_registry_plugin(r, i), 0));
    json_object_set_new(o, "abi", json_string(abi));
    json_object_set_new(o, "search_path", sp);
    json_object_set_new(o, "plugins", pl);
    return print_json(o);
}

static const char *plural(size_t n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

/* "13 blocks", "1 backend, 2 blocks": only the kinds a plugin has */
static void provides_str(const rlx_plugin_desc *d, char *buf, size_t len)
{
    size_t o = 0;
    const uint32_t n[3] = {d->n_blocks, d->n_backends, d->n_archs};
    static const char *const one[3] = {"block", "backend", "arch"};
    static const char *const many[3] = {"blocks", "backends", "archs"};
    buf[0] = 0;
    for (int k = 0; k < 3; k++) {
        if (!n[k] || o >= len) continue;
        int w = snprintf(buf + o, len - o, "%s%u %s", o ? ", " : "", n[k], n[k] == 1 ? one[k] : many[k]);
        if (w > 0) o += (size_t)w;
    }
    if (!buf[0]) snprintf(buf, len, "nothing");
}

/* Multi-line text (probe details) indented under a heading. */
static void print_indented(const char *text, const char *indent)
{
    printf("%s", indent);
    for (const char *c = text; *c; c++) {
        putchar(*c);
        if (*c == '\n' && c[1]) printf("%s", indent);
    }
    if (text[0] && text[strlen(text) - 1] != '\n') putchar('\n');
}

static int list_table(const rlx_registry *r)
{
    const char *const *dirs;
    size_t nd = rlx_registry_search_dirs(r, &dirs);
    printf("rlx plugin ABI %d.%d; search path:", RLX_ABI_MAJOR, RLX_ABI_MINOR);
    for (size_t i = 0; i < nd; i++) printf("%s%s", i ? ":" : " ", dirs[i]);
    printf("\n\n%-22s %-9s %-6s %-8s %-22s %s\n", "NAME", "VERSION", "ABI", "STATUS", "PROVIDES",
           "PATH");
    size_t loaded = 0, refused = 0, nb = 0, nbe = 0, na = 0;
    for (size_t i = 0; i < rlx_registry_count(r); i++) {
        const rlx_plugin_info *p = rlx_registry_plugin(r, i);
        char abi[32], provides[64] = "-";
        abi_str(p, abi, sizeof abi);
        if (p->loaded) {
            const rlx_plugin_desc *d = p->desc;
            provides_str(d, provides, sizeof provides);
            nb += d->n_blocks;
            nbe += d->n_backends;
            na += d->n_archs;
            loaded++;
        } else {
            refused++;
        }
        printf("%-22s %-9s %-6s %-8s %-22s %s\n", p->name, p->version[0] ? p->version : "-",
               abi[0] ? abi : "-", p->loaded ? "loaded" : "refused", provides, p->path);
        if (!p->loaded) printf("    refused: %s\n", p->reason ? p->reason : "");
        for (uint32_t k = 0; p->loaded && k < p->desc->n_backends; k++) {
            const rlx_backend *b = p->desc->backends[k];
            const rlx_backend_probe *pr = rlx_registry_probe(r, b);
            printf("    backend %-12s priority %-4d %s%s\n", b->name, b->priority,
                   pr && pr->available ? "available" : "not available: ",
                   pr && pr->available ? "" : (pr ? pr->reason : ""));
        }
    }
    printf("\n%zu %s loaded (%zu %s, %zu %s, %zu %s), %zu refused\n", loaded,
           plural(loaded, "plugin", "plugins"), nb, plural(nb, "block", "blocks"), nbe,
           plural(nbe, "backend", "backends"), na, plural(na, "arch", "archs"), refused);
    return 0;
}

static void print_names(const char *title, const char *const *list)
{
    printf("      %s:", title);
    if (!list || !*list) printf(" -");
    for (; list && *list; list++) printf(" %s", *list);
    printf("\n");
}

static int info_table(const rlx_registry *r, const rlx_plugin_info *p)
{
    char abi[32];
    abi_str(p, abi, sizeof abi);
    printf("name:     %s\npath:     %s\nversion:  %s\nabi:      %s\nstatus:   %s\n", p->name,
           p->path, p->version[0] ? p->version : "-", abi[0] ? abi : "-",
           p->loaded ? "loaded" : "refused");
    if (!p->loaded) {
        printf("reason:   %s\n", p->reason ? p->reason : "");
        return 0;
    }
    const rlx_plugin_desc *d = p->desc;
    if (d->summary && *d->summary) printf("summary:  %s\n", d->summary);
    printf("blocks (%u):\n", d->n_blocks);
    for (uint32_t i = 0; i < d->n_blocks; i++) {
        const rlx_block *b = d->blocks[i];
        printf("  %-28s %s\n", b->name, b->summary ? b->summary : "");
        if (b->params && *b->params) printf("  %-28s params: %s\n", "", b->params);
    }
    printf("backends (%u):\n", d->n_backends);
    for (uint32_t i = 0; i < d->n_backends; i++) {
        const rlx_backend *b = d->backends[i];
        const rlx_backend_probe *pr = rlx_registry_probe(r, b);
        printf("  %s (priority %d): %s%s\n", b->name, b->priority,
               pr && pr->available ? "available" : "not available: ",
               pr && pr->available ? "" : (pr ? pr->reason : ""));
        if (b->summary && *b->summary) printf("      summary: %s\n", b->summary);
        printf("      devices:");
        if (!pr || pr->n_devices == 0) printf(" -");
        for (uint32_t k = 0; pr && k < pr->n_devices; k++)
            printf("%s %s", k ? "," : "", pr->devices[k]);
        printf("\n");
        print_names("dtypes", b->dtypes);
        print_names("ops", b->ops);
        if (pr && pr->details[0]) {
            printf("      details:\n");
            print_indented(pr->details, "        ");
        }
    }
    printf("archs (%u):\n", d->n_archs);
    for (uint32_t i = 0; i < d->n_archs; i++) {
        const rlx_arch *a = d->archs[i];
        printf("  %s\n", a->name);
        print_names("model_types", a->model_types);
        printf("      profiles: %s%s%s\n", a->default_profile ? a->default_profile : "-",
               a->decode_profile ? ", " : "", a->decode_profile ? a->decode_profile : "");
    }
    return 0;
}

/* NAME: a loaded plugin, then a backend, arch or block it provides, then a refused
 * plugin (by file stem or file name). */
static const rlx_plugin_info *find(const rlx_registry *r, const char *name)
{
    size_t n = rlx_registry_count(r);
    for (size_t i = 0; i < n; i++) {
        const rlx_plugin_info *p = rlx_registry_plugin(r, i);
        if (p->loaded && strcmp(p->name, name) == 0) return p;
    }
    for (int kind = 0; kind < 3; kind++)
        for (size_t i = 0; i < n; i++) {
            const rlx_plugin_info *p = rlx_registry_plugin(r, i);
            if (!p->loaded) continue;
            const rlx_plugin_desc *d = p->desc;
            if (kind == 0)
                for (uint32_t k = 0; k < d->n_backends; k++)
                    if (strcmp(d->backends[k]->name, name) == 0) return p;
            if (kind == 1)
                for (uint32_t k = 0; k < d->n_archs; k++)
                    if (strcmp(d->archs[k]->name, name) == 0) return p;
            if (kind == 2)
                for (uint32_t k = 0; k < d->n_blocks; k++)
                    if (strcmp(d->blocks[k]->name, name) == 0) return p;
        }
    for (size_t i = 0; i < n; i++) {
        const rlx_plugin_info *p = rlx_registry_plugin(r, i);
        const char *base = strrchr(p->path, '/');
        base = base ? base + 1 : p->path;
        if (!p->loaded && (strcmp(p->name, name) == 0 || strcmp(base, name) == 0)) return p;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN); /* a reader gone is a failed write (exit 1), not a signal */
    const char *cmd = NULL, *name = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) json = 1;
        else if (strcmp(a, "--isolate") == 0) setenv("RLX_PLUGIN_ISOLATE", "1", 1);
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "rlx-plugins: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!cmd) cmd = a;
        else if (!name) name = a;
        else {
            fprintf(stderr, "rlx-plugins: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    int is_list = cmd && strcmp(cmd, "list") == 0, is_info = cmd && strcmp(cmd, "info") == 0;
    if (!is_list && !is_info) {
        if (cmd) fprintf(stderr, "rlx-plugins: unknown command '%s'\n", cmd);
        else fprintf(stderr, "rlx-plugins: missing command\n");
        usage(stderr);
        return 2;
    }
    if ((is_list && name) || (is_info && !name)) {
        fprintf(stderr, is_list ? "rlx-plugins: list takes no NAME\n"
                                : "rlx-plugins: info needs a NAME\n");
        usage(stderr);
        return 2;
    }

    rlx_registry *r = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    if (rlx_registry_open(NULL, &r, &d) != RLX_OK) {
        fprintf(stderr, "rlx-plugins: %s\n", d.msg);
        return 1;
    }
    int rc;
    if (is_list) {
        rc = json ? list_json(r) : list_table(r);
    } else {
        const rlx_plugin_info *p = find(r, name);
        if (!p) {
            fprintf(stderr,
                    "rlx-plugins: no plugin, block, backend or arch named '%s' "
                    "(see rlx-plugins list)\n",
                    name);
            rc = 1;
        } else {
            rc = json ? print_json(plugin_json(r, p, 1)) : info_table(r, p);
        }
    }
    rlx_registry_close(r);
    return flush_out(rc);
}
