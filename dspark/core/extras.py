"""dspark's optional dependencies (its extras): found when a command needs one, else an exit-2 error saying how.

The core install plans and validates without them; `[plot]` (matplotlib) draws PNGs, `[hub]` (huggingface-hub)
finds a model by its repo id in the local Hugging Face cache, `[tokenizer]` (tokenizers) measures a bench
dataset's lengths with the model's tokenizer.
"""

from __future__ import annotations

from importlib.util import find_spec

from dspark.core.errors import MissingExtraError

# extra -> the module it installs (pyproject.toml [project.optional-dependencies] has the same names).
EXTRAS = {"plot": "matplotlib", "hub": "huggingface_hub", "tokenizer": "tokenizers"}


def require_extra(extra: str, purpose: str) -> None:
    """Raise MissingExtraError (exit 2) unless the extra's module is installed; imports nothing (a cheap check)."""
    if find_spec(EXTRAS[extra]) is None:
        raise MissingExtraError(
            f"{purpose} needs {EXTRAS[extra]}, which is not installed: it comes with dspark's [{extra}] extra",
            hint=f"pip install 'dspark[{extra}]' (from a clone: pip install -e '.[{extra}]')",
        )

