/* Chat templates. Rather than a Jinja interpreter, rlx recognises the three formats real
 * checkpoints use — LLaMA 3 (<|start_header_id|>), ChatML as in Qwen 2/2.5/3
 * (<|im_start|>) and Gemma 2/3 (<start_of_turn>) — and renders them natively, following
 * what those templates produce (system-message handling, trimming, Qwen3's stripping of
 * earlier reasoning, Gemma's system prefix). Any other template fails clearly. */
#include "base/internal.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { FAM_LLAMA3, FAM_CHATML, FAM_GEMMA } family;

struct rlx_chat_template {
    family fam;
    char *bos, *eos;
    int use_bos;
    int llama_sysblock;   /* LLaMA 3.1+: the "Cutting Knowledge Date" system block */
    int llama_today;      /* ... dated with today (strftime_now) rather than 26 Jul 2024 */
    const char *default_system; /* ChatML: Qwen 2/2.5 default system message */
    int qwen3_think;      /* Qwen3: reasoning of earlier turns is dropped */
    int gemma_sys_prefix; /* Gemma 3: a system message prefixes the first user turn */
};

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Jinja's |trim (Python str.strip()) */
static void put_trimmed(sbuf *b, const char *s)
{
    size_t a = 0, e = strlen(s);
    while (a < e && is_ws(s[a])) a++;
    while (e > a && is_ws(s[e - 1])) e--;
    put(b, s + a, e - a);
}

static void put_stripped_nl(sbuf *b, const char *s, size_t n, int left, int right)
{
    size_t a = 0, e = n;
    while (left && a < e && s[a] == '\n') a++;
    while (right && e > a && s[e - 1] == '\n') e--;
    put(b, s + a, e - a);
}

static const char *find_last(const char *s, const char *needle)
{
    const char *last = NULL, *p = s;
    while ((p = strstr(p, needle))) last = p++;
    return last;
}

