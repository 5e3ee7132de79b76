/* Plugin registry: discovery, loading, validation and lookup.
 *
 * Every candidate *.so in the search path is either loaded or refused with a one-line
 * reason; a refusal never stops the others. Everything a plugin hands over is checked
 * here once (struct sizes, names, required functions), so the rest of the host and the
 * tools can use any minor-0 field of a loaded plugin's structs without re-checking.
 * A plugin whose entry point ran is never unloaded, not even by rlx_registry_close:
 * GPU runtimes (CUDA, HIP) and C++ libraries crash or leak when unloaded, and a value
 * the plugin handed out may outlive the registry. */
#define _GNU_SOURCE
#include "base/internal.h"
#include "plugin/isolate.h"
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_ITEMS 4096u /* blocks, backends or archs in one plugin: more is a corrupt descriptor */

typedef struct plugin {
    rlx_plugin_info info; /* points into the strings below */
    char *path, *name, *version, *reason;
    void *handle;
    int pending; /* passed the file checks; not yet opened */
} plugin;

typedef struct backend_slot {
    const rlx_backend *be;
    int probed;
    rlx_backend_probe probe;
} backend_slot;

struct rlx_registry {
    plugin *plugins;
    size_t n_plugins, cap_plugins;
    char **dirs;
    char **dir_keys; /* each folder's real path (its own when it has none): duplicates */
    size_t n_dirs;
    char **seen; /* real paths of files already considered */
    size_t n_seen;
    char **safe; /* folders checked safe up to "/" while opening (unsafe_reason) */
    size_t n_safe;
    backend_slot *backends; /* every backend of every loaded plugin, load order */
    size_t n_backends;
    pthread_mutex_t probe_lock;
};

RLX_API const char *rlx_default_plugin_dir(void) { return RLX_PLUGIN_DIR; }

/* ---------------------------------------------------------------- search path */

static int add_dir(rlx_registry *r, const char *dir)
{
    char real[PATH_MAX];
    const char *key = realpath(dir, real) ? real : dir;
    for (size_t i = 0; i < r->n_dirs; i++)
        if (strcmp(r->dir_keys[i], key) == 0) return 0; /* same folder listed twice */
    char **nd = realloc(r->dirs, (r->n_dirs + 1) * sizeof *nd);
    if (!nd) return RLX_ERR_NOMEM;
    r->dirs = nd;
    char **nk = realloc(r->dir_keys, (r->n_dirs + 1) * sizeof *nk);
    if (!nk) return RLX_ERR_NOMEM;
    r->dir_keys = nk;
    if (!(r->dirs[r->n_dirs] = strdup(dir))) return RLX_ERR_NOMEM;
    if (!(r->dir_keys[r->n_dirs] = strdup(key))) {
        free(r->dirs[r->n_dirs]);
        return RLX_ERR_NOMEM;
    }
    r->n_dirs++;
    return 0;
}

static int add_path_list(rlx_registry *r, const char *list)
{
    const char *p = list;
    while (p && *p) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0 && n < PATH_MAX) {
            char dir[PATH_MAX];
            memcpy(dir, p, n);
            dir[n] = 0;
            if (add_dir(r, dir)) return RLX_ERR_NOMEM;
        }
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* librlx loaded from its own build tree (libtool's wrappers do that for uninstalled
 * programs): the plugins are that build's, not an installed folder's, which may not
 * exist yet or hold another version. */
int rlx__running_uninstalled(void)
{
#if defined(RLX_BUILD_LIBDIR) && defined(RLX_BUILD_PLUGIN_PATH)
    Dl_info info;
    void *self = (void *)&rlx_registry_open;
    char lib[PATH_MAX], build[PATH_MAX];
    if (!dladdr(self, &info) || !info.dli_fname || !realpath(info.dli_fname, lib) ||
        !realpath(RLX_BUILD_LIBDIR, build))
        return 0;
    char *slash = strrchr(lib, '/');
    if (!slash) return 0;
    *slash = 0;
    return strcmp(lib, build) == 0;
#else
    return 0;
#endif
}

static int add_default_dirs(rlx_registry *r)
{
#ifdef RLX_BUILD_PLUGIN_PATH
    if (rlx__running_uninstalled()) return add_path_list(r, RLX_BUILD_PLUGIN_PATH);
#endif
    return add_dir(r, RLX_PLUGIN_DIR);
}

/* ---------------------------------------------------------------- records */

static plugin *new_record(rlx_registry *r, const char *path)
{
    if (r->n_plugins == r->cap_plugins) {
        size_t cap = r->cap_plugins ? r->cap_plugins * 2 : 16;
        plugin *np = realloc(r->plugins, cap * sizeof *np);
        if (!np) return NULL;
        r->plugins = np;
        r->cap_plugins = cap;
    }
    plugin *p = &r->plugins[r->n_plugins];
    memset(p, 0, sizeof *p);
    if (!(p->path = strdup(path))) return NULL;
    r->n_plugins++;
    return p;
}

