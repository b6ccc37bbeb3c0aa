"""Token-by-token generation with a GPT-2-style decoder whose key/value cache stays in the
cell instance between calls.

The decoder is built with the Builder: one step takes a token and its position and returns
the next token's logits. Each layer's keys and values of every position so far live in two
inputs of the cell, ``k{layer}`` and ``v{layer}`` [heads, max_len, head_dim], which the
caller never touches: the step writes the new token's key and value into them
(``Assign(cache, ScatterND(cache, ...))``, done in place: only that slot is written) and
attends over the slots up to its position (the later ones are masked off). An instance is
one sequence; ``Decoder.reset`` starts another, and several instances of the cell decode
several sequences at once.

Run: ``python examples/generate.py [--layers N] [--dim D] [--heads H] [--vocab V]
[--max-len T] [--tokens N]``; with no arguments, a GPT-2-small-sized decoder (12 layers,
768 wide, 12 heads, 50257 tokens) with random weights generates 32 tokens after a 16-token
prompt and prints the time per token. The weights are named as in GPT-2 (``wte``, ``wpe``,
``h.{layer}.attn.c_attn.weight``, ...; linear weights are [in, out]), so a GPT-2
checkpoint's arrays load as they are.
"""

import argparse
import dataclasses
import math
import time

import numpy as np

import myelin


@dataclasses.dataclass(frozen=True)
class GptConfig:
    """The sizes of a GPT-2-style decoder."""

    vocab: int = 50257
    max_len: int = 1024
    layers: int = 12
    dim: int = 768
    heads: int = 12
    epsilon: float = 1e-5

    def __post_init__(self):
        if self.dim % self.heads:
            raise ValueError(f"dim {self.dim} is not a multiple of heads {self.heads}")

    @property
    def head_dim(self):
        return self.dim // self.heads


