"""One module per command: a core function that the CLI calls and that returns an exit code."""
