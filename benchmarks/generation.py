"""Generation with a key/value cache: one new token of a GPT-2-style decoder after 256
cached tokens, myelin (examples/generate.py: the cache stays in the instance) against ONNX
Runtime and PyTorch eager running the same decoder with past keys and values as inputs
(and the presents as outputs), all with the same random weights.

Run: ``python benchmarks/generation.py [--layers N] [--dim D] [--heads H] [--vocab V]
[--cached T] [--threads N] [--weights bfloat16|float16]`` (``--weights``: myelin keeps its
products' weights in that type, the others float32); the default is GPT-2 small's size (12 layers, 768 wide, 12
heads, 50257 tokens), whose step reads about 500 MB of weights: it is bound by memory
bandwidth on every system. It first checks that the three agree on the logits of an
8-token prompt, then times a step at position ``--cached``. Needs torch and onnxruntime.
"""

import argparse
import io
import math
import os
import sys
import warnings

import numpy as np

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import generate  # noqa: E402
from common import compare, ort_session  # noqa: E402


def torch_decoder(config, weights):
    """A torch module: (token [1], position [1], past_k, past_v [layers, heads, t, head_dim])
    -> (logits [1, vocab], present_k, present_v [layers, heads, t + 1, head_dim])."""
    import torch

    w = {key: torch.from_numpy(value) for key, value in weights.items()}
    c = config

    def linear(x, name):
        return x @ w[name + ".weight"] + w[name + ".bias"]

    def norm(x, name):
        return torch.nn.functional.layer_norm(x, (c.dim,), w[name + ".weight"],
                                              w[name + ".bias"], c.epsilon)

    class Decoder(torch.nn.Module):
        def forward(self, token, position, past_k, past_v):
            x = w["wte"][token] + w["wpe"][position]
            keys, values = [], []
            for layer in range(c.layers):
                p = f"h.{layer}."
                q, k, v = linear(norm(x, p + "ln_1"), p + "attn.c_attn").split(c.dim, dim=1)
                k = torch.cat([past_k[layer], k.reshape(c.heads, 1, c.head_dim)], 1)
                v = torch.cat([past_v[layer], v.reshape(c.heads, 1, c.head_dim)], 1)
                keys.append(k)
                values.append(v)
                scores = q.reshape(c.heads, 1, c.head_dim) @ k.transpose(1, 2)
                probs = torch.softmax(scores / math.sqrt(c.head_dim), -1)
                x = x + linear((probs @ v).reshape(1, c.dim), p + "attn.c_proj")
                hidden = torch.nn.functional.gelu(linear(norm(x, p + "ln_2"), p + "mlp.c_fc"),
                                                  approximate="tanh")
                x = x + linear(hidden, p + "mlp.c_proj")
            return norm(x, "ln_f") @ w["wte"].T, torch.stack(keys), torch.stack(values)

    return Decoder().eval()


def export(module, config):
    """ONNX bytes of the torch decoder, the cached length a dynamic axis."""
    import torch

    past = torch.zeros(config.layers, config.heads, 3, config.head_dim)
    example = (torch.tensor([1]), torch.tensor([3]), past, past)
    axes = {"past_k": {2: "past"}, "past_v": {2: "past"}, "present_k": {2: "total"},
            "present_v": {2: "total"}}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, buffer, dynamo=False, opset_version=17,
                          input_names=["token", "position", "past_k", "past_v"],
                          output_names=["logits", "present_k", "present_v"],
                          dynamic_axes=axes)
    return buffer.getvalue()


def main(argv=None):
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = generate.GptConfig()
    for field in ("layers", "dim", "heads", "vocab"):
        parser.add_argument(f"--{field}", type=int, default=getattr(defaults, field))
    parser.add_argument("--cached", type=int, default=256, help="tokens in the cache")
    parser.add_argument("--threads", type=int, default=None, help="default: all cores")
    parser.add_argument("--weights", choices=("bfloat16", "float16"), default=None,
                        help="myelin's weight storage (default float32)")
    args = parser.parse_args(argv)
    config = generate.GptConfig(vocab=args.vocab, max_len=args.cached + 1, layers=args.layers,
                                dim=args.dim, heads=args.heads)
    weights = generate.random_weights(config)
    decoder = generate.Decoder(config, weights, threads=args.threads, weights=args.weights)
    module = torch_decoder(config, weights)
    session = ort_session(export(module, config), args.threads)
    if args.threads:
        torch.set_num_threads(args.threads)

    def step_ort(token, position, past_k, past_v):
        return session.run(None, {"token": np.array([token]), "position": np.array([position]),
                                  "past_k": past_k, "past_v": past_v})

    # The three agree on the logits of a prompt.
    empty = np.zeros((config.layers, config.heads, 0, config.head_dim), np.float32)
    past_k = past_v = empty
    prompt = np.random.default_rng(1).integers(0, config.vocab, 8)
    worst = {"onnxruntime": 0.0, "pytorch": 0.0}
    with torch.no_grad():
        for position, token in enumerate(prompt):
            ours = decoder.step(token).copy()
            logits, past_k, past_v = step_ort(token, position, past_k, past_v)
            eager = module(torch.tensor([token]), torch.tensor([position]),
                           torch.from_numpy(past_k[:, :, :-1]),
                           torch.from_numpy(past_v[:, :, :-1]))[0].numpy()
            scale = np.abs(logits).max()
            worst["onnxruntime"] = max(worst["onnxruntime"],
                                       np.abs(ours - logits[0]).max() / scale)
            worst["pytorch"] = max(worst["pytorch"], np.abs(ours - eager[0]).max() / scale)
    print("largest difference of the logits, relative to their largest magnitude:",
          ", ".join(f"{name} {value:.1e}" for name, value in worst.items()))

    # A step at position --cached, the cache holding that many tokens (any values).
    rng = np.random.default_rng(2)
    cache = rng.standard_normal((2, config.layers, config.heads, args.cached,
                                 config.head_dim)).astype(np.float32)
    torch_cache = torch.from_numpy(cache)

    def myelin_step():
        decoder.length = args.cached
        decoder.step(7)

    def eager_step():
        with torch.no_grad():
            module(torch.tensor([7]), torch.tensor([args.cached]), torch_cache[0], torch_cache[1])

    size = f"{config.layers} layers, {config.dim} wide, vocab {config.vocab}"
    compare(f"one token after {args.cached} cached ({size})",
            {"myelin": myelin_step,
             "onnxruntime": lambda: step_ort(7, args.cached, cache[0], cache[1]),
             "pytorch": eager_step}, min_seconds=2)


if __name__ == "__main__":
    main()