static char *file_stem(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 3 && strcmp(b + n - 3, ".so") == 0) n -= 3;
    return strndup(b, n);
}

/* Fill p's public view (after the strings are final). */
static void publish(plugin *p)
{
    p->info.path = p->path;
    p->info.name = p->name ? p->name : "";
    p->info.version = p->version ? p->version : "";
    p->info.reason = p->reason;
}

static void refuse(plugin *p, const char *fmt, ...) RLX_PRINTF(2, 3);
static void refuse(plugin *p, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *c = msg; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    free(p->reason);
    p->reason = strdup(msg);
    free(p->name);
    p->name = file_stem(p->path);
    free(p->version);
    p->version = NULL;
    p->info.loaded = 0;
    p->info.desc = NULL;
    rlx__host_log(RLX_LOG_DEBUG, "registry", "refused: %s (%s)", msg, p->path);
}

/* ---------------------------------------------------------------- validation */


/* Who already provides a name of this kind; NULL if nobody. */
static const plugin *owner_of(const rlx_registry *r, int kind, const char *name)
{
    for (size_t i = 0; i < r->n_plugins; i++) {
        const plugin *p = &r->plugins[i];
        if (!p->info.loaded) continue;
        const rlx_plugin_desc *d = p->info.desc;
        if (kind == 0 && strcmp(d->name, name) == 0) return p;
        if (kind == 1)
            for (uint32_t k = 0; k < d->n_blocks; k++)
                if (strcmp(d->blocks[k]->name, name) == 0) return p;
        if (kind == 2)
            for (uint32_t k = 0; k < d->n_backends; k++)
                if (strcmp(d->backends[k]->name, name) == 0) return p;
        if (kind == 3)
            for (uint32_t k = 0; k < d->n_archs; k++)
                if (strcmp(d->archs[k]->name, name) == 0) return p;
    }
    return NULL;
}

static const char *const kind_names[] = {"plugin", "block", "backend", "arch"};

/* Pages found readable while one descriptor is checked: a mapping's permissions are per
 * page, and a descriptor's structs and names share a few pages, so each page costs one
 * system call instead of one per field (hundreds per plugin). On the caller's stack: a
 * thread-local one could be allocated (and mapped) on first use, in the middle of a check. */
typedef struct page_memo {
    uintptr_t pg[64];
    unsigned n;
} page_memo;

/* 1 when n bytes at p can be read: a descriptor's counts and pointers are checked
 * against the process's mappings before they are followed, so a lying count is a
 * refusal, not a crash. memo: pages already found readable (NULL: none). */
static int readable(page_memo *memo, const void *p, size_t n)
{
    if (!p) return 0;
    if (!n) return 1;
    uintptr_t first = (uintptr_t)p & ~(uintptr_t)4095, last = ((uintptr_t)p + n - 1) & ~(uintptr_t)4095;
    if (last < first) return 0; /* wraps around the address space */
    pid_t self = 0;
    for (uintptr_t pg = first;; pg += 4096) {
        unsigned k = 0;
        while (memo && k < memo->n && memo->pg[k] != pg) k++;
        if (!memo || k == memo->n) {
            char byte;
            struct iovec local = {&byte, 1}, remote = {(void *)(pg < (uintptr_t)p ? (uintptr_t)p : pg), 1};
            if (!self) self = getpid();
            ssize_t got = process_vm_readv(self, &local, 1, &remote, 1, 0);
            if (got < 0 && (errno == ENOSYS || errno == EPERM)) return 1; /* cannot tell */
            if (got != 1) return 0;
            if (memo && memo->n < sizeof memo->pg / sizeof memo->pg[0]) memo->pg[memo->n++] = pg;
        }
        if (pg == last) return 1;
    }
}

/* A readable NUL-terminated name of 1..255 bytes: checked a page at a time (one check
 * per name, not per byte; a name may end just before an unmapped page). */
static int good_name(page_memo *memo, const char *s)
{
    if (!s) return 0;
    size_t i = 0;
    while (i < 256) {
        size_t to_page = 4096 - (((uintptr_t)s + i) & 4095), k = to_page < 256 - i ? to_page : 256 - i;
        if (!readable(memo, s + i, k)) return 0;
        const char *z = memchr(s + i, 0, k);
        if (z) return z > s;
        i += k;
    }
    return 0;
}

/* The optional diffusers class names of an arch (ABI 1.1), NULL when absent. */
static const char *const *class_names(const rlx_arch *a)
{
    return a->struct_size >= RLX_STRUCT_SIZE(rlx_arch, class_names) ? a->class_names : NULL;
}

#define FAIL(...) return snprintf(why, len, __VA_ARGS__), 1

