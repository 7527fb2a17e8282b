"""Recipes that would crash, hang or be misread: deep nesting, NUL, alias bombs, .inf, `true` as a count."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from dspark.config import recipe_yaml
from dspark.config.recipe_yaml import MAX_YAML_DEPTH, MAX_YAML_NODES
from dspark.config.recipes import load_recipe_text, shipped_recipes_dir
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


# --- libyaml fast path: the same tree, data and errors as the pure-Python parser --------------------------------

def _tree(node: Node | None, seen: set[int] | None = None) -> object:
    """A node tree as comparable values: kind, tag, scalar value, line (what dspark reads from nodes)."""
    seen = set() if seen is None else seen
    if node is None:
        return None
    if id(node) in seen:
        return ("alias", node.tag, node.start_mark.line)
    seen.add(id(node))
    if isinstance(node, ScalarNode):
        return ("scalar", node.tag, node.value, node.start_mark.line)
    if isinstance(node, SequenceNode):
        return ("seq", node.tag, node.start_mark.line, tuple(_tree(n, seen) for n in node.value))
    assert isinstance(node, MappingNode)
    return ("map", node.tag, node.start_mark.line, tuple((_tree(k, seen), _tree(v, seen)) for k, v in node.value))


def _outcome(parse: Callable[[str, str], tuple[Node | None, object]], text: str) -> tuple[object, ...]:
    try:
        root, data = parse(text, "r.yaml")
    except RecipeError as exc:
        return ("error", str(exc))
    return ("ok", _tree(root), repr(data))


def _pure(text: str, source: str) -> tuple[Node | None, object]:
    root, data = recipe_yaml._parse_pure(text, source)
    recipe_yaml._check_finite(data, (), source, root)
    return root, data


_EDITS = [*":-[]{}\"'&*!|>#,? \n\t\r", "\ufeff", "\x85", "\u2028", "\u00a0", "\x1b", "é", "~", ".inf", "&a ", "*a",
          "<<: *a", "---\n", "!!str ", "!!binary ", "? ", "\n  - ", "{a: 1}", "[1, 2]", "0o17", "1_000"]


def _mutations(text: str, count: int, seed: int) -> list[str]:
    """Seeded small edits of a recipe: characters YAML cares about inserted, spans deleted, lines re-indented."""
    rng = random.Random(seed)  # noqa: S311 - reproducible test input, no secret
    out = []
    for _ in range(count):
        t = text
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(t) + 1)
            if (op := rng.random()) < 0.45:
                t = t[:at] + rng.choice(_EDITS) + t[at:]
            elif op < 0.7:
                t = t[:at] + t[at + rng.randint(1, 5):]
            else:
                lines = t.split("\n")
                i = rng.randrange(len(lines))
                lines[i] = " " * rng.randint(0, 6) + lines[i].lstrip()
                t = "\n".join(lines)
        out.append(t)
    return out


SHIPPED_TEXTS = {p.name: p.read_text() for p in sorted(shipped_recipes_dir().glob("*.yaml"))}


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML was built without libyaml: only the pure parser runs")
@pytest.mark.parametrize("name", sorted(SHIPPED_TEXTS))
def test_shipped_recipes_take_the_libyaml_path_and_read_the_same(name: str) -> None:
    text = SHIPPED_TEXTS[name]
    assert recipe_yaml._parse_with_libyaml(text, name) is not None  # the fast path is the one taken
    assert _outcome(recipe_yaml.parse_yaml, text) == _outcome(_pure, text)


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML was built without libyaml: only the pure parser runs")
@pytest.mark.parametrize("name", sorted(SHIPPED_TEXTS))
def test_mutated_recipes_read_the_same_on_either_parser(name: str) -> None:
    # Every edit either parses to the same tree and data on both paths, or fails with the pure parser's words.
    texts = _mutations(SHIPPED_TEXTS[name], 25, seed=sum(map(ord, name)))
    assert any(recipe_yaml._parse_with_libyaml(t, name) is not None for t in texts)  # both paths are compared
    differ = [t for t in texts if _outcome(recipe_yaml.parse_yaml, t) != _outcome(_pure, t)]
    assert not differ, differ[0]


@pytest.mark.parametrize(
    "text",
    [
        "a:\tb\n",  # a tab as separation: libyaml passes it, the pure parser refuses it
        "a: [b, ? c]\n",  # a `?` key in a flow sequence: the same
        "a:\n  b: 1\n\ufeff  c: 2\n",  # a byte order mark past the start: libyaml skips it
        "".join(f"k{i}: [{i}]\n" for i in range(1100)),  # more structure than bounds libyaml's C recursion
    ],
)
def test_text_libyaml_reads_otherwise_goes_to_the_pure_parser(text: str) -> None:
    assert recipe_yaml._parse_with_libyaml(text, "r.yaml") is None
    assert _outcome(recipe_yaml.parse_yaml, text) == _outcome(_pure, text)
