/* Models: open a Hugging Face folder (config, weights, arch recipe, profile, backend)
 * or compile a flow built in code; dumps and one-shot forward. */
#include "runtime/exec.h"
#include "build/flow.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

RLX_API void rlx_model_options_init(rlx_model_options *o)
{
    if (o) memset(o, 0, sizeof *o);
}

/* The session inputs (docs/CONVENTIONS.md: input_ids, positions, pos) for a flow that
 * declares none: JSON flows, and recipes of ABI 1.0, which could not declare inputs. */
static int add_session_inputs(rlx_flow *f)
{
    int64_t t[1] = {-1}, one[1] = {1};
    int rc = rlx_flow_input(f, "input_ids", RLX_I32, 1, t);
    if (!rc) rc = rlx_flow_input(f, "positions", RLX_I32, 1, t);
    if (!rc) rc = rlx_flow_input(f, "pos", RLX_I32, 1, one);
    if (!rc) rc = rlx_flow_input_fill(f, "positions", RLX_FILL_IOTA);
    if (!rc) rc = rlx_flow_input_fill(f, "pos", RLX_FILL_ZEROS);
    return rc;
}

/* A user's flow (JSON file or built in code): inputs named as docs/CONVENTIONS.md names
 * the session and encoder inputs get those defaults unless the flow says otherwise. */
static void conventional_fills(rlx_flow *f)
{
    static const char *const names[] = {"positions", "pos", "token_type_ids", "attention_mask"};
    static const int fills[] = {RLX_FILL_IOTA, RLX_FILL_ZEROS, RLX_FILL_ZEROS, RLX_FILL_ONES};
    for (uint32_t i = 0; i < f->n_inputs; i++)
        for (size_t k = 0; k < 4; k++)
            if (!f->inputs[i].fill && f->inputs[i].dtype == RLX_I32 && !strcmp(f->inputs[i].name, names[k]))
                f->inputs[i].fill = fills[k];
}

static rlx_model *new_model(void)
{
    rlx_model *m = calloc(1, sizeof *m);
    if (m && pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m);
        return NULL;
    }
    if (m) m->tp_device = -1;
    return m;
}

static int arch_is_1_0(const rlx_arch *a) { return a->struct_size < RLX_STRUCT_SIZE(rlx_arch, configure); }

static int arch_encodes(const rlx_arch *a)
{
    return a && a->struct_size >= RLX_STRUCT_SIZE(rlx_arch, phases) &&
           (a->phases & (1u << RLX_PHASE_ENCODE)) != 0;
}

static void set_policy(rlx_model *m, const rlx_model_options *opt)
{
    for (int k = 0; k < 2; k++) {
        const char *p = opt && opt->policy ? opt->policy : m->profile[k].fusion.policy;
        snprintf(m->policy[k], sizeof m->policy[k], "%s", p && *p ? p : "direct");
    }
}

static int init_backend(rlx_model *m, const rlx_model_options *opt, rlx_diag *d)
{
    rlx_backend_options bo;
    memset(&bo, 0, sizeof bo);
    bo.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_backend_options, graphs);
    bo.threads = opt && opt->threads ? opt->threads : m->profile[0].backend.cpu.threads;
    snprintf(bo.placement, sizeof bo.placement, "%s",
             m->profile[0].backend.cpu.placement[0] ? m->profile[0].backend.cpu.placement : "cores");
    /* a rank's GPU: given, else the profile's backend.cuda.devices[rank], else device rank */
    const int *dl = m->profile[0].backend.cuda.devices, nl = m->profile[0].backend.cuda.n_devices;
    bo.device = m->tp_device >= 0 ? m->tp_device : nl > m->tp_rank ? dl[m->tp_rank]
              : m->tp_ranks > 1 ? m->tp_rank : m->profile[0].backend.cuda.device;
    /* one backend runs both phases: each phase's profile says whether its programs replay graphs */
    int gp = m->profile[0].backend.cuda.graphs, gd = m->profile[1].backend.cuda.graphs;
    bo.graphs = gp && gd ? RLX_GRAPHS_ALL : gd ? RLX_GRAPHS_DECODE : gp ? RLX_GRAPHS_PREFILL : RLX_GRAPHS_NONE;
    m->threads = bo.threads;
    if (!m->be->init) return 0;
    int rc = m->be->init(&bo, &m->be_ctx, d);
    if (rc && d && !d->code) rlx_diag_set(d, rc, "backend %s: init failed", m->be->name);
    return rc;
}