/* A NULL-terminated list of names, every entry readable: checked before it is walked. */
static int check_names(page_memo *memo, const char *const *list, const char *arch, const char *key,
                       char *why, size_t len)
{
    size_t k = 0;
    for (; list && k <= MAX_ITEMS; k++) {
        if (!readable(memo, &list[k], sizeof *list)) FAIL("arch '%s': %s is not readable", arch, key);
        if (!list[k]) return 0;
        if (!good_name(memo, list[k])) FAIL("arch '%s': %s[%zu] is not a name", arch, key, k);
    }
    if (list) FAIL("arch '%s': %s has no NULL end within %u entries", arch, key, MAX_ITEMS);
    return 0;
}

/* Structural checks of one descriptor (everything except names taken by other
 * plugins); nonzero with a one-line reason in why. Also run inside the isolation child. */
static int check_desc(const rlx_plugin_desc *d, char *why, size_t len)
{
    const uint32_t need_ver = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, abi_minor);
    const uint32_t need = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs);
    page_memo memo_, *memo = &memo_;
    memo->n = 0;
    if (!readable(memo, d, need_ver)) FAIL("descriptor at %p is not readable", (const void *)d);
    if (d->struct_size < need_ver)
        FAIL("struct too small: rlx_plugin_desc is %u bytes, ABI %d.%d needs %u",
             d->struct_size, RLX_ABI_MAJOR, RLX_ABI_MINOR, need);
    /* the major is checked before any other field: a new major may move them */
    if (d->abi_major != RLX_ABI_MAJOR)
        FAIL("ABI major mismatch: plugin %u.%u, host %d.%d", d->abi_major, d->abi_minor,
             RLX_ABI_MAJOR, RLX_ABI_MINOR);
    if (d->abi_minor > RLX_ABI_MINOR)
        FAIL("ABI minor too new: plugin %u.%u needs a host of that ABI, host is %d.%d",
             d->abi_major, d->abi_minor, RLX_ABI_MAJOR, RLX_ABI_MINOR);
    if (d->struct_size < need)
        FAIL("struct too small: rlx_plugin_desc is %u bytes, ABI %d.%d needs %u",
             d->struct_size, RLX_ABI_MAJOR, RLX_ABI_MINOR, need);
    if (!readable(memo, d, need)) FAIL("descriptor at %p is not readable", (const void *)d);
    if (!good_name(memo, d->name)) FAIL("descriptor has no name (or one over 255 bytes)");
    if (d->n_blocks > MAX_ITEMS || d->n_backends > MAX_ITEMS || d->n_archs > MAX_ITEMS ||
        (d->n_blocks && !d->blocks) || (d->n_backends && !d->backends) ||
        (d->n_archs && !d->archs))
        FAIL("descriptor '%s' has a NULL or oversized blocks/backends/archs array (limit %u)",
             d->name, MAX_ITEMS);
    if (!readable(memo, d->blocks, d->n_blocks * sizeof *d->blocks) && d->n_blocks)
        FAIL("descriptor '%s' claims %u blocks but its blocks array is not readable", d->name,
             d->n_blocks);
    if (!readable(memo, d->backends, d->n_backends * sizeof *d->backends) && d->n_backends)
        FAIL("descriptor '%s' claims %u backends but its backends array is not readable",
             d->name, d->n_backends);
    if (!readable(memo, d->archs, d->n_archs * sizeof *d->archs) && d->n_archs)
        FAIL("descriptor '%s' claims %u archs but its archs array is not readable", d->name,
             d->n_archs);
    const uint32_t need_block = (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit);
    for (uint32_t i = 0; i < d->n_blocks; i++) {
        const rlx_block *b = d->blocks[i];
        if (!b) FAIL("block #%u is NULL", i);
        if (!readable(memo, b, sizeof b->struct_size) || !readable(memo, b, need_block))
            FAIL("block #%u is not readable", i);
        if (b->struct_size < need_block)
            FAIL("struct too small: rlx_block #%u is %u bytes, ABI %d.%d needs %u", i,
                 b->struct_size, RLX_ABI_MAJOR, RLX_ABI_MINOR, need_block);
        if (!good_name(memo, b->name)) FAIL("block #%u has no name", i);
        if (!b->emit) FAIL("block '%s' has no emit function", b->name);
    }
    const uint32_t need_be = (uint32_t)RLX_STRUCT_SIZE(rlx_backend, teardown);
    for (uint32_t i = 0; i < d->n_backends; i++) {
        const rlx_backend *b = d->backends[i];
        if (!b) FAIL("backend #%u is NULL", i);
        if (!readable(memo, b, sizeof b->struct_size)) FAIL("backend #%u is not readable", i);
        if (b->struct_size < need_be)
            FAIL("struct too small: rlx_backend #%u is %u bytes, ABI %d.%d needs %u", i,
                 b->struct_size, RLX_ABI_MAJOR, RLX_ABI_MINOR, need_be);
        if (!readable(memo, b, need_be)) FAIL("backend #%u is not readable", i);
        if (!good_name(memo, b->name)) FAIL("backend #%u has no name", i);
        if (strcmp(b->name, "auto") == 0) FAIL("backend name 'auto' is reserved");
        /* supports_op is the only optional entry */
        const char *missing = !b->probe     ? "probe"
                              : !b->init     ? "init"
                              : !b->alloc    ? "alloc"
                              : !b->free     ? "free"
                              : !b->upload   ? "upload"
                              : !b->download ? "download"
                              : !b->compile  ? "compile"
                              : !b->execute  ? "execute"
                              : !b->sync     ? "sync"
                              : !b->release  ? "release"
                              : !b->teardown ? "teardown"
                                             : NULL;
        if (missing) FAIL("backend '%s' has no %s function", b->name, missing);
    }
    const uint32_t need_arch = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, build_flow);
    for (uint32_t i = 0; i < d->n_archs; i++) {
        const rlx_arch *a = d->archs[i];
        if (!a) FAIL("arch #%u is NULL", i);
        if (!readable(memo, a, sizeof a->struct_size)) FAIL("arch #%u is not readable", i);
        if (a->struct_size < need_arch)
            FAIL("struct too small: rlx_arch #%u is %u bytes, ABI %d.%d needs %u", i,
                 a->struct_size, RLX_ABI_MAJOR, RLX_ABI_MINOR, need_arch);
        if (!readable(memo, a, need_arch)) FAIL("arch #%u is not readable", i);
        if (!good_name(memo, a->name)) FAIL("arch #%u has no name", i);
        if (!a->model_types || !a->build_flow)
            FAIL("arch '%s' has no model_types or no build_flow", a->name);
        if (a->struct_size >= RLX_STRUCT_SIZE(rlx_arch, class_names) &&
            !readable(memo, a, RLX_STRUCT_SIZE(rlx_arch, class_names)))
            FAIL("arch #%u is not readable", i);
        if (check_names(memo, a->model_types, a->name, "model_types", why, len) ||
            check_names(memo, class_names(a), a->name, "class_names", why, len))
            return 1;
    }
    return 0;
}
#undef FAIL

