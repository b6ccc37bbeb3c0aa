"""transformers architectures built from small configs with seeded random weights (no hub):
encoders (BERT, DistilBERT, RoBERTa, ALBERT, ELECTRA, DeBERTa-v2, MobileBERT), decoders
(GPT-2, BLOOM, Llama, Qwen2, Phi), T5 (encoder, and one encoder-decoder step), the Whisper
encoder, wav2vec 2.0, Swin and SegFormer."""

import torch

from zoo import exporting
from zoo.catalog import Input, Model, add

VOCAB = 8000


class _Wrapper(torch.nn.Module):
    """The model called with its inputs by keyword, giving one named output tensor."""

    def __init__(self, model, names, output):
        super().__init__()
        self.model, self.names, self.output = model, names, output

    def forward(self, *args):
        return getattr(self.model(**dict(zip(self.names, args))), self.output)


def module(model, attention="eager"):
    """The model as a PyTorch module in eval mode (seeded random weights) taking its inputs
    positionally and giving one tensor, and example arguments, as :func:`build` exports it;
    ``attention`` is the configuration's attention implementation ("eager", "sdpa")."""
    exporting.import_torchvision()       # transformers may import it
    import transformers

    options = model.options
    exporting.seed()
    config = getattr(transformers, options["config"])(**options["config_kwargs"])
    config._attn_implementation = attention
    net = getattr(transformers, options["model"])(config)
    if options.get("part") == "encoder":
        net = net.get_encoder()
    if options.get("use_cache") is False:
        net.config.use_cache = False          # no key/value cache among the outputs
    wrapper = _Wrapper(net.eval(), options["names"], options.get("output", "last_hidden_state"))
    return wrapper.eval(), tuple(_example(spec) for spec in model.inputs)


def build(model, path):
    options = model.options
    names = options["names"]
    wrapper, args = module(model)
    dynamic = options.get("dynamic")
    dynamic_axes = dynamic_shapes = None
    if dynamic and options.get("dynamo"):
        dims = {axis: torch.export.Dim(label, min=2, max=256) for axis, label in dynamic.items()}
        dynamic_shapes = (tuple(dims for _ in names),)     # forward(*args): one entry
    elif dynamic:
        dynamic_axes = {name: dynamic for name in names + ["output"]}
    how = exporting.export(wrapper, args, path, names, ["output"], dynamic_axes=dynamic_axes,
                           dynamo=options.get("dynamo", False), dynamic_shapes=dynamic_shapes)
    shapes = ", ".join(f"{n} {list(s.shape)}" for n, s in zip(names, model.inputs))
    extra = f", dynamic axes {sorted(dynamic.values())}" if dynamic else ""
    return f"transformers {options['model']} ({shapes}), small config, random weights, {how}{extra}"


def _example(spec):
    if spec.kind == "tokens":
        return torch.randint(0, spec.high, spec.shape)
    if spec.kind == "mask":
        return torch.ones(spec.shape, dtype=torch.int64)
    return torch.randn(spec.shape)


def text(name, config, model_class, config_kwargs, batch=1, seq=128, mask=True, fast=False,
         **options):
    inputs = [Input("tokens", (batch, seq), "int64", high=config_kwargs.get("vocab_size", VOCAB))]
    names = ["input_ids"]
    if mask:
        inputs.append(Input("mask", (batch, seq), "int64"))
        names.append("attention_mask")
    for extra, spec in options.pop("extra_inputs", {}).items():
        inputs.append(spec)
        names.append(extra)
    return add(Model(name, "transformers", build, tuple(inputs),
                     dict(config=config, model=model_class, config_kwargs=config_kwargs,
                          names=names, **options), fast=fast, transformer=True))


ENCODER = dict(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
               intermediate_size=1024, max_position_embeddings=512)
DECODER = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
               num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512)

# Encoders.
text("bert_tiny", "BertConfig", "BertModel",
     dict(ENCODER, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
          intermediate_size=512), seq=32, fast=True)
text("bert", "BertConfig", "BertModel", ENCODER)
text("bert_dynamic", "BertConfig", "BertModel", ENCODER, batch=2, seq=48,
     dynamic={0: "batch", 1: "sequence"})
text("distilbert", "DistilBertConfig", "DistilBertModel",
     dict(vocab_size=VOCAB, dim=256, n_layers=3, n_heads=4, hidden_dim=1024))
