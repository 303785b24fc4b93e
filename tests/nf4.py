"""Whether this machine's bitsandbytes trains through NF4 layers, decided as training decides it: a rollout's pass without
gradients, then an update's backward through the whole model. The answer depends on the bitsandbytes build and the
device (its CPU path may repack a weight on the first pass and then raise, or give no gradient), so a test that expects
`load_model(..., load_in_4bit=True, lora=...)` to refuse or to load asks this first: one probe, one source of truth,
independent of `mapg.models.check_4bit_grads` (which it checks)."""
import torch

def nf4_trains(m, x:torch.Tensor)->bool:
    "Whether a rollout pass of `m` (an `MDLM` loaded with `load_in_4bit`, no LoRA) on ids `x`, then a backward, reaches every NF4 layer's input with a nonzero gradient"
    with torch.no_grad(): m.logits(x)                                          # the rollout's pass
    xs = []
    hooks = [mod.register_forward_pre_hook(lambda mod, a: xs.append(a[0]) or a[0].retain_grad())
             for mod in m.model.modules() if type(mod).__name__ == 'Linear4bit']
    assert hooks, "no NF4 layer in the model"
    m.model.get_input_embeddings().weight.requires_grad_(True)
    try:
        with torch.enable_grad(): m.logits(x).float().logsumexp(-1).sum().backward()
        return all(a.grad is not None and bool(torch.isfinite(a.grad).all()) and bool(a.grad.abs().sum() > 0) for a in xs)
    except RuntimeError: return False
    finally:
        for h in hooks: h.remove()