/* Checks one descriptor; on failure refuses p and returns nonzero. */
static int validate(rlx_registry *r, plugin *p, const rlx_plugin_desc *d)
{
    char why[1024];
    if (readable(NULL, d, RLX_STRUCT_SIZE(rlx_plugin_desc, abi_minor)) &&
        d->struct_size >= RLX_STRUCT_SIZE(rlx_plugin_desc, abi_minor)) {
        p->info.abi_major = d->abi_major;
        p->info.abi_minor = d->abi_minor;
    }
    if (check_desc(d, why, sizeof why)) {
        refuse(p, "%s", why);
        return 1;
    }

    /* a model type (or diffusers class) has one owner among loaded plugins */
    for (uint32_t i = 0; i < d->n_archs; i++) {
        const rlx_arch *a = d->archs[i];
        for (int cls = 0; cls < 2; cls++)
            for (const char *const *t = cls ? class_names(a) : a->model_types; t && *t; t++) {
                const rlx_arch *prev = cls ? rlx_registry_arch_for_class(r, *t) : rlx_registry_arch_for(r, *t);
                if (prev) {
                    refuse(p, "arch '%s': %s \"%s\" is already handled by arch '%s' (%s)", a->name,
                           cls ? "_class_name" : "model_type", *t, prev->name, owner_of(r, 3, prev->name)->path);
                    return 1;
                }
            }
    }

    /* names: unique among loaded plugins and within this one */
    const plugin *o = owner_of(r, 0, d->name);
    if (o) {
        refuse(p, "duplicate plugin name '%s' (already loaded from %s)", d->name, o->path);
        return 1;
    }
    for (int kind = 1; kind <= 3; kind++) {
        uint32_t n = kind == 1 ? d->n_blocks : kind == 2 ? d->n_backends : d->n_archs;
        for (uint32_t i = 0; i < n; i++) {
            const char *name = kind == 1   ? d->blocks[i]->name
                               : kind == 2 ? d->backends[i]->name
                                           : d->archs[i]->name;
            if ((o = owner_of(r, kind, name))) {
                refuse(p, "duplicate %s name '%s' (already provided by %s)", kind_names[kind],
                       name, o->path);
                return 1;
            }
            for (uint32_t j = 0; j < i; j++) {
                const char *prev = kind == 1   ? d->blocks[j]->name
                                   : kind == 2 ? d->backends[j]->name
                                               : d->archs[j]->name;
                if (strcmp(prev, name) == 0) {
                    refuse(p, "duplicate %s name '%s' (twice in this plugin)", kind_names[kind],
                           name);
                    return 1;
                }
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- loading */

/* Who may change the code we are about to run: like ssh and sudo, the real file and
 * every folder above it must be writable only by their owner (a sticky folder such as
 * /tmp excepted) and owned by root or by us. Reason names the path and the mode. */
static const char *unsafe_one(const char *what, const char *path, int is_dir, char *buf,
                              size_t len)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(buf, len, "unsafe location: cannot stat %s %s: %s", what, path, strerror(errno));
        return buf;
    }
    unsigned mode = (unsigned)st.st_mode & 07777;
    int sticky = is_dir && (st.st_mode & S_ISVTX);
    if ((st.st_mode & S_IWOTH) && !sticky) {
        snprintf(buf, len, "unsafe location: %s %s is world-writable%s (mode %04o)", what, path,
                 is_dir ? " without the sticky bit" : "", mode);
        return buf;
    }
    if ((st.st_mode & S_IWGRP) && !sticky) {
        snprintf(buf, len, "unsafe location: %s %s is group-writable%s (mode %04o)", what, path,
                 is_dir ? " without the sticky bit" : "", mode);
        return buf;
    }
    if (st.st_uid != 0 && st.st_uid != geteuid()) {
        snprintf(buf, len, "unsafe location: %s %s is owned by uid %u, not root or uid %u", what,
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
        return buf;
    }
    return NULL;
}

static int dir_known_safe(const rlx_registry *r, const char *dir)
{
    for (size_t i = 0; i < r->n_safe; i++)
        if (strcmp(r->safe[i], dir) == 0) return 1;
    return 0;
}

/* Remembers the folders of a chain found safe up to "/" (or up to a folder already
 * known safe): the next plugin under them checks only its own file and new folders. */
static void remember_safe(rlx_registry *r, const char *real)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", real);
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir || dir_known_safe(r, dir)) return;
        *slash = 0;
        if (dir_known_safe(r, dir)) return;
        char **ns = realloc(r->safe, (r->n_safe + 1) * sizeof *ns);
        if (!ns) return; /* only a cache */
        r->safe = ns;
        if (!(r->safe[r->n_safe] = strdup(dir))) return;
        r->n_safe++;
    }
}