def random_weights(config, seed=0):
    """GPT-2-named float32 weights of ``config``, drawn as GPT-2 initializes them."""
    rng = np.random.default_rng(seed)
    d = config.dim

    def normal(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    weights = {"wte": normal(config.vocab, d), "wpe": normal(config.max_len, d),
               "ln_f.weight": np.ones(d, np.float32), "ln_f.bias": np.zeros(d, np.float32)}
    for layer in range(config.layers):
        p = f"h.{layer}."
        weights.update({
            p + "ln_1.weight": np.ones(d, np.float32), p + "ln_1.bias": np.zeros(d, np.float32),
            p + "attn.c_attn.weight": normal(d, 3 * d), p + "attn.c_attn.bias": normal(3 * d),
            p + "attn.c_proj.weight": normal(d, d), p + "attn.c_proj.bias": normal(d),
            p + "ln_2.weight": np.ones(d, np.float32), p + "ln_2.bias": np.zeros(d, np.float32),
            p + "mlp.c_fc.weight": normal(d, 4 * d), p + "mlp.c_fc.bias": normal(4 * d),
            p + "mlp.c_proj.weight": normal(4 * d, d), p + "mlp.c_proj.bias": normal(d)})
    return weights


def build_step(config, weights, name="gpt"):
    """A flow with function ``name``: inputs ``token`` and ``position`` (int32 [1]) and the
    caches ``k{layer}``/``v{layer}``; output ``logits`` [1, vocab]."""
    c = config
    flow = myelin.Flow()
    f = myelin.Builder(flow, name)

    arrays = {}

    def w(key):
        if key not in arrays:
            arrays[key] = f.array(key, weights[key])
        return arrays[key]

    def linear(x, prefix):
        return f.add(f.matmul(x, w(prefix + ".weight")), w(prefix + ".bias"))

    def norm(x, prefix):
        return f.layer_norm(x, w(prefix + ".weight"), w(prefix + ".bias"), epsilon=c.epsilon)

    token = f.var("token", myelin.DT_INT32, [1])
    position = f.var("position", myelin.DT_INT32, [1])
    # The cache slot of each head at the position: rows (head, position).
    heads = f.const(np.stack([np.arange(c.heads), np.zeros(c.heads)], 1).astype(np.int32))
    slot = f.add(heads, f.mul(position, f.const(np.array([0, 1], np.int32))))
    # Scores of the slots after the position get -inf.
    later = f.op("Greater", [f.const(np.arange(c.max_len, dtype=np.int32)), position])
    mask = f.select(later, f.const(np.float32(-np.inf)))
    scale = f.const(np.float32(1 / math.sqrt(c.head_dim)))

    x = f.add(f.gather(w("wte"), token), f.gather(w("wpe"), position))       # [1, dim]
    for layer in range(c.layers):
        p = f"h.{layer}."
        q, k, v = f.split(linear(norm(x, p + "ln_1"), p + "attn.c_attn"), 3, axis=1)
        caches = []
        for value, cache_name in [(k, f"k{layer}"), (v, f"v{layer}")]:
            cache = f.var(cache_name, myelin.DT_FLOAT, [c.heads, c.max_len, c.head_dim])
            written = f.op("ScatterND", [cache, slot, f.reshape(value, [c.heads, c.head_dim])])
            f.assign(cache, written)
            caches.append(written)
        q = f.reshape(q, [c.heads, 1, c.head_dim])
        scores = f.add(f.mul(f.matmul(q, caches[0], transpose_b=True), scale), mask)
        attended = f.reshape(f.matmul(f.softmax(scores), caches[1]), [1, c.dim])
        x = f.add(x, linear(attended, p + "attn.c_proj"))
        hidden = f.gelu(linear(norm(x, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh")
        x = f.add(x, linear(hidden, p + "mlp.c_proj"))
    f.matmul(norm(x, "ln_f"), w("wte"), transpose_b=True, name="logits")
    return flow


class Decoder:
    """A compiled decoder step and one sequence's instance (its key/value cache), for
    ``config`` with the arrays ``parameters`` (:func:`random_weights`' names); the compiler
    options (``threads``, ``weights="bfloat16"``, ...) go to the compiler."""

    def __init__(self, config, parameters, /, **compiler_options):
        self.config = config
        self.network = myelin.Compiler(**compiler_options).compile(
            build_step(config, parameters))
        self.cell = self.network.cell("gpt")
        self.instance = self.cell.instance()
        self.token, self.position, self.logits = (
            self.instance.tensor(f"gpt/{name}").numpy() for name in ("token", "position", "logits"))
        self.length = 0

    def reset(self):
        """Start a new sequence (the cache's old slots are masked off as they are rewritten)."""
        self.length = 0

    def step(self, token):
        """The logits [vocab] after ``token`` at the next position (a view, overwritten by
        the next step)."""
        if self.length >= self.config.max_len:
            raise myelin.InputError(f"the sequence is full: max_len {self.config.max_len}")
        self.token[0] = token
        self.position[0] = self.length
        self.instance.compute()
        self.length += 1
        return self.logits[0]

    def generate(self, prompt, count):
        """``count`` tokens chosen greedily after the tokens of ``prompt``."""
        self.reset()
        for token in prompt[:-1]:
            self.step(token)
        tokens, token = [], prompt[-1]
        for _ in range(count):
            token = int(np.argmax(self.step(token)))
            tokens.append(token)
        return tokens


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = GptConfig()
    for field in ("layers", "dim", "heads", "vocab"):
        parser.add_argument(f"--{field}", type=int, default=getattr(defaults, field))
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    parser.add_argument("--tokens", type=int, default=32, help="tokens to generate")
    args = parser.parse_args(argv)
    config = GptConfig(vocab=args.vocab, max_len=args.max_len, layers=args.layers,
                       dim=args.dim, heads=args.heads)
    start = time.perf_counter()
    decoder = Decoder(config, random_weights(config))
    print(f"compiled in {time.perf_counter() - start:.2f} s")
    prompt = list(np.random.default_rng(1).integers(0, config.vocab, args.prompt))
    start = time.perf_counter()
    tokens = decoder.generate(prompt, args.tokens)
    seconds = time.perf_counter() - start
    print("generated:", tokens)
    print(f"{seconds / (args.prompt - 1 + args.tokens) * 1e3:.2f} ms per token")


if __name__ == "__main__":
    main()
