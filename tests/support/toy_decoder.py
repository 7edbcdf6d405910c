"""A decoder no library knows: a Llama-like model with every module renamed, and a model_type
("toy_decoder") that has no weightgraft adapter, so that inference is what makes it graftable.

Learned position embeddings (a model-level module called with position ids), RMS norms before
attention and MLP, grouped-query attention with a KV cache, a gated MLP, a final norm and an
untied unembedding. `extra_parameter=True` adds a per-head temperature inside the attention: a
parameter no canonical component takes, which inference must refuse by name.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast


class ToyConfig(PretrainedConfig):
    model_type = "toy_decoder"

    def __init__(
        self,
        vocab_size: int = 151,
        hidden_size: int = 32,
        num_hidden_layers: int = 3,
        num_attention_heads: int = 4,
        num_key_value_heads: int = 2,
        intermediate_size: int = 48,
        max_position_embeddings: int = 64,
        extra_parameter: bool = False,
        **kwargs,
    ):
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        self.num_attention_heads, self.num_key_value_heads = num_attention_heads, num_key_value_heads
        self.intermediate_size, self.max_position_embeddings = intermediate_size, max_position_embeddings
        self.extra_parameter = extra_parameter
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)


class Scale(nn.Module):
    """RMS norm with a learned gain."""

    def __init__(self, width: int):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.gain


class Mixer(nn.Module):
    def __init__(self, config: ToyConfig, index: int):
        super().__init__()
        self.index, self.heads, self.groups = index, config.num_attention_heads, config.num_key_value_heads
        self.size = config.hidden_size // self.heads
        self.ask = nn.Linear(config.hidden_size, self.heads * self.size)
        self.offer = nn.Linear(config.hidden_size, self.groups * self.size)
        self.carry = nn.Linear(config.hidden_size, self.groups * self.size)
        self.emit = nn.Linear(self.heads * self.size, config.hidden_size, bias=False)
        if config.extra_parameter:
            self.temperature = nn.Parameter(torch.ones(self.heads))

    def forward(self, x, allowed, cache=None):
        batch, length, _ = x.shape
        q = self.ask(x).view(batch, length, self.heads, self.size).transpose(1, 2)
        k = self.offer(x).view(batch, length, self.groups, self.size).transpose(1, 2)
        v = self.carry(x).view(batch, length, self.groups, self.size).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v, self.index)
        repeat = self.heads // self.groups
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        scores = q @ k.transpose(-1, -2) / self.size**0.5
        if hasattr(self, "temperature"):
            scores = scores * self.temperature[None, :, None, None]
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, -1)
        return self.emit(out)


class Feed(nn.Module):
    def __init__(self, config: ToyConfig):
        super().__init__()
        self.valve = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.widen = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.narrow = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.narrow(nn.functional.silu(self.valve(x)) * self.widen(x))


class Cell(nn.Module):
    def __init__(self, config: ToyConfig, index: int):
        super().__init__()
        self.pre_mix, self.mix = Scale(config.hidden_size), Mixer(config, index)
        self.pre_feed, self.feed = Scale(config.hidden_size), Feed(config)

    def forward(self, x, allowed, cache=None):
        x = x + self.mix(self.pre_mix(x), allowed, cache)
        return x + self.feed(self.pre_feed(x))


class Trunk(nn.Module):
    def __init__(self, config: ToyConfig):
        super().__init__()
        self.words = nn.Embedding(config.vocab_size, config.hidden_size)
        self.where = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.cells = nn.ModuleList(Cell(config, i) for i in range(config.num_hidden_layers))
        self.last_scale = Scale(config.hidden_size)


class ToyForCausalLM(PreTrainedModel):
    config_class = ToyConfig
    base_model_prefix = "trunk"

    def __init__(self, config: ToyConfig):
        super().__init__(config)
        self.trunk = Trunk(config)
        self.reader = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.1)

    def get_input_embeddings(self):
        return self.trunk.words

    def get_output_embeddings(self):
        return self.reader

    def forward(
        self,
        input_ids,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        use_cache=False,
        logits_to_keep=0,
        **kwargs,
    ):
        batch, length = input_ids.shape
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if attention_mask is None:
            attention_mask = torch.ones(batch, past + length, dtype=torch.long, device=input_ids.device)
        if position_ids is None:
            position_ids = torch.arange(past, past + length, device=input_ids.device)[None].expand(batch, -1)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        queries = torch.arange(past, past + length, device=input_ids.device)
        causal = torch.arange(past + length, device=input_ids.device)[None, :] <= queries[:, None]
        allowed = causal[None, None] & attention_mask.bool()[:, None, None, :]
        x = self.trunk.words(input_ids) + self.trunk.where(position_ids)
        for cell in self.trunk.cells:
            x = cell(x, allowed, past_key_values if use_cache else None)
        x = self.trunk.last_scale(x)
        logits = self.reader(x[:, -logits_to_keep:] if logits_to_keep else x)
        return CausalLMOutputWithPast(logits=logits, past_key_values=past_key_values if use_cache else None)


def make_toy_pair(seed: int = 0, **config):
    """(recipient, donor): two toy models with independent random weights plus noise on every
    parameter (so norms are not all 1), in eval mode."""
    models = []
    for offset in (0, 1):
        torch.manual_seed(seed * 2 + offset)
        model = ToyForCausalLM(ToyConfig(**config))
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.1)
        models.append(model.eval())
    return models[0], models[1]


# Known to the Auto classes, as a user's own architecture registered with transformers would be,
# so that a run config or a config alone can name it.
AutoConfig.register("toy_decoder", ToyConfig, exist_ok=True)
AutoModelForCausalLM.register(ToyConfig, ToyForCausalLM, exist_ok=True)