static const char *unsafe_reason(rlx_registry *r, const char *real, char *buf, size_t len)
{
    const char *e = getenv("RLX_PLUGIN_ALLOW_UNSAFE");
    if (e && strcmp(e, "1") == 0) return NULL;
    if (unsafe_one("file", real, 0, buf, len)) return buf;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", real);
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash) break;
        if (slash == dir) slash[1] = 0; /* "/" itself */
        else *slash = 0;
        if (dir_known_safe(r, dir)) break; /* it and every folder above it checked */
        if (unsafe_one("folder", dir, 1, buf, len)) return buf;
        if (strcmp(dir, "/") == 0) break;
    }
    remember_safe(r, real);
    return NULL;
}

static int is_elf(const char *path)
{
    unsigned char m[4] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    ssize_t n = read(fd, m, sizeof m);
    close(fd);
    return n == 4 && m[0] == 0x7f && m[1] == 'E' && m[2] == 'L' && m[3] == 'F';
}

static int seen_before(rlx_registry *r, const char *real)
{
    for (size_t i = 0; i < r->n_seen; i++)
        if (strcmp(r->seen[i], real) == 0) return 1;
    char **ns = realloc(r->seen, (r->n_seen + 1) * sizeof *ns);
    if (!ns) return 0;
    r->seen = ns;
    if ((r->seen[r->n_seen] = strdup(real))) r->n_seen++;
    return 0;
}

/* The checks that need no code of the plugin: a record, refused or pending. */
static int precheck(rlx_registry *r, const char *path)
{
    char real[PATH_MAX];
    int have_real = realpath(path, real) != NULL;
    if (have_real && seen_before(r, real)) return 0; /* same file via another dir */
    plugin *p = new_record(r, path);
    if (!p) return RLX_ERR_NOMEM;
    char why[PATH_MAX + 128];
    struct stat st;
    int elf;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || !have_real)
        refuse(p, "not a regular file");
    else if (unsafe_reason(r, real, why, sizeof why))
        refuse(p, "%s", why);
    else if ((elf = is_elf(path)) != 1) {
        if (elf < 0) refuse(p, "cannot open: %s", strerror(errno));
        else refuse(p, "not an ELF file");
    } else
        p->pending = 1;
    if (!p->pending) {
        if (!p->name && !(p->name = file_stem(path))) return RLX_ERR_NOMEM;
        publish(p);
    }
    return 0;
}