text("roberta", "RobertaConfig", "RobertaModel", ENCODER)
text("albert", "AlbertConfig", "AlbertModel", dict(ENCODER, embedding_size=128))
text("electra", "ElectraConfig", "ElectraModel", dict(ENCODER, embedding_size=128))
text("deberta_v2", "DebertaV2Config", "DebertaV2Model",
     dict(ENCODER, num_hidden_layers=2, relative_attention=True, position_buckets=64,
          pos_att_type=["p2c", "c2p"], max_relative_positions=-1))
text("mobilebert", "MobileBertConfig", "MobileBertModel",
     dict(vocab_size=VOCAB, num_hidden_layers=4))
# Decoders.
text("gpt2", "GPT2Config", "GPT2LMHeadModel",
     dict(vocab_size=VOCAB, n_positions=256, n_embd=256, n_layer=4, n_head=4), seq=64,
     output="logits", use_cache=False)
text("gpt2_dynseq", "GPT2Config", "GPT2LMHeadModel",
     dict(vocab_size=VOCAB, n_positions=256, n_embd=256, n_layer=4, n_head=4), seq=40,
     output="logits", use_cache=False, dynamic={1: "sequence"})
text("bloom", "BloomConfig", "BloomForCausalLM",
     dict(vocab_size=VOCAB, hidden_size=256, n_layer=4, n_head=4), seq=64, output="logits",
     use_cache=False)
text("llama", "LlamaConfig", "LlamaForCausalLM", DECODER, seq=64, output="logits",
     use_cache=False)
text("llama_dynamo", "LlamaConfig", "LlamaForCausalLM", DECODER, seq=64, output="logits",
     use_cache=False, dynamo=True, dynamic={1: "sequence"})
text("qwen2", "Qwen2Config", "Qwen2ForCausalLM", DECODER, seq=64, output="logits",
     use_cache=False)
text("phi", "PhiConfig", "PhiForCausalLM",
     dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
          num_attention_heads=4, partial_rotary_factor=0.5), seq=64, output="logits",
     use_cache=False)
# T5.
T5 = dict(vocab_size=VOCAB, d_model=256, d_kv=32, d_ff=1024, num_layers=4, num_heads=8,
          decoder_start_token_id=0)
text("t5_encoder", "T5Config", "T5EncoderModel", T5, seq=64)
text("t5_step", "T5Config", "T5ForConditionalGeneration", T5, seq=64, output="logits",
     use_cache=False,
     extra_inputs={"decoder_input_ids": Input("tokens", (1, 8), "int64", high=VOCAB)})
# Audio.
add(Model("whisper_encoder", "transformers", build,
          (Input("float", (1, 80, 500)),),
          dict(config="WhisperConfig", model="WhisperModel", part="encoder",
               names=["input_features"],
               config_kwargs=dict(vocab_size=1000, d_model=256, encoder_layers=2,
                                  decoder_layers=2, encoder_attention_heads=4,
                                  decoder_attention_heads=4, encoder_ffn_dim=1024,
                                  decoder_ffn_dim=1024, num_mel_bins=80,
                                  max_source_positions=250, pad_token_id=0, bos_token_id=1,
                                  eos_token_id=2, decoder_start_token_id=1)),
          transformer=True))
add(Model("wav2vec2", "transformers", build, (Input("audio", (1, 16000)),),
          dict(config="Wav2Vec2Config", model="Wav2Vec2Model", names=["input_values"],
               config_kwargs=dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=1024,
                                  conv_dim=(256, 256, 256, 256, 256, 256, 256),
                                  num_conv_pos_embeddings=64)),
          transformer=True))
# Vision.
add(Model("hf_swin_tiny", "transformers", build, (Input("image", (1, 3, 224, 224)),),
          dict(config="SwinConfig", model="SwinModel", names=["pixel_values"],
               config_kwargs=dict(image_size=224, embed_dim=96, depths=[2, 2, 6, 2],
                                  num_heads=[3, 6, 12, 24])),
          transformer=True))
add(Model("segformer", "transformers", build, (Input("image", (1, 3, 256, 256)),),
          dict(config="SegformerConfig", model="SegformerForSemanticSegmentation",
               names=["pixel_values"], output="logits", config_kwargs=dict(num_labels=19)),
          transformer=True))