RLX_API int rlx_chat_template_new(const char *src, const char *bos_token, const char *eos_token,
                                  const char *origin, rlx_chat_template **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_chat_template_new: out is NULL");
    *out = NULL;
    if (!origin) origin = "chat_template";
    if (!src) return rlx_diag_set(d, RLX_ERR_INVALID, "%s: chat_template is NULL", origin);
    rlx_chat_template *t = calloc(1, sizeof *t);
    if (!t) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", origin);
    if (strstr(src, "<|start_header_id|>") && strstr(src, "<|eot_id|>")) {
        t->fam = FAM_LLAMA3;
        t->llama_sysblock = strstr(src, "Cutting Knowledge Date") != NULL;
        t->llama_today = strstr(src, "strftime_now") != NULL;
    } else if (strstr(src, "<|im_start|>") && strstr(src, "<|im_end|>")) {
        t->fam = FAM_CHATML;
        t->qwen3_think = strstr(src, "</think>") != NULL;
        if (strstr(src, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."))
            t->default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
        else if (strstr(src, "You are a helpful assistant."))
            t->default_system = "You are a helpful assistant.";
    } else if (strstr(src, "<start_of_turn>") && strstr(src, "<end_of_turn>")) {
        t->fam = FAM_GEMMA;
        t->gemma_sys_prefix = strstr(src, "first_user_prefix") != NULL;
    } else {
        free(t);
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED,
                            "%s: chat_template: unsupported template (rlx renders the LLaMA 3, ChatML/Qwen "
                            "and Gemma formats; this template has none of their turn markers)",
                            origin);
    }
    t->use_bos = strstr(src, "bos_token") != NULL;
    t->bos = strdup(bos_token ? bos_token : "");
    t->eos = strdup(eos_token ? eos_token : "");
    if (!t->bos || !t->eos) {
        rlx_chat_template_free(t);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", origin);
    }
    *out = t;
    return 0;
}

RLX_API void rlx_chat_template_free(rlx_chat_template *t)
{
    if (!t) return;
    free(t->bos);
    free(t->eos);
    free(t);
}

RLX_API const char *rlx_chat_template_family(const rlx_chat_template *t)
{
    static const char *names[] = {"llama3", "chatml", "gemma"};
    return t ? names[t->fam] : NULL;
}

RLX_API const char *rlx_chat_template_end_of_turn(const rlx_chat_template *t)
{
    static const char *eot[] = {"<|eot_id|>", "<|im_end|>", "<end_of_turn>"};
    return t ? eot[t->fam] : NULL;
}

static int render_llama3(const rlx_chat_template *t, const rlx_chat_message *m, size_t n, sbuf *b)
{
    size_t i = 0;
    if (t->use_bos) puts_(b, t->bos);
    if (t->llama_sysblock) {
        char date[32] = "26 Jul 2024";
        if (t->llama_today) {
            time_t now = time(NULL);
            struct tm tmv;
            if (localtime_r(&now, &tmv)) strftime(date, sizeof date, "%d %b %Y", &tmv);
        }
        puts_(b, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ");
        puts_(b, date);
        puts_(b, "\n\n");
        if (n && !strcmp(m[0].role, "system")) {
            put_trimmed(b, m[0].content);
            i = 1;
        }
        puts_(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        puts_(b, "<|start_header_id|>");
        puts_(b, m[i].role);
        puts_(b, "<|end_header_id|>\n\n");
        put_trimmed(b, m[i].content);
        puts_(b, "<|eot_id|>");
    }
    return 0;
}

static int render_chatml(const rlx_chat_template *t, const rlx_chat_message *m, size_t n, sbuf *b)
{
    if (t->default_system && (n == 0 || strcmp(m[0].role, "system"))) {
        puts_(b, "<|im_start|>system\n");
        puts_(b, t->default_system);
        puts_(b, "<|im_end|>\n");
    }
    size_t last_query = n;
    for (size_t i = n; i-- > 0;)
        if (!strcmp(m[i].role, "user")) {
            last_query = i;
            break;
        }
    for (size_t i = 0; i < n; i++) {
        const char *c = m[i].content;
        puts_(b, "<|im_start|>");
        puts_(b, m[i].role);
        puts_(b, "\n");
        const char *end = t->qwen3_think && !strcmp(m[i].role, "assistant") ? find_last(c, "</think>") : NULL;
        if (t->qwen3_think && !strcmp(m[i].role, "assistant")) {
            /* reasoning = text before </think>, after the last <think>; content = after </think> */
            const char *reason = "", *body = c;
            size_t rlen = 0;
            if (end) {
                const char *first_end = strstr(c, "</think>");
                const char *r0 = c;
                for (const char *p = c; (p = strstr(p, "<think>")) && p < first_end; p++) r0 = p + 7;
                reason = r0;
                rlen = (size_t)(first_end - r0);
                body = end + 8;
            }
            size_t blen = strlen(body);
            if (last_query != n && i > last_query && (i + 1 == n || rlen)) {
                puts_(b, "<think>\n");
                put_stripped_nl(b, reason, rlen, 1, 1);
                puts_(b, "\n</think>\n\n");
            }
            put_stripped_nl(b, body, blen, end != NULL, 0);
        } else {
            puts_(b, c);
        }
        puts_(b, "<|im_end|>\n");
    }
    return 0;
}

static int render_gemma(const rlx_chat_template *t, const rlx_chat_message *m, size_t n, sbuf *b,
                        rlx_diag *d)
{
    const char *prefix = NULL;
    size_t i = 0;
    if (t->use_bos) puts_(b, t->bos);
    if (n && !strcmp(m[0].role, "system")) {
        if (!t->gemma_sys_prefix)
            return rlx_diag_set(d, RLX_ERR_INVALID, "chat template: System role not supported (Gemma)");
        prefix = m[0].content;
        i = 1;
    }
    for (size_t k = 0; i < n; i++, k++) {
        int is_user = !strcmp(m[i].role, "user");
        if (is_user != (k % 2 == 0))
            return rlx_diag_set(d, RLX_ERR_INVALID,
                                "chat template: conversation roles must alternate user/assistant/user/assistant/... "
                                "(message %zu is '%s')",
                                i, m[i].role);
        puts_(b, "<start_of_turn>");
        puts_(b, !strcmp(m[i].role, "assistant") ? "model" : m[i].role);
        puts_(b, "\n");
        if (k == 0 && prefix) {
            puts_(b, prefix);
            puts_(b, "\n\n");
        }
        put_trimmed(b, m[i].content);
        puts_(b, "<end_of_turn>\n");
    }
    return 0;
}

RLX_API int rlx_chat_template_render(const rlx_chat_template *t, const rlx_chat_message *msgs, size_t n,
                                     int add_generation_prompt, char **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_chat_template_render: out is NULL");
    *out = NULL;
    if (!t || (!msgs && n)) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_chat_template_render: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return rlx_diag_set(d, RLX_ERR_INVALID, "chat template: message %zu has no role or content", i);
    sbuf b = {0};
    puts_(&b, "");
    int rc = 0;
    switch (t->fam) {
    case FAM_LLAMA3:
        rc = render_llama3(t, msgs, n, &b);
        if (add_generation_prompt) puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case FAM_CHATML:
        rc = render_chatml(t, msgs, n, &b);
        if (add_generation_prompt) puts_(&b, "<|im_start|>assistant\n");
        break;
    case FAM_GEMMA:
        rc = render_gemma(t, msgs, n, &b, d);
        if (add_generation_prompt) puts_(&b, "<start_of_turn>model\n");
        break;
    }
    if (!rc && b.oom) rc = rlx_diag_set(d, RLX_ERR_NOMEM, "chat template: out of memory");
    if (rc) {
        free(b.p);
        return rc;
    }
    *out = b.p;
    return 0;
}

/* tokenizer_config.json's bos_token / eos_token: a string or {"content": …} */
static const char *special_str(json_t *v)
{
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

RLX_API int rlx_chat_template_load(const char *dir, rlx_chat_template **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_chat_template_load: out is NULL");
    *out = NULL;
    if (!dir) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_chat_template_load: dir is NULL");
    char path[4096], jpath[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", dir);
    char *buf = NULL, *jinja = NULL;
    size_t len = 0;
    json_t *root = NULL;
    int rc = rlx__read_small_file(path, RLX__MAX_JSON_FILE, &buf, &len, d);
    if (!rc) rc = rlx__json_parse(buf, len, path, &root, d);
    free(buf);
    if (rc) return rc;
    if (!json_is_object(root)) {
        json_decref(root);
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: must be a JSON object", path);
    }
    json_t *ct = json_object_get(root, "chat_template");
    const char *src = NULL, *origin = path;
    if (json_is_string(ct)) {
        src = json_string_value(ct);
    } else if (json_is_array(ct)) { /* [{"name": "default", "template": …}, …] */
        size_t i;
        json_t *e;
        json_array_foreach(ct, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && !strcmp(name, "default")) src = json_string_value(json_object_get(e, "template"));
        }
        if (!src) {
            json_decref(root);
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: chat_template: no template named \"default\"", path);
        }
    } else if (ct && !json_is_null(ct)) {
        json_decref(root);
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: chat_template must be a string or a list of templates", path);
    } else {
        rlx_diag tmp;
        rlx_diag_init(&tmp);
        if (rlx__read_small_file(jpath, RLX__MAX_JSON_FILE, &jinja, &len, &tmp) == 0) {
            src = jinja;
            origin = jpath;
        }
    }
    if (!src) {
        json_decref(root);
        return rlx_diag_set(d, RLX_ERR_NOT_FOUND, "%s: the model has no chat_template (nor chat_template.jinja)",
                            path);
    }
    rc = rlx_chat_template_new(src, special_str(json_object_get(root, "bos_token")),
                               special_str(json_object_get(root, "eos_token")), origin, out, d);
    free(jinja);
    json_decref(root);
    return rc;
}