static int check_policy(const rlx_model *m, rlx_diag *d)
{
    for (int k = 0; k < 2; k++)
        if (strcmp(m->policy[k], "direct") && strcmp(m->policy[k], "fusable"))
            return rlx_diag_set(d, RLX_ERR_INVALID, "fusion policy \"%s\": expected direct or fusable", m->policy[k]);
    return 0;
}

RLX_API int rlx_model_from_flow(const rlx_model_spec *spec, const rlx_model_options *opt,
                                rlx_model **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_from_flow: out is NULL");
    *out = NULL;
    if (!spec || !spec->prefill || !spec->backend)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_from_flow: a prefill flow and a backend are required");
    rlx_model *m = new_model();
    if (!m) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    if (spec->config) m->cfg = *spec->config;
    m->cfg.struct_size = (uint32_t)sizeof m->cfg;
    m->weights = spec->weights;
    m->registry = spec->registry;
    m->be = spec->backend;
    m->verbose = opt ? opt->verbose : 0;
    m->progress = opt ? opt->progress : NULL;
    m->progress_user = opt ? opt->progress_user : NULL;
    for (int k = 0; k < 2; k++) {
        if (spec->profile) m->profile[k] = *spec->profile;
        else rlx_profile_defaults(&m->profile[k]);
        rlx_profile *p = &m->profile[k];
        if (opt && opt->precision) snprintf(p->precision.compute, sizeof p->precision.compute, "%s", opt->precision);
        if (opt && opt->mixed) snprintf(p->precision.mixed, sizeof p->precision.mixed, "%s", opt->mixed);
    }
    set_policy(m, opt);
    m->flow[0] = rg_flow_clone(spec->prefill);
    m->flow[1] = rg_flow_clone(spec->decode ? spec->decode : spec->prefill);
    int rc = !m->flow[0] || !m->flow[1] ? rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory") : 0;
    for (int k = 0; k < 2 && !rc; k++) conventional_fills(m->flow[k]);
    if (!rc) rc = check_policy(m, d);
    if (!rc) rc = init_backend(m, opt, d);
    if (rc) {
        rlx_model_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* name.rlx.json in the folder of the plugin that ships arch a, if there is one */
static int arch_profile(const rlx_registry *r, const rlx_arch *a, const char *name, char *out, size_t cap)
{
    for (size_t i = 0; a && i < rlx_registry_count(r); i++) {
        const rlx_plugin_info *pi = rlx_registry_plugin(r, i);
        for (uint32_t k = 0; pi->loaded && k < pi->desc->n_archs; k++) {
            if (pi->desc->archs[k] != a) continue;
            const char *slash = strrchr(pi->path, '/');
            int n = slash ? (int)(slash - pi->path) : 1;
            if (snprintf(out, cap, "%.*s/%s.rlx.json", n, slash ? pi->path : ".", name) >= (int)cap) return 0;
            FILE *f = fopen(out, "r");
            if (f) fclose(f);
            return f != NULL;
        }
    }
    return 0;
}

static int load_profiles(rlx_model *m, const rlx_model_options *opt, rlx_diag *d)
{
    const char *names[2] = {opt->profile, opt->profile};
    if (!opt->profile && m->arch) {
        names[0] = m->arch->default_profile;
        names[1] = m->arch->decode_profile ? m->arch->decode_profile : m->arch->default_profile;
    }
    for (int k = 0; k < 2; k++) {
        rlx_profile_defaults(&m->profile[k]);
        if (names[k] && *names[k]) {
            int rc = rlx_profile_load(names[k], &m->profile[k], d);
            /* a preset the arch's plugin ships next to its .so */
            char own[4200];
            if (rc == RLX_ERR_NOT_FOUND && !strchr(names[k], '/') &&
                arch_profile(m->registry, m->arch, names[k], own, sizeof own)) {
                rlx_diag_init(d);
                rc = rlx_profile_load(own, &m->profile[k], d);
            }
            if (rc) return rc;
        }
        rlx_profile *p = &m->profile[k];
        if (opt->precision) snprintf(p->precision.compute, sizeof p->precision.compute, "%s", opt->precision);
        if (opt->mixed) snprintf(p->precision.mixed, sizeof p->precision.mixed, "%s", opt->mixed);
        if (strcmp(p->precision.compute, "f32") && strcmp(p->precision.compute, "f16") &&
            strcmp(p->precision.compute, "bf16"))
            return rlx_diag_set(d, RLX_ERR_INVALID, "profile %s: precision.compute \"%s\": expected f32, f16 or bf16",
                                names[k] ? names[k] : "(defaults)", p->precision.compute);
        if (strcmp(p->precision.mixed, "none") && strcmp(p->precision.mixed, "auto"))
            return rlx_diag_set(d, RLX_ERR_INVALID, "profile %s: precision.mixed \"%s\": expected none or auto",
                                names[k] ? names[k] : "(defaults)", p->precision.mixed);
    }
    return 0;
}

static int build_flows(rlx_model *m, const rlx_model_options *opt, rlx_diag *d)
{
    m->encoder = arch_encodes(m->arch); /* a flow file for an encoder runs as one too */
    if (opt->flow_file) {
        rlx_flow *f = NULL;
        int rc = rlx_flow_load_json(opt->flow_file, &f, d);
        if (rc) return rc;
        if (!f->n_inputs && add_session_inputs(f)) {
            rlx_flow_free(f);
            return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        }
        conventional_fills(f);
        m->flow[0] = f;
        m->flow[1] = rg_flow_clone(f);
        return m->flow[1] ? 0 : rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    static const int phases[2] = {RLX_PHASE_PREFILL, RLX_PHASE_DECODE};
    for (int k = 0; k < 2; k++) {
        if (k && m->encoder) /* one flow: the second slot is a copy of it */
            return (m->flow[1] = rg_flow_clone(m->flow[0])) ? 0 : rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        rlx_flow *f = rlx_flow_new(m->arch->name);
        if (!f || (!m->encoder && arch_is_1_0(m->arch) && add_session_inputs(f))) {
            rlx_flow_free(f);
            return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        }
        m->flow[k] = f;
        f->config = m->config;
        int rc = m->arch->build_flow(f, m->encoder ? RLX_PHASE_ENCODE : phases[k], &m->cfg, rlx_host_api_get(), d);
        f->config = NULL;
        if (!rc && !f->n_inputs)
            rc = rlx_diag_set(d, RLX_ERR_INVALID, "arch %s: the %s flow declares no inputs (host->flow_input)",
                              m->arch->name, m->encoder ? "encode" : k ? "decode" : "prefill");
        if (!rc && f->err[0]) rc = rlx_diag_set(d, RLX_ERR_INVALID, "arch %s: %s", m->arch->name, f->err);
        if (!rc && f->n_open) rc = rlx_diag_set(d, RLX_ERR_INVALID, "arch %s: flow_repeat_begin without flow_repeat_end", m->arch->name);
        if (rc) {
            if (d && !d->code) rlx_diag_set(d, rc, "arch %s: build_flow failed for the %s phase", m->arch->name, m->encoder ? "encode" : k ? "decode" : "prefill");
            return rc;
        }
    }
    return 0;
}

/* A context of no positions cannot hold a token: refused when the key is given. */
static int check_positions(rlx_model *m, const char *dir, rlx_diag *d)
{
    double v;
    if (rlx_config_number(m->config, "max_position_embeddings", &v) != 0 || v > 0) return 0;
    return rlx_diag_set(d, RLX_ERR_INVALID, "%s/config.json: max_position_embeddings: must be > 0, got %g",
                        dir, v);
}

/* config.json (path: the file or its folder), the plugins, and the arch that owns the model
 * type, which reads the rest of config.json (a --flow file still needs it: its blocks read
 * the description) */
static int open_config(rlx_model *m, const char *path, const char *plugin_path, rlx_diag *d)
{
    int rc = rlx_config_open(path, &m->config, d);
    if (!rc) {
        rc = rlx_registry_open(plugin_path, &m->registry_owned, d);
        m->registry = m->registry_owned;
    }
    if (!rc) rc = rlx_config_configure(m->config, m->registry, &m->arch, d);
    if (!rc) m->cfg = *rlx_config_model(m->config);
    return rc;
}

RLX_API int rlx_model_open(const char *dir, const rlx_model_options *opt_in, rlx_model **out,
                           rlx_diag *d)
{
    return rg_model_open_on(dir, opt_in, -1, 0, 1, out, d);
}

int rg_model_open_on(const char *dir, const rlx_model_options *opt_in, int device, int rank, int ranks,
                     rlx_model **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_open: out is NULL");
    *out = NULL;
    if (!dir) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_open: no model folder");
    rlx_model_options o;
    rlx_model_options_init(&o);
    if (opt_in) o = *opt_in;
    rlx_model *m = new_model();
    if (!m) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    m->tp_device = device;
    m->tp_rank = rank;
    m->tp_ranks = ranks;
    m->verbose = o.verbose;
    m->progress = o.progress;
    m->progress_user = o.progress_user;
    int rc = (m->dir = strdup(dir)) ? 0 : rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    if (!rc) rc = open_config(m, dir, o.plugin_path, d);
    if (!rc) rc = check_positions(m, dir, d);
    if (!rc) rc = rlx_weights_open(dir, &m->weights_owned, d);
    if (!rc) m->weights = m->weights_owned;
    if (!rc) rc = load_profiles(m, &o, d);
    if (!rc) {
        set_policy(m, &o);
        rc = check_policy(m, d);
    }
    if (!rc) {
        const char *name = o.backend;
        if (!name && strcmp(m->profile[0].fusion.target, "auto")) name = m->profile[0].fusion.target;
        m->be = rlx_registry_backend(m->registry, name ? name : "auto", d);
        if (!m->be) rc = d && d->code ? d->code : RLX_ERR_NOT_FOUND;
    }
    if (!rc) rc = rg_model_check_devices(m, o.devices, d);
    if (!rc) rc = init_backend(m, &o, d);
    if (!rc) rc = build_flows(m, &o, d);
    if (rc) {
        rlx_model_close(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* The config's flows built against no checkpoint: the weights their blocks ask for. */
RLX_API int rlx_config_weights(const char *path, const char *plugin_path, rlx_weight_sink sink, void *user,
                               rlx_diag *d)
{
    if (!path || !sink) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_config_weights: no config or no sink");
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.plugin_path = plugin_path;
    rlx_model *m = new_model();
    if (!m) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    int rc = open_config(m, path, plugin_path, d);
    if (!rc) rc = load_profiles(m, &o, d);
    if (!rc) set_policy(m, &o);
    if (!rc) rc = build_flows(m, &o, d);
    rg_graph *g[2] = {NULL, NULL};
    for (int k = 0; k < (m->encoder ? 1 : 2) && !rc; k++) {
        int phase = m->encoder ? RLX_PHASE_ENCODE : k ? RLX_PHASE_DECODE : RLX_PHASE_PREFILL;
        rg_build_env env = rg_model_build_env(m, phase);
        env.record_weights = 1;
        rc = rg_build(&env, m->flow[k], phase, k ? 1 : 2, 2, &g[k], d); /* weights' shapes do not follow T */
    }
    /* each name once, in the order the flows first read them; the two flows must agree */
    for (int k = 0; k < 2 && !rc && g[k]; k++)
        for (uint32_t i = 0; i < g[k]->n_values && !rc; i++) {
            const rg_value *v = &g[k]->values[i];
            if (v->kind != RG_WEIGHT) continue;
            int seen = 0;
            for (uint32_t j = 0; k && j < g[0]->n_values && !seen; j++) {
                const rg_value *u = &g[0]->values[j];
                if (u->kind != RG_WEIGHT || strcmp(u->name, v->name)) continue;
                seen = 1;
                char a[96], b[96];
                if (!rg_shape_eq(&u->shape, &v->shape))
                    rc = rlx_diag_set(d, RLX_ERR_INVALID, "tensor %s: the prefill flow reads %s, the decode flow %s",
                                      v->name, rlx_shape_str(&u->shape, a, sizeof a),
                                      rlx_shape_str(&v->shape, b, sizeof b));
            }
            if (!seen && !rc) rc = sink(user, v->name, &v->shape, d);
        }
    rg_free(g[0]);
    rg_free(g[1]);
    rlx_model_close(m);
    return rc;
}

RLX_API void rlx_model_close(rlx_model *m)
{
    if (!m) return;
    for (uint32_t i = 0; i < m->n_exec; i++) rg_exec_free(m, m->exec[i]);
    free(m->exec);
    rg_pool_free(m);
    if (m->be && m->arena) m->be->free(m->be_ctx, m->arena);
    rg_model_free_weights(m);
    if (m->be && m->be_ctx && m->be->teardown) m->be->teardown(m->be_ctx);
    rlx_flow_free(m->flow[0]);
    rlx_flow_free(m->flow[1]);
    rlx_weights_close(m->weights_owned);
    rlx_config_free(m->config);
    rlx_registry_close(m->registry_owned);
    free(m->dir);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

RLX_API const rlx_model_config *rlx_model_get_config(const rlx_model *m) { return m ? &m->cfg : NULL; }
RLX_API const char *rlx_model_backend_name(const rlx_model *m) { return m && m->be ? m->be->name : NULL; }
RLX_API const rlx_profile *rlx_model_get_profile(const rlx_model *m, int phase)
{
    return m ? &m->profile[phase == RLX_PHASE_DECODE ? 1 : 0] : NULL;
}
RLX_API int rlx_model_compiled_count(const rlx_model *m)
{
    if (!m) return 0;
    pthread_mutex_t *mu = (pthread_mutex_t *)&m->mu; /* a read of state the lock guards */
    pthread_mutex_lock(mu);
    int n = (int)m->n_exec;
    pthread_mutex_unlock(mu);
    return n;
}

RLX_API int rlx_model_threads(const rlx_model *m)
{
    if (!m) return 0;
    if (m->threads > 0) return m->threads;
    rlx_topology t;
    memset(&t, 0, sizeof t);
    t.struct_size = (uint32_t)sizeof t;
    const char *pl = m->profile[0].backend.cpu.placement[0] ? m->profile[0].backend.cpu.placement : "cores";
    return rlx__topology_query(&t, 0, pl) == 0 ? t.n_workers : 0;
}

RLX_API int rlx_model_dump_flow(rlx_model *m, FILE *out, rlx_diag *d)
{
    if (!m || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_dump_flow: no model or stream");
    fprintf(out, "# prefill\n");
    rlx_flow_print(m->flow[0], out);
    fprintf(out, "# decode\n");
    rlx_flow_print(m->flow[1], out);
    return 0;
}

RLX_API int rlx_model_dump_flow_json(rlx_model *m, FILE *out, rlx_diag *d)
{
    if (!m || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_dump_flow_json: no model or stream");
    json_t *pre = rg_flow_to_json(m->flow[0], d), *dec = pre ? rg_flow_to_json(m->flow[1], d) : NULL;
    int rc = dec ? 0 : d && d->code ? d->code : RLX_ERR_NOMEM;
    if (!rc && !json_equal(pre, dec)) {
        /* one file holds one input list; each phase keeps its own stages */
        if (!json_equal(json_object_get(pre, "inputs"), json_object_get(dec, "inputs")))
            rc = rlx_diag_set(d, RLX_ERR_UNSUPPORTED,
                              "flow %s: the prefill and decode flows declare different inputs, which one "
                              "JSON flow cannot hold", m->flow[0]->name);
        json_t *w[2] = {json_pack("{s:s,s:O}", "when", "phase=prefill", "stages", json_object_get(pre, "stages")),
                        json_pack("{s:s,s:O}", "when", "phase=decode", "stages", json_object_get(dec, "stages"))};
        if (!rc && (!w[0] || !w[1] || json_object_set_new(pre, "stages", json_pack("[OO]", w[0], w[1]))))
            rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        json_decref(w[0]);
        json_decref(w[1]);
    }
    if (!rc && rg_flow_json_write(pre, out))
        rc = rlx_diag_set(d, RLX_ERR_IO, "flow %s: writing the JSON failed", m->flow[0]->name);
    json_decref(pre);
    json_decref(dec);
    return rc;
}

int64_t rg_default_ctx(const rlx_model *m)
{
    int64_t c = m->cfg.max_position_embeddings;
    return c > 0 && c < 4096 ? c : 4096;
}

RLX_API int rlx_model_dump_graph(rlx_model *m, int phase, int64_t seq_len, FILE *out, rlx_diag *d)
{
    if (!m || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_dump_graph: no model or stream");
    if (phase < RLX_PHASE_PREFILL || phase > RLX_PHASE_ENCODE)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_dump_graph: unknown phase %d", phase);
    if (seq_len < 1)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_dump_graph: sequence length %lld", (long long)seq_len);
    int dec = phase == RLX_PHASE_DECODE;
    int64_t ctx = rg_default_ctx(m);
    if (!dec && ctx < seq_len) ctx = seq_len; /* a decode row is one position of its own sequence */
    rg_exec *e;
    pthread_mutex_lock(&m->mu);
    /* n > 1 decode rows: the program n sessions decoding together run (rlx_session_decode_batch),
     * on a pool of exactly n cache slots; none is made, as no session's states are */
    int rc = dec && seq_len > 1 ? rg_batch_exec(m, seq_len, seq_len, ctx, &e, d)
                                : rg_model_exec(m, phase, dec ? 1 : seq_len, ctx, &e, d);
    if (!rc) rg_exec_dump(e, out);
    pthread_mutex_unlock(&m->mu);
    return rc;
}
