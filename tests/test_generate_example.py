"""examples/generate.py: the GPT-2-style decoder whose key/value cache stays in the instance
gives, token by token, the logits of a float64 GPT-2 run over the whole sequence so far."""

import math
import os
import sys

import numpy as np
import pytest

import myelin

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import generate  # noqa: E402

CONFIG = generate.GptConfig(vocab=97, max_len=24, layers=2, dim=32, heads=4)


def layer_norm(x, gamma, beta, epsilon):
    centered = x - x.mean(-1, keepdims=True)
    return centered / np.sqrt((centered ** 2).mean(-1, keepdims=True) + epsilon) * gamma + beta


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def reference_logits(config, weights, tokens):
    """The float64 logits after each of ``tokens``, attention causal over the sequence."""
    w = {key: value.astype(np.float64) for key, value in weights.items()}
    t, h, hd = len(tokens), config.heads, config.head_dim
    x = w["wte"][tokens] + w["wpe"][:t]
    causal = np.triu(np.full((t, t), -np.inf), 1)

    def linear(v, name):
        return v @ w[name + ".weight"] + w[name + ".bias"]

    for layer in range(config.layers):
        p = f"h.{layer}."
        a = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], config.epsilon)
        q, k, v = (part.reshape(t, h, hd).transpose(1, 0, 2)
                   for part in np.split(linear(a, p + "attn.c_attn"), 3, axis=1))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + causal
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        x = x + linear((probs @ v).transpose(1, 0, 2).reshape(t, -1), p + "attn.c_proj")
        m = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], config.epsilon)
        x = x + linear(gelu_tanh(linear(m, p + "mlp.c_fc")), p + "mlp.c_proj")
    return layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], config.epsilon) @ w["wte"].T


@pytest.fixture(scope="module")
def weights():
    weights = generate.random_weights(CONFIG, seed=3)
    rng = np.random.default_rng(4)
    for key in weights:                 # non-trivial norms
        if ".weight" in key and "ln" in key:
            weights[key] = rng.uniform(0.5, 1.5, weights[key].shape).astype(np.float32)
    return weights


@pytest.mark.parametrize("threads", [1, 2])
def test_steps_match_the_whole_sequence(weights, threads):
    decoder = generate.Decoder(CONFIG, weights, threads=threads)
    tokens = list(np.random.default_rng(5).integers(0, CONFIG.vocab, CONFIG.max_len))
    expected = reference_logits(CONFIG, weights, tokens)
    for sequence in range(2):           # a second sequence reuses the instance's cache
        decoder.reset()
        length = CONFIG.max_len if sequence == 0 else 5
        for position in range(length):
            logits = decoder.step(tokens[position])
            np.testing.assert_allclose(logits, expected[position], rtol=1e-4, atol=1e-5)


def test_cache_is_written_in_place(weights):
    """Each cache update is done by its ScatterND writing one slot into the cache input: no
    Assign step and no copy of the cache is left."""
    decoder = generate.Decoder(CONFIG, weights)
    steps = [s for s in decoder.cell.steps if not s.noop]
    assert not [s for s in steps if s.type == "Assign"]
    scatters = [s for s in steps if s.type == "ScatterND"]
    assert len(scatters) == 2 * CONFIG.layers
    for step in scatters:
        assert step.outputs[0].root() is step.inputs[0]


def test_generate_is_greedy_and_bad_steps_are_errors(weights):
    decoder = generate.Decoder(CONFIG, weights)
    prompt = [1, 2, 3]
    tokens = decoder.generate(prompt, 4)
    expected = reference_logits(CONFIG, weights, prompt + tokens[:-1]).argmax(-1)[2:]
    assert tokens == list(expected)
    with pytest.raises(myelin.InputError, match="out of range"):
        decoder.step(CONFIG.vocab)      # a token outside the vocabulary
    decoder.reset()
    for _ in range(CONFIG.max_len):
        decoder.step(0)
    with pytest.raises(myelin.InputError, match="full"):
        decoder.step(0)