/* Opens a pending plugin in this process: dlopen, entry point, validation. */
static int load_one(rlx_registry *r, plugin *p)
{
    p->pending = 0;
    dlerror();
    p->handle = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
    if (!p->handle) {
        const char *e = dlerror();
        refuse(p, "dlopen failed: %s", e ? e : "unknown error");
    } else {
        rlx_plugin_init_fn init;
        void *sym = dlsym(p->handle, RLX_PLUGIN_ENTRY_NAME);
        memcpy(&init, &sym, sizeof init); /* object pointer to function pointer */
        const rlx_plugin_desc *d = NULL;
        if (!init)
            refuse(p, "no entry symbol %s", RLX_PLUGIN_ENTRY_NAME);
        else if (!(d = init(rlx_host_api_get())))
            refuse(p, "%s returned NULL", RLX_PLUGIN_ENTRY_NAME);
        else if (validate(r, p, d) == 0) {
            p->name = strdup(d->name);
            p->version = strdup(d->version && readable(NULL, d->version, 1) ? d->version : "");
            if (!p->name || !p->version) return RLX_ERR_NOMEM;
            p->info.loaded = 1;
            p->info.desc = d;
            p->info.abi_major = d->abi_major;
            p->info.abi_minor = d->abi_minor;
            rlx__host_log(RLX_LOG_DEBUG, "registry", "loaded %s %s (%s)", d->name, p->version,
                          p->path);
        }
        /* a refused plugin whose init never ran holds nothing: unload it now */
        if (!p->info.loaded && !init) {
            dlclose(p->handle);
            p->handle = NULL;
        }
    }
    if (!p->name && !(p->name = file_stem(p->path))) return RLX_ERR_NOMEM;
    publish(p);
    return 0;
}

/* ---------------------------------------------------------------- isolation */

typedef struct iso_ctx {
    rlx_registry *r;
    size_t *idx; /* pending plugins, by record index */
} iso_ctx;

/* Inside the isolation child: everything load_one does except the name checks
 * against other plugins, which the parent does in order. */
static int iso_check(size_t i, void *vctx, char *why, size_t len)
{
    iso_ctx *c = vctx;
    const char *path = c->r->plugins[c->idx[i]].path;
    rlx__isolate_phase(RLX__PHASE_DLOPEN);
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, len, "dlopen failed: %s", e ? e : "unknown error");
        return 1;
    }
    rlx_plugin_init_fn init;
    void *sym = dlsym(h, RLX_PLUGIN_ENTRY_NAME);
    memcpy(&init, &sym, sizeof init);
    if (!init) return snprintf(why, len, "no entry symbol %s", RLX_PLUGIN_ENTRY_NAME), 1;
    rlx__isolate_phase(RLX__PHASE_INIT);
    const rlx_plugin_desc *d = init(rlx_host_api_get());
    if (!d) return snprintf(why, len, "%s returned NULL", RLX_PLUGIN_ENTRY_NAME), 1;
    rlx__isolate_phase(RLX__PHASE_VALIDATE);
    return check_desc(d, why, len);
}

/* Refuses, before any dlopen here, each pending plugin that the child refused. */
static int isolate_pending(rlx_registry *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_plugins; i++) n += r->plugins[i].pending;
    if (!n) return 0;
    size_t *idx = malloc(n * sizeof *idx);
    char **why = calloc(n, sizeof *why);
    int rc = idx && why ? 0 : RLX_ERR_NOMEM;
    for (size_t i = 0, k = 0; !rc && i < r->n_plugins; i++)
        if (r->plugins[i].pending) idx[k++] = i;
    iso_ctx c = {r, idx};
    if (!rc) rc = rlx__isolate_run(n, iso_check, &c, why);
    for (size_t k = 0; !rc && k < n; k++) {
        plugin *p = &r->plugins[idx[k]];
        if (!why[k]) continue;
        p->pending = 0;
        refuse(p, "%s", why[k]);
        if (!p->name && !(p->name = file_stem(p->path))) rc = RLX_ERR_NOMEM;
        publish(p);
    }
    for (size_t k = 0; why && k < n; k++) free(why[k]);
    free(why);
    free(idx);
    return rc;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Candidates of one folder, in name order so that "first wins" is reproducible. */
static int scan_dir(rlx_registry *r, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) return 0; /* a missing folder is just empty */
    if (S_ISREG(st.st_mode)) return precheck(r, dir); /* a path entry may name one file */
    DIR *dh = opendir(dir);
    if (!dh) return 0;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(dh))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".so") != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) { rc = RLX_ERR_NOMEM; break; }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) { rc = RLX_ERR_NOMEM; break; }
        n++;
    }
    closedir(dh);
    if (n) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) < (int)sizeof path)
            rc = precheck(r, path);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

static int index_backends(rlx_registry *r)
{
    size_t total = 0;
    for (size_t i = 0; i < r->n_plugins; i++)
        if (r->plugins[i].info.loaded) total += r->plugins[i].info.desc->n_backends;
    if (!total) return 0;
    if (!(r->backends = calloc(total, sizeof *r->backends))) return RLX_ERR_NOMEM;
    for (size_t i = 0; i < r->n_plugins; i++) {
        if (!r->plugins[i].info.loaded) continue;
        const rlx_plugin_desc *d = r->plugins[i].info.desc;
        for (uint32_t k = 0; k < d->n_backends; k++) r->backends[r->n_backends++].be = d->backends[k];
    }
    return 0;
}

