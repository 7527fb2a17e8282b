"""Recipes that would crash, hang or be misread: deep nesting, NUL, alias bombs, .inf, `true` as a count."""

from __future__ import annotations

import pytest

from dspark.config.recipe_yaml import MAX_YAML_DEPTH, MAX_YAML_NODES
from dspark.config.recipes import load_recipe_text
from dspark.core.errors import RecipeError

GOOD = """\
name: tiny
engine: vllm
model:
  path: /nonexistent/tiny
  config: {model_type: qwen3, hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 4,
           num_key_value_heads: 2, head_dim: 16, vocab_size: 1000, max_position_embeddings: 4096}
"""


def _alias_bomb(levels: int, width: int) -> str:
    lines = [f"  a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("name: x\nmodel: " + "[" * 600 + "]" * 600 + "\n", f"nested deeper than {MAX_YAML_DEPTH} levels"),
        ("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, MAX_YAML_DEPTH + 5)), "nested deeper"),
        (GOOD + "description: a\x00b\n", "unprintable character #x0000"),
        (GOOD + "env:\n" + _alias_bomb(9, 9), f"expand to more than {MAX_YAML_NODES:,} values"),
        ("a: &a [*a]\n", "refers to a node that contains it"),
        (GOOD + "observations: [{metric: kv_pool_tokens, value: .inf, source: x}]\n",
         "observations[0].value: not a finite number"),
        (GOOD.replace("max_position_embeddings: 4096", "max_position_embeddings: 4096, rope_theta: .nan"),
         "model.config.rope_theta: not a finite number"),
        (GOOD + "batching: {max_num_seqs: true}\n", "batching.max_num_seqs: expected a whole number (got true)"),
        (GOOD + "context: {max_model_len: true}\n", "context.max_model_len: expected a whole number (got true)"),
        (GOOD + "kv_cache: {memory: true}\n", "kv_cache.memory: expected a whole number (got true)"),
        (GOOD + "speculative: {method: mtp, num_speculative_tokens: true}\n",
         "speculative.num_speculative_tokens: expected a whole number (got true)"),
        (GOOD + "observations: [{metric: kv_pool_tokens, value: true, source: x}]\n",
         "observations[0].value: expected a number (got true)"),
    ],
)
@pytest.mark.timeout(60)  # the bound: an expansion that did not stop would hang here; parsing takes milliseconds
def test_hostile_recipe_is_a_recipe_error_in_bounded_time(text: str, problem: str) -> None:
    with pytest.raises(RecipeError) as err:
        load_recipe_text(text, "r.yaml")
    assert problem in str(err.value)
    assert str(err.value).startswith("r.yaml")


def test_aliases_below_the_bound_still_load() -> None:
    # Aliases are ordinary YAML: a small reuse expands and validates (env values must be text, so use 1 level).
    recipe = load_recipe_text(GOOD + "env: {A: &v x, B: *v}\n", "r.yaml")
    assert dict(recipe.env) == {"A": "x", "B": "x"}
