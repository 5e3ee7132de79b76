# The LLaMA-3-8B-width model of the tp-speed rows: random bf16 weights (std 0.02, seed 1),
# unit norms, made on the GPU. usage: make-8b-model.py CONFIG OUTDIR
import json, os, shutil, sys, torch
from safetensors.torch import save_file
cfg, out = sys.argv[1], sys.argv[2]
c = json.load(open(cfg)); os.makedirs(out, exist_ok=True); shutil.copy(cfg, out + "/config.json")
H, I, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
hd = c.get("head_dim") or H // c["num_attention_heads"]
q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
g = torch.Generator(device="cuda").manual_seed(1)
r = lambda *s: (torch.randn(*s, generator=g, device="cuda") * 0.02).to(torch.bfloat16).cpu()
one = lambda n: torch.ones(n, dtype=torch.bfloat16)
t = {"model.embed_tokens.weight": r(V, H), "model.norm.weight": one(H), "lm_head.weight": r(V, H)}
for i in range(L):
    p = f"model.layers.{i}."
    t.update({p + "input_layernorm.weight": one(H), p + "post_attention_layernorm.weight": one(H),
              p + "self_attn.q_proj.weight": r(q, H), p + "self_attn.k_proj.weight": r(kv, H),
              p + "self_attn.v_proj.weight": r(kv, H), p + "self_attn.o_proj.weight": r(H, q),
              p + "mlp.gate_proj.weight": r(I, H), p + "mlp.up_proj.weight": r(I, H),
              p + "mlp.down_proj.weight": r(H, I)})
save_file(t, out + "/model.safetensors")
print("wrote", sum(v.numel() for v in t.values()), "parameters")