/* The first few refusals as warnings, the rest as one line: a folder full of foreign
 * .so files must not bury every run's output (rlx-plugins list shows them all). */
#define MAX_WARN 3
static void log_refusals(const rlx_registry *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_plugins; i++) {
        const plugin *p = &r->plugins[i];
        if (p->info.loaded || !p->reason) continue;
        if (n++ < MAX_WARN)
            rlx__host_log(RLX_LOG_WARN, "registry", "refused: %s (%s)", p->reason, p->path);
    }
    if (n > MAX_WARN)
        rlx__host_log(RLX_LOG_WARN, "registry", "%zu more plugin files refused (rlx-plugins list says why)",
                      n - MAX_WARN);
}

RLX_API int rlx_registry_open(const char *search_path, rlx_registry **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_registry_open: out is NULL");
    *out = NULL;
    rlx_registry *r = calloc(1, sizeof *r);
    if (!r) return rlx_diag_set(d, RLX_ERR_NOMEM, "plugin registry: out of memory");
    pthread_mutex_init(&r->probe_lock, NULL);
    int rc;
    if (search_path)
        rc = add_path_list(r, search_path);
    else
        rc = add_path_list(r, getenv("RLX_PLUGIN_PATH")) || add_default_dirs(r);
    for (size_t i = 0; rc == 0 && i < r->n_dirs; i++) rc = scan_dir(r, r->dirs[i]);
    if (rc == 0 && rlx__isolate_enabled()) rc = isolate_pending(r);
    for (size_t i = 0; rc == 0 && i < r->n_plugins; i++)
        if (r->plugins[i].pending) rc = load_one(r, &r->plugins[i]);
    if (rc == 0) rc = index_backends(r);
    if (rc == 0) log_refusals(r);
    if (rc) {
        rlx_registry_close(r);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "plugin registry: out of memory");
    }
    *out = r;
    return RLX_OK;
}

RLX_API void rlx_registry_close(rlx_registry *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n_plugins; i++) {
        plugin *p = &r->plugins[i];
        /* p->handle stays open: see the top of this file */
        free(p->path);
        free(p->name);
        free(p->version);
        free(p->reason);
    }
    for (size_t i = 0; i < r->n_dirs; i++) {
        free(r->dirs[i]);
        free(r->dir_keys[i]);
    }
    free(r->dir_keys);
    for (size_t i = 0; i < r->n_seen; i++) free(r->seen[i]);
    for (size_t i = 0; i < r->n_safe; i++) free(r->safe[i]);
    free(r->safe);
    free(r->plugins);
    free(r->dirs);
    free(r->seen);
    free(r->backends);
    pthread_mutex_destroy(&r->probe_lock);
    free(r);
}

/* ---------------------------------------------------------------- queries */

RLX_API size_t rlx_registry_count(const rlx_registry *r) { return r ? r->n_plugins : 0; }

RLX_API const rlx_plugin_info *rlx_registry_plugin(const rlx_registry *r, size_t i)
{
    return r && i < r->n_plugins ? &r->plugins[i].info : NULL;
}

RLX_API size_t rlx_registry_search_dirs(const rlx_registry *r, const char *const **dirs)
{
    if (dirs) *dirs = r ? (const char *const *)r->dirs : NULL;
    return r ? r->n_dirs : 0;
}

RLX_API const rlx_block *rlx_registry_block(const rlx_registry *r, const char *name)
{
    if (!r || !name) return NULL;
    const plugin *p = owner_of(r, 1, name);
    if (!p) return NULL;
    const rlx_plugin_desc *d = p->info.desc;
    for (uint32_t k = 0; k < d->n_blocks; k++)
        if (strcmp(d->blocks[k]->name, name) == 0) return d->blocks[k];
    return NULL;
}

RLX_API const rlx_arch *rlx_registry_arch(const rlx_registry *r, const char *name)
{
    if (!r || !name) return NULL;
    const plugin *p = owner_of(r, 3, name);
    if (!p) return NULL;
    const rlx_plugin_desc *d = p->info.desc;
    for (uint32_t k = 0; k < d->n_archs; k++)
        if (strcmp(d->archs[k]->name, name) == 0) return d->archs[k];
    return NULL;
}

RLX_API const rlx_arch *rlx_registry_arch_for(const rlx_registry *r, const char *model_type)
{
    if (!r || !model_type) return NULL;
    for (size_t i = 0; i < r->n_plugins; i++) {
        if (!r->plugins[i].info.loaded) continue;
        const rlx_plugin_desc *d = r->plugins[i].info.desc;
        for (uint32_t k = 0; k < d->n_archs; k++)
            for (const char *const *t = d->archs[k]->model_types; *t; t++)
                if (strcmp(*t, model_type) == 0) return d->archs[k];
    }
    return NULL;
}

RLX_API const rlx_arch *rlx_registry_arch_for_class(const rlx_registry *r, const char *class_name)
{
    if (!r || !class_name) return NULL;
    for (size_t i = 0; i < r->n_plugins; i++) {
        if (!r->plugins[i].info.loaded) continue;
        const rlx_plugin_desc *d = r->plugins[i].info.desc;
        for (uint32_t k = 0; k < d->n_archs; k++)
            for (const char *const *t = class_names(d->archs[k]); t && *t; t++)
                if (strcmp(*t, class_name) == 0) return d->archs[k];
    }
    return NULL;
}

static backend_slot *slot_of(const rlx_registry *r, const rlx_backend *be)
{
    for (size_t i = 0; i < r->n_backends; i++)
        if (r->backends[i].be == be) return &r->backends[i];
    return NULL;
}

RLX_API const rlx_backend_probe *rlx_registry_probe(const rlx_registry *r, const rlx_backend *be)
{
    if (!r || !be) return NULL;
    backend_slot *s = slot_of(r, be);
    if (!s) return NULL;
    pthread_mutex_t *lock = (pthread_mutex_t *)&r->probe_lock;
    pthread_mutex_lock(lock);
    if (!s->probed) {
        memset(&s->probe, 0, sizeof s->probe);
        s->probe.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_backend_probe, details);
        if (be->probe(&s->probe) != 0 && s->probe.available) s->probe.available = 0;
        /* whatever the plugin wrote, the strings end inside their arrays */
        s->probe.reason[sizeof s->probe.reason - 1] = 0;
        s->probe.details[sizeof s->probe.details - 1] = 0;
        if (s->probe.n_devices > RLX_MAX_DEVICES) s->probe.n_devices = RLX_MAX_DEVICES;
        for (uint32_t i = 0; i < RLX_MAX_DEVICES; i++)
            s->probe.devices[i][sizeof s->probe.devices[i] - 1] = 0;
        if (!s->probe.available && !s->probe.reason[0])
            snprintf(s->probe.reason, sizeof s->probe.reason, "the probe gave no reason");
        s->probed = 1;
    }
    pthread_mutex_unlock(lock);
    return &s->probe;
}

RLX_API const rlx_backend *rlx_registry_backend(const rlx_registry *r, const char *name,
                                                rlx_diag *d)
{
    if (!r) {
        rlx_diag_set(d, RLX_ERR_INVALID, "rlx_registry_backend: no registry");
        return NULL;
    }
    if (name && *name && strcmp(name, "auto") != 0) {
        for (size_t i = 0; i < r->n_backends; i++) {
            const rlx_backend *be = r->backends[i].be;
            if (strcmp(be->name, name) != 0) continue;
            const rlx_backend_probe *pr = rlx_registry_probe(r, be);
            if (pr->available) return be;
            rlx_diag_set(d, RLX_ERR_DEVICE, "backend '%s' is not available: %s", name, pr->reason);
            return NULL;
        }
        char names[512] = "";
        size_t o = 0;
        for (size_t i = 0; i < r->n_backends && o < sizeof names; i++) {
            int w = snprintf(names + o, sizeof names - o, "%s%s", o ? ", " : "",
                             r->backends[i].be->name);
            if (w < 0) break;
            o += (size_t)w;
        }
        /* a refused file may be the one that has it (isolation's time limit, a bad dlopen) */
        char refused[640] = "";
        for (size_t i = 0, o2 = 0; i < r->n_plugins && o2 < sizeof refused; i++) {
            const plugin *p = &r->plugins[i];
            const char *base = strrchr(p->path, '/');
            if (p->info.loaded || !p->reason) continue;
            int w = snprintf(refused + o2, sizeof refused - o2, "%s%s: %s", o2 ? "; " : "; refused ",
                             base ? base + 1 : p->path, p->reason);
            if (w < 0) break;
            o2 += (size_t)w;
        }
        rlx_diag_set(d, RLX_ERR_NOT_FOUND,
                     "no backend named '%s' (loaded: %s%s; see rlx-plugins list)", name,
                     r->n_backends ? names : "none", refused);
        return NULL;
    }
    /* auto: the highest priority among available backends; load order breaks ties */
    const rlx_backend *best = NULL;
    for (size_t i = 0; i < r->n_backends; i++) {
        const rlx_backend *be = r->backends[i].be;
        if (best && be->priority <= best->priority) continue;
        if (rlx_registry_probe(r, be)->available) best = be;
    }
    if (!best)
        rlx_diag_set(d, RLX_ERR_NOT_FOUND, "no available backend among %zu loaded (see rlx-plugins list)",
                     r->n_backends);
    return best;
}
